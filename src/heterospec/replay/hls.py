"""The ``hls`` latency profile: the FPGA draft's per-token latency from the HLS stage's performance model.

The HLS stage writes ``results/<run>/hls/perf.parquet`` (``PERF_COLUMNS``; extra columns are ignored), one row per
(board, clock, model, context length):

* ``board``                 hardware config name of the FPGA (``u280``, ``v80``)
* ``clock_mhz``             kernel clock the row was modelled at
* ``model``                 the draft it models: the hub id's last path part (``Qwen2.5-0.5B-Instruct``) or the
                            models config name for a trio trained here (``tiny``)
* ``context_len``           tokens already in the draft's KV cache when the token is decoded
* ``ms_per_token``          time to decode one token at that context
* ``prefill_ms_per_token``  time to ingest one token (prefill-by-decode: shadow sync, rollback re-init);
                            null = same as ``ms_per_token``

Rows for the system's draft board, at that board's configured ``clock_mhz``, for the run's draft model are used;
between context lengths the latency is interpolated linearly, beyond them extrapolated from the last two points.
Every other call (PRM, target, the draft's prefill on the GPU, a draft that is not on an FPGA) is the roofline's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from heterospec.errors import UserError
from heterospec.store.parquet import read_columns
from heterospec.replay.roofline import RooflineProfile, _get

PERF_COLUMNS = {"board": pa.string(), "clock_mhz": pa.float64(), "model": pa.string(), "context_len": pa.int32(),
                "ms_per_token": pa.float64(), "prefill_ms_per_token": pa.float64()}


def draft_model_key(models: Any) -> str:
    """How the perf table names the run's draft: the hub id's last part, or the models config name."""
    d = models["draft"]
    return Path(str(d.path)).name if d.source == "hub" else str(models.name)


def read_perf(path: str | Path) -> pa.Table:
    """The HLS perf table, checked for the columns this profile reads (one line naming the file and column)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no HLS performance table; run the hls stage first (or use profile roofline)")
    return read_columns(path, [pa.field(name, typ) for name, typ in PERF_COLUMNS.items()])


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

    def __init__(self, system: Any, models: Any, perf: str | Path | pa.Table, overheads: dict | None = None,
                 checkpoints: dict | None = None, name: str = "hls", prefix_cache: bool = True):
        super().__init__(system, models, overheads, checkpoints, name=name, prefix_cache=prefix_cache)
        draft_hw = _get(system, "draft")
        self.decode_table = self.ingest_table = None
        if str(_get(draft_hw, "kind")) != "fpga":
            return
        t = perf if isinstance(perf, pa.Table) else read_perf(perf)
        board, clock, model = str(_get(draft_hw, "name")), _get(draft_hw, "clock_mhz"), draft_model_key(models)
        rows = [r for r in t.select(list(PERF_COLUMNS)).to_pylist() if r["board"] == board]
        where = f"HLS perf table" + (f" {perf}" if not isinstance(perf, pa.Table) else "")
        if not rows:
            raise UserError(f"{where}: no rows for board '{board}' (boards: {sorted({r['board'] for r in t.to_pylist()})})")
        rows = [r for r in rows if r["model"] == model]
        if not rows:
            raise UserError(f"{where}: no rows for board '{board}' and draft model '{model}'")
        at_clock = [r for r in rows if clock is not None and abs(r["clock_mhz"] - float(clock)) < 1e-6]
        if not at_clock:
            raise UserError(f"{where}: no rows for '{board}' at its configured {clock} MHz "
                            f"(clocks: {sorted({r['clock_mhz'] for r in rows})}); set hardware clock_mhz to one")
        at_clock.sort(key=lambda r: r["context_len"])
        ctx = np.array([r["context_len"] for r in at_clock], dtype=float)
        ms = np.array([r["ms_per_token"] for r in at_clock], dtype=float)
        pre = np.array([r["prefill_ms_per_token"] if r["prefill_ms_per_token"] is not None else r["ms_per_token"]
                        for r in at_clock], dtype=float)
        if (ms < 0).any() or (pre < 0).any():
            raise UserError(f"{where}: negative ms_per_token for '{board}'")
        self.decode_table, self.ingest_table = _PerToken(ctx, ms), _PerToken(ctx, pre)

    def draft_decode(self, kv: int, n: int) -> float:
        if self.decode_table is None:
            return super().draft_decode(kv, n)
        return self.decode_table.sum(kv, n) if n > 0 else 0.0

    def draft_prefill(self, kv: int, n: int) -> float:
        if self.ingest_table is None:
            return super().draft_prefill(kv, n)
        return self.ingest_table.sum(kv, n) if n > 0 else 0.0
