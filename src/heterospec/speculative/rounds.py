"""One verification round of token-level speculative decoding, as one typed record: what the decoder returns per
round (:class:`~heterospec.speculative.decoder.SpeculativeDecoder`), what DFVG's ``dfvg_rounds`` and the collect
stage's ``collect_rounds`` tables store, and what the replay prices (:mod:`heterospec.replay.schedules.dfvg`).

The draft proposes a tree (a chain is a tree of width 1); the target verifies it in one pass, accepts a path and adds
one token of its own. Both tables take their round columns from :data:`ROUND_COLUMNS`, so a field is named, typed and
explained once.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import pyarrow as pa


@dataclass
class Round:
    """One draft tree and the target's verification of it."""
    nodes: int = 0               # drafted tokens the target verified in the round's one pass (tree size)
    depth: int = 0               # levels of that tree (a chain: its length)
    width: int = 0               # nodes on its widest level
    drafted: int = 0             # tokens the draft proposed this round (feedback: beyond the verified window too)
    carried: int = 0             # tokens drafted in an earlier round, verified in this one (feedback's long chains)
    accepted: int = 0            # drafted tokens the target accepted (it adds one of its own)
    draft_passes: int = 0        # the draft's forward passes (one per tree level, plus its catch-up)
    catch_up: int = 0            # tokens the first draft pass ingested (what was accepted since the last one)
    guess_hit: bool | None = None  # the draft's main path accepted and its guess of the target's token right (None:
                                 # not known until the next round's first pass)
    kv_target: int = 0           # tokens in the target's KV cache before / after the round
    kv_target_after: int = 0
    kv_draft: int = 0            # tokens in the draft's KV cache before / after (after compaction)
    kv_draft_after: int = 0
    draft_ms: float = 0.0        # wall time growing the tree
    verify_ms: float = 0.0       # wall time of the target pass, the acceptance and the compaction
    round_ms: float = 0.0        # wall time of the whole round
    round: int = 0               # 0, 1, ... within its generation or call
    strategy: str = ""           # chain | hf_heuristic | feedback | tree
    kept: int | None = None      # collect: of the round's tokens, those the step kept (it may end inside a round)

    def row(self, **extra) -> dict:
        """The record as a table row, with ``extra`` columns (run, prompt, call) set over it."""
        return {**asdict(self), **extra}


# every Round field's column type; a table names the ones it stores (the order is the table's)
ROUND_COLUMNS = {
    "round": pa.int32(), "strategy": pa.string(), "nodes": pa.int32(), "depth": pa.int32(), "width": pa.int32(),
    "drafted": pa.int32(), "carried": pa.int32(), "accepted": pa.int32(), "kept": pa.int32(),
    "draft_passes": pa.int32(), "catch_up": pa.int32(), "guess_hit": pa.bool_(), "kv_target": pa.int32(),
    "kv_target_after": pa.int32(), "kv_draft": pa.int32(), "kv_draft_after": pa.int32(), "draft_ms": pa.float64(),
    "verify_ms": pa.float64(), "round_ms": pa.float64(),
}


def round_fields(*names: str, nullable: bool = True) -> list[pa.Field]:
    """The Parquet fields of the named :class:`Round` columns, in the order given."""
    return [pa.field(n, ROUND_COLUMNS[n], nullable=nullable) for n in names]
