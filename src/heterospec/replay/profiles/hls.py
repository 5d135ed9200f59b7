"""The ``hls`` latency profile: the FPGA draft's per-token latency from the HLS stage's performance model.

The HLS stage writes ``results/<run>/hls/perf.parquet`` (:mod:`heterospec.hls.perf_table`: its schema and the
typed lookup), one row per (board, clock, model, context length). The rows of the system's draft board, at that
board's configured ``clock_mhz``, for the run's draft model (:class:`~heterospec.hls.perf_table.PerfKey`) are used;
between context lengths the latency is interpolated linearly, beyond them extrapolated from the last two points.
Every other call (PRM, target, the draft's prefill on the GPU, a draft that is not on an FPGA) is the roofline's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from heterospec.config.hardware import System
from heterospec.hls.perf_table import PerfKey, perf_curve, read_perf
from heterospec.replay.profiles.roofline import RooflineProfile

class _PerToken:
    """Cumulative per-token latency over integer contexts: sum over c = kv+1..kv+n is S[kv+n] - S[kv]."""

    def __init__(self, ctx: np.ndarray, ms: np.ndarray):
        self.ctx, self.ms = ctx, ms
        self.S = np.zeros(1)

    def at(self, c: np.ndarray) -> np.ndarray:
        x, y = self.ctx, self.ms
        v = np.interp(c, x, y)
        if len(x) >= 2:
            hi = c > x[-1]
            v[hi] = y[-1] + (c[hi] - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
        return v

    def sum(self, kv: int, n: int) -> float:
        need = kv + n + 1
        if need > len(self.S):
            size = max(need, 2 * len(self.S), 4096)
            self.S = np.concatenate([[0.0], np.cumsum(self.at(np.arange(1, size, dtype=float)))])
        return float(self.S[kv + n] - self.S[kv])


class HlsProfile(RooflineProfile):
    """The roofline profile with the FPGA draft's decode and ingest times from the HLS performance table."""

    def __init__(self, system: System, models: Any, perf: str | Path | pa.Table, overheads: dict | None = None,
                 checkpoints: dict | None = None, name: str = "hls", prefix_cache: bool = True):
        super().__init__(system, models, overheads, checkpoints, name=name, prefix_cache=prefix_cache)
        self.decode_table = self.ingest_table = None
        if system.draft.kind != "fpga":
            return
        t = perf if isinstance(perf, pa.Table) else read_perf(perf)
        where = "HLS perf table" + (f" {perf}" if not isinstance(perf, pa.Table) else "")
        curve = perf_curve(t, PerfKey.of(system.draft, models), where)
        ctx = np.array(curve.context, dtype=float)
        self.decode_table = _PerToken(ctx, np.array(curve.decode_ms, dtype=float))
        self.ingest_table = _PerToken(ctx, np.array(curve.ingest_ms, dtype=float))

    def draft_decode(self, kv: int, n: int) -> float:
        if self.decode_table is None:
            return super().draft_decode(kv, n)
        return self.decode_table.sum(kv, n) if n > 0 else 0.0

    def draft_prefill(self, kv: int, n: int) -> float:
        if self.ingest_table is None:
            return super().draft_prefill(kv, n)
        return self.ingest_table.sum(kv, n) if n > 0 else 0.0
