"""T2 on GPUs: step-ahead target prefetch with partial-output reuse, and draft pipelining."""
from __future__ import annotations

from heterospec.replay.schedules import register
from heterospec.replay.schedules._pipelined import pipelined


def step_ahead(prob, ctx, eng) -> None:
    pipelined(prob, ctx, eng, prefetch=True, partial_cache=True, draft_pipeline=True, shadow_sync=False,
              migrate_init=False)


register("step_ahead", step_ahead)
