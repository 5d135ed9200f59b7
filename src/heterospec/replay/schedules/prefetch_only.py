"""Ablation of T2: target prefetch with partial-output reuse, but no draft pipelining."""
from __future__ import annotations

from heterospec.replay.schedules import register
from heterospec.replay.schedules._pipelined import pipelined


def prefetch_only(prob, ctx, eng) -> None:
    pipelined(prob, ctx, eng, prefetch=True, partial_cache=True, draft_pipeline=False, shadow_sync=False,
              migrate_init=False)


register("prefetch_only", prefetch_only)
