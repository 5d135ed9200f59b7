"""Rollback (the KVMU): after a backtrack the draft rolls its KV cache back to the anchor with a pointer reset and
ingests only the target's step; without it the draft rebuilds its context from scratch (:meth:`Pipeline.restore_ms`)."""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline


@mechanism("rollback")
class Rollback(Pipeline):
    def restore_ms(self, i):
        return self.p.draft_ingest(self.prob.kv_target[i], self.prob.target_tokens[i])
