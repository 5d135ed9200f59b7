"""Shadow synchronisation (T1): the draft ingests the target's step as the target ends it, not after the transfer."""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline


@mechanism("shadow_sync")
class ShadowSync(Pipeline):
    def sync_deps(self, R, L2, V2):
        return [R]
