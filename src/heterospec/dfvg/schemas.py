"""Versioned Parquet schemas of DFVG's collection: one row per verification round, one per generation."""
from __future__ import annotations

import pyarrow as pa

from heterospec.speculative.rounds import round_fields
from heterospec.store.parquet import versioned

DFVG_ROUNDS_SCHEMA = versioned("dfvg_rounds", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("models", pa.string(), nullable=False),           # models config name of the pair
    *round_fields("strategy", nullable=False),
    pa.field("temperature", pa.float64(), nullable=False),
    pa.field("prompt_id", pa.string(), nullable=False),
    # one verification round (heterospec.speculative.rounds.Round says what each column holds)
    *round_fields("round", "nodes", "depth", "width", "drafted", "carried", "accepted", "draft_passes", "catch_up",
                  "guess_hit", "kv_target", "kv_target_after", "kv_draft", "kv_draft_after", "draft_ms", "verify_ms",
                  "round_ms", nullable=False),
])

DFVG_GENERATIONS_SCHEMA = versioned("dfvg_generations", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("models", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),           # a strategy, target_greedy or hf_assisted
    pa.field("temperature", pa.float64(), nullable=False),
    pa.field("prompt_id", pa.string(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("new_tokens", pa.int32(), nullable=False),
    pa.field("rounds", pa.int32(), nullable=False),            # verification rounds (0 for the baselines)
    pa.field("wall_s", pa.float64(), nullable=False),
    pa.field("identical", pa.bool_(), nullable=True),          # same tokens as target_greedy (null: no reference)
    pa.field("output", pa.string(), nullable=False),
    pa.field("token_ids", pa.list_(pa.int32()), nullable=False),   # the new tokens, eos included
])

DFVG_REPLAY_SCHEMA = versioned("dfvg_replay", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("strategy", pa.string(), nullable=False),         # the traces' strategy ("plain" rows: target only)
    pa.field("design", pa.string(), nullable=False),           # fpga_gpu | gpu_only | plain
    pa.field("profile", pa.string(), nullable=False),          # roofline | hls
    pa.field("priced_as", pa.string(), nullable=False),        # models config whose shapes price the calls
    pa.field("prompt_id", pa.string(), nullable=False),
    pa.field("rounds", pa.int32(), nullable=False),
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("latency_ms", pa.float64(), nullable=False),
    pa.field("busy_fpga_ms", pa.float64(), nullable=False),
    pa.field("busy_gpu_ms", pa.float64(), nullable=False),
    pa.field("link_ms", pa.float64(), nullable=False),
    pa.field("energy_fpga_j", pa.float64(), nullable=False),
    pa.field("energy_gpu_j", pa.float64(), nullable=False),
    pa.field("energy_j", pa.float64(), nullable=False),
    pa.field("discarded_draft_ms", pa.float64(), nullable=False),   # speculative next trees thrown away (rollback)
    pa.field("guess_hits", pa.int32(), nullable=False),        # rounds whose next tree was drafted during verification
])
