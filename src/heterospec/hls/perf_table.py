"""The HLS performance table (``results/<run>/hls/perf.parquet``): the one schema the hls stage writes and the
replay's ``hls`` profile reads, and the typed lookup of one board x clock x draft model's latency by context."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.ids import board_id, clock_khz, draft_model_id
from heterospec.store.parquet import read_columns, versioned

HLS_PERF_SCHEMA = versioned("hls_perf", 2, [
    pa.field("run", pa.string()),
    pa.field("board", pa.string()),                  # heterospec.ids.board_id
    pa.field("clock_mhz", pa.float64()),             # the kernel clock the row was modelled at
    pa.field("model", pa.string()),                  # heterospec.ids.draft_model_id (or a reference model's name)
    pa.field("context_len", pa.int32()),             # tokens already in the draft's KV cache
    pa.field("ms_per_token", pa.float64()),          # decode, never below the roofline
    pa.field("prefill_ms_per_token", pa.float64()),  # ingest by decode (LM head and sampler bypassed); null: decode's
    pa.field("roofline_ms", pa.float64()),           # all weight + KV bytes at the board's full memory bandwidth
    pa.field("bandwidth_fraction", pa.float64()),    # roofline_ms / ms_per_token: share of the memory bandwidth used
    pa.field("cycles", pa.float64()),
    pa.field("rows", pa.int32()), pa.field("cols", pa.int32()),
    pa.field("weight_bytes", pa.int64()), pa.field("kv_bytes_per_token", pa.int64()),
    pa.field("design", pa.string()),                 # the hls config's name (default, serial_u280, ...)
    pa.field("closes", pa.bool_()),                  # the resource model's timing assumption holds at this clock
])
LOOKUP_COLUMNS = ("board", "clock_mhz", "model", "context_len", "ms_per_token", "prefill_ms_per_token")


@dataclass(frozen=True)
class PerfKey:
    """Which rows of the table price a draft: its board, its model, its kernel clock."""
    board: str
    model: str
    clock_khz: int

    @classmethod
    def of(cls, device: Any, models: Any) -> "PerfKey":
        """The key for a run's draft ``models`` on the FPGA ``device`` at its configured clock."""
        if device.clock_mhz is None:
            raise UserError(f"hardware '{device.name}' has no clock_mhz; the HLS perf table is keyed by it")
        return cls(board_id(device), draft_model_id(models), clock_khz(device.clock_mhz))


@dataclass(frozen=True)
class PerfCurve:
    """ms per decoded and per ingested token at each modelled context length (ascending)."""
    context: tuple
    decode_ms: tuple
    ingest_ms: tuple


def read_perf(path: str | Path) -> pa.Table:
    """The table, checked for the columns the lookup reads (one line naming the file and column)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no HLS performance table; run the hls stage first (or use profile roofline)")
    return read_columns(path, [HLS_PERF_SCHEMA.field(c) for c in LOOKUP_COLUMNS])


def perf_curve(table: pa.Table, key: PerfKey, where: str = "HLS perf table") -> PerfCurve:
    """The rows of ``key``; one line naming what is missing (board, model, or clock) when there are none."""
    rows = table.select(list(LOOKUP_COLUMNS)).to_pylist()
    on_board = [r for r in rows if r["board"] == key.board]
    if not on_board:
        raise UserError(f"{where}: no rows for board '{key.board}' (boards: {sorted({r['board'] for r in rows})})")
    of_model = [r for r in on_board if r["model"] == key.model]
    if not of_model:
        raise UserError(f"{where}: no rows for board '{key.board}' and draft model '{key.model}'")
    at_clock = sorted((r for r in of_model if clock_khz(r["clock_mhz"]) == key.clock_khz),
                      key=lambda r: r["context_len"])
    if not at_clock:
        raise UserError(f"{where}: no rows for '{key.board}' at its configured {key.clock_khz / 1000} MHz "
                        f"(clocks: {sorted({r['clock_mhz'] for r in of_model})}); set hardware clock_mhz to one")
    decode = tuple(float(r["ms_per_token"]) for r in at_clock)
    ingest = tuple(float(r["prefill_ms_per_token"] if r["prefill_ms_per_token"] is not None else r["ms_per_token"])
                   for r in at_clock)
    if min(decode + ingest) < 0:
        raise UserError(f"{where}: negative ms_per_token for '{key.board}'")
    return PerfCurve(tuple(int(r["context_len"]) for r in at_clock), decode, ingest)
