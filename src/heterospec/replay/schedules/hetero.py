"""T1+T2: the draft on the FPGA; its prompt prefilled on the target GPU and the KV state migrated over the link
once; shadow synchronisation (the draft ingests the target's tokens while the target refines); KVMU rollback
(a pointer reset, no data moved); plus everything of step_ahead."""
from __future__ import annotations

from heterospec.replay.schedules import register
from heterospec.replay.schedules._pipelined import pipelined


def hetero(prob, ctx, eng) -> None:
    pipelined(prob, ctx, eng, prefetch=True, partial_cache=True, draft_pipeline=True, shadow_sync=True,
              migrate_init=True)


register("hetero", hetero)
