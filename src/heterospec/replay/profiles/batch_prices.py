"""Measured prices of batched model calls: one row per (device, role, phase, batch, context, tokens) point, the
contract between what measures a batch (the offline-GPU check's price sweep, a serving run's batched calls) and what
prices one (the ``measured`` profile's batching curve in the load replay).

A point is ``batch`` sequences in one forward pass, each with ``context`` tokens already in its KV cache and
``tokens`` new ones fed (decode: 1 per sequence per iteration; prefill and score: the sequence's new tokens);
``ms`` is the pass's wall time (the median of ``repeats`` timings), ``ms_min`` / ``ms_max`` their spread.
"""
from __future__ import annotations

import pyarrow as pa

from heterospec.store.parquet import versioned

BATCH_PRICES_SCHEMA = versioned("batch_prices", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("device", pa.string(), nullable=False),     # torch device the pass ran on: cpu, cuda:0, ... (its name below)
    pa.field("device_name", pa.string(), nullable=False),  # e.g. "NVIDIA H200" or the CPU's model name
    pa.field("role", pa.string(), nullable=False),       # draft | prm | target
    pa.field("phase", pa.string(), nullable=False),      # prefill | decode | score
    pa.field("batch", pa.int32(), nullable=False),       # sequences in the pass
    pa.field("context", pa.int32(), nullable=False),     # tokens already in each sequence's KV cache
    pa.field("tokens", pa.int32(), nullable=False),      # new tokens per sequence in the pass
    pa.field("ms", pa.float64(), nullable=False),        # median wall time of the pass
    pa.field("ms_min", pa.float64(), nullable=False),
    pa.field("ms_max", pa.float64(), nullable=False),
    pa.field("repeats", pa.int32(), nullable=False),     # timings the median is taken over
    pa.field("dtype", pa.string(), nullable=False),      # float32 | bfloat16 | float16 | int8; a draft: w8a8 | kernel:<board>
])
