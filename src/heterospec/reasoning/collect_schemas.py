"""Trace tables of the collect stage: fixed, versioned pyarrow schemas.

* ``collect_calls/v3`` — one row per model call, with the controller's step it served.
* ``collect_steps/v1`` — one row per step of the controller (a draft proposal, and the rescue and backtrack that
  followed it), with what the controller decided: the step view the replay's validation reads.
* ``collect_problems/v1`` — one row per problem.
* ``collect_kvmu/v1`` — one row per KVMU mode transition of the draft.
* ``collect_repeats/v1`` — with ``collect.repeats`` > 1, every repeat's timings (:mod:`.repeats`); else empty.
* ``collect_rounds/v1`` — one row per token-level verification round of every speculative target call
  (``algorithm.target_decoding`` a strategy); else empty.
"""
from __future__ import annotations

import pyarrow as pa

from heterospec.speculative.rounds import round_fields
from heterospec.store import versioned

_RUN = [
    pa.field("run", pa.string()),
    pa.field("models", pa.string()),         # models config name (tiny, config1, ...)
    pa.field("dataset", pa.string()),
    pa.field("algorithm", pa.string()),      # rsd | brsd
    pa.field("executor", pa.string()),       # sequential | step_ahead
    pa.field("problem_id", pa.string()),
]

COLLECT_CALLS_SCHEMA = versioned("collect_calls", 3, _RUN + [
    pa.field("step_idx", pa.int32()),        # the controller's step it served (collect_steps/v1)
    pa.field("step", pa.int32()),            # position on the reasoning path the call works on
    pa.field("attempt", pa.int32()),         # 0 draft proposal, 1 target rescue, 2 target at a backtrack anchor
    pa.field("role", pa.string()),           # draft | prm | target
    pa.field("device", pa.string()),         # torch device the role runs on
    pa.field("impl", pa.string()),           # how it computes: a torch dtype, w8a8 (the int8 reference), kernel:<board>
                                             # (the generated HLS kernel, C++ on the host); +<strategy>: speculating
    pa.field("phase", pa.string()),          # prefill | decode | score
    pa.field("tokens_in", pa.int32()),       # tokens fed to the model
    pa.field("tokens_out", pa.int32()),      # tokens generated
    pa.field("kv_len", pa.int32()),          # tokens in the model's KV cache before the call
    pa.field("start_ns", pa.int64()),        # from the problem's start, one clock for all devices
    pa.field("end_ns", pa.int64()),
    pa.field("modelled_ms", pa.float64()),   # kernel draft only: the board's modelled time for the call (hls perf model)
    pa.field("prm_score", pa.float64()),     # PRM calls only
    # draft proposals and PRM calls: the controller's verdict on the step (accept | reject | backtrack | kept);
    # target calls: why it wrote (rescue | backtrack) or what became of it (prefetch_hit | partial_reuse | cancelled)
    pa.field("outcome", pa.string()),
])

COLLECT_STEPS_SCHEMA = versioned("collect_steps", 1, _RUN + [
    pa.field("step_idx", pa.int32()),        # 0, 1, ... in the controller's order: one per draft proposal
    pa.field("position", pa.int32()),        # where on the reasoning path the draft proposed it
    pa.field("outcome", pa.string()),        # accept (the draft's step) | rescue (the target's) | backtrack
    pa.field("draft_score", pa.float64()),   # the PRM's reward for the draft's step
])

COLLECT_PROBLEMS_SCHEMA = versioned("collect_problems", 1, _RUN + [
    pa.field("answer", pa.string()),         # reference answer
    pa.field("prediction", pa.string()),     # last \boxed{} of the output
    pa.field("correct", pa.bool_()),
    pa.field("output", pa.string()),
    pa.field("stop", pa.string()),           # eos | answer | max_tokens | max_steps
    pa.field("steps", pa.int32()),           # accepted path length
    pa.field("draft_steps", pa.int32()),     # of them written by the draft
    pa.field("target_steps", pa.int32()),
    pa.field("backtracks", pa.int32()),
    pa.field("draft_tokens", pa.int32()),    # tokens the draft generated (accepted or not)
    pa.field("target_tokens", pa.int32()),   # tokens the target generated (prefetches included)
    pa.field("prm_calls", pa.int32()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("draft_processed", pa.int32()), # tokens the draft fed through its model
    pa.field("draft_ingested", pa.int32()),  # host tokens it took in: prompt, shadow sync, re-init
    pa.field("latency_s", pa.float64()),     # wall time from start until every device is idle
])

COLLECT_KVMU_SCHEMA = versioned("collect_kvmu", 1, _RUN + [
    pa.field("seq", pa.int32()),
    pa.field("t_ns", pa.int64()),            # from the problem's start
    pa.field("mode", pa.string()),           # initialisation | speculation | accept | rollback
    pa.field("valid", pa.int32()),           # end of the verified path
    pa.field("current", pa.int32()),         # end of what the cache holds
    pa.field("step_ahead", pa.int32()),      # end of a step drafted ahead of verification
    pa.field("reason", pa.string()),         # prompt | draft | step_ahead | prm | reject | backtrack | shadow_sync | host
])

COLLECT_REPEATS_SCHEMA = versioned("collect_repeats", 1, _RUN + [
    pa.field("repeat", pa.int32()),          # 0, 1, ...: the collect stage's rounds over its problems
    pa.field("step_idx", pa.int32()),        # the call's step (collect_steps/v1); -1 on the problem's row
    pa.field("role", pa.string()),           # draft | prm | target; controller: the whole problem
    pa.field("phase", pa.string()),          # prefill | decode | score; problem
    pa.field("tokens_in", pa.int32()),
    pa.field("tokens_out", pa.int32()),
    pa.field("kv_len", pa.int32()),
    pa.field("start_ns", pa.int64()),        # from the repeat's start
    pa.field("end_ns", pa.int64()),
])

COLLECT_ROUNDS_SCHEMA = versioned("collect_rounds", 1, _RUN + [
    # the speculative target call the round belongs to (its collect_calls/v3 row: same step_idx, role target, phase
    # decode, start_ns), with that call's step, attempt and outcome
    pa.field("step_idx", pa.int32()),
    pa.field("step", pa.int32()),
    pa.field("attempt", pa.int32()),
    pa.field("outcome", pa.string()),
    pa.field("start_ns", pa.int64()),
    # the round (heterospec.speculative.rounds.Round says what each column holds)
    *round_fields("round", "strategy", "nodes", "depth", "width", "drafted", "carried", "accepted", "kept",
                  "draft_passes", "draft_ms", "verify_ms", "kv_target"),
])

COLLECT_TABLES = {"calls": COLLECT_CALLS_SCHEMA, "steps": COLLECT_STEPS_SCHEMA, "problems": COLLECT_PROBLEMS_SCHEMA, "kvmu": COLLECT_KVMU_SCHEMA,
          "repeats": COLLECT_REPEATS_SCHEMA, "rounds": COLLECT_ROUNDS_SCHEMA}
