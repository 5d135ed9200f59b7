"""The simulator's input: one row per reasoning-step event of a problem, whatever produced the trace.

A step is: the draft writes ``draft_tokens``; the PRM scores them against ``kv_verify`` accepted tokens of context;
the outcome is ``accept`` (the draft's step joins the path), ``rescue`` (the target writes ``target_tokens`` from
``kv_target`` = ``kv_verify`` tokens and they join the path), or ``backtrack`` (the path is cut back to
``kv_target`` tokens, ``rollback_tokens`` fewer, and the target writes ``target_tokens`` there). ``path_tokens``
is the accepted path's length after the step; the last step's value is the problem's accepted tokens.
``target_scored``: the PRM scores the target's step too (BRSD; RSD trusts a rescue). ``rescue_tokens``: on a
backtrack, the tokens of the rescue the target wrote first (from ``kv_verify``) and the PRM rejected, which is what
made it backtrack (our BRSD traces); 0 where the trace lists that rescue as its own step (the artifact's).
``critical_tokens``: the target tokens a rejected step still had to generate after the target's prefetch, as the
trace records them (the artifact's v11 traces: 0 when the prefetch completed the step); null where the trace records
no prefetch outcome (v12 traces, ours). ``draft_kv``: the draft's context for the step's draft as the trace's own
replay rule counts it (the artifact's rules keep their own draft counter: v11's lags one accepted step and skips
target steps, v12's keeps a backtracked step's draft); null for our traces. Context lengths exclude the prompt,
as in the artifact's model.

Producers:

* :func:`heterospec.replay.artifact.event_steps.steps_from_events` — the artifact traces (importer's events table), kv
  from the v12 path-stack rule.
* :func:`steps_from_calls` — our own traces: one row per model call (``MODEL_CALLS_SCHEMA``: role, phase
  prefill/decode/score, tokens in/out, kv length, step outcome), grouped into steps.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.store.parquet import read_parquet, versioned, write_parquet

OUTCOMES = ("accept", "rescue", "backtrack")
_i32 = pa.int32()

REPLAY_STEPS_SCHEMA = versioned("replay_steps", 4, [
    pa.field("trace_set", pa.string(), nullable=False),     # which traces: with_bt / no_bt (artifact), collect, ...
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),       # unique within a dataset (file path or problem id)
    pa.field("source", pa.string(), nullable=False),        # artifact | collect
    pa.field("step_idx", _i32, nullable=False),             # 0-based order within the problem
    pa.field("logical_step", _i32, nullable=False),         # 1-based position on the reasoning path
    pa.field("outcome", pa.string(), nullable=False),       # accept | rescue | backtrack
    pa.field("prompt_tokens", _i32, nullable=False),
    pa.field("draft_tokens", _i32, nullable=False),
    pa.field("target_tokens", _i32, nullable=False),        # 0 on accept
    pa.field("kv_verify", _i32, nullable=False),            # accepted context when the PRM scores the draft step
    pa.field("kv_target", _i32, nullable=False),            # context the target writes from (after any rollback)
    pa.field("rollback_tokens", _i32, nullable=False),
    pa.field("path_tokens", _i32, nullable=False),          # accepted path length after this step
    pa.field("target_scored", pa.bool_(), nullable=False),  # the PRM scores the target's step (BRSD)
    pa.field("rescue_tokens", _i32, nullable=False),        # backtrack: the failed rescue written first (0: none)
    pa.field("critical_tokens", _i32),                      # recorded target tokens left after the prefetch (null: none)
    pa.field("draft_kv", _i32),                             # the draft's context by the trace's replay rule (null: none)
])

MODEL_CALLS_SCHEMA = versioned("model_calls", 1, [
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("step_idx", _i32, nullable=False),             # the reasoning step this call belongs to
    pa.field("call_idx", _i32, nullable=False),             # order within the problem
    pa.field("role", pa.string(), nullable=False),          # draft | prm | target
    pa.field("phase", pa.string(), nullable=False),         # prefill | decode | score
    pa.field("tokens_in", _i32, nullable=False),
    pa.field("tokens_out", _i32, nullable=False),
    pa.field("kv_len", _i32, nullable=False),               # tokens in the model's context before the call
    pa.field("outcome", pa.string(), nullable=False),       # the step's outcome (accept | rescue | backtrack)
    pa.field("wall_ms", pa.float64()),                      # measured time (null when not measured)
])


def steps_from_calls(calls: pa.Table, trace_set: str = "collect") -> pa.Table:
    """Model-call traces -> steps. Per step: the draft's decode call gives draft tokens and kv_verify; the target's
    decode calls give target tokens and kv_target (on a backtrack: the first is the failed rescue, the last the
    rewrite at the anchor); a PRM call after a target decode marks the target's step as scored; a draft/target
    prefill with ``step_idx`` < 0 gives the prompt length."""
    rows: list[dict] = []
    recs = sorted(calls.to_pylist(), key=lambda r: (r["dataset"], r["problem"], r["call_idx"]))
    by_problem: dict[tuple, list[dict]] = {}
    for r in recs:
        by_problem.setdefault((r["dataset"], r["problem"]), []).append(r)
    for (ds, prob), rs in by_problem.items():
        prompt = 0
        steps: dict[int, dict] = {}
        for r in rs:
            if r["role"] not in ("draft", "prm", "target") or r["phase"] not in ("prefill", "decode", "score"):
                raise UserError(f"{ds}/{prob}: call {r['call_idx']} has role '{r['role']}' phase '{r['phase']}'")
            if r["outcome"] not in OUTCOMES:
                raise UserError(f"{ds}/{prob}: call {r['call_idx']} has outcome '{r['outcome']}'")
            if r["phase"] == "prefill" and r["step_idx"] < 0:
                prompt = max(prompt, r["tokens_in"])
                continue
            s = steps.setdefault(r["step_idx"], dict(outcome=r["outcome"], d=None, kvv=None, targets=[],
                                                      scored=False))
            if r["role"] == "draft" and r["phase"] == "decode" and s["d"] is None:
                s["d"], s["kvv"] = r["tokens_out"], r["kv_len"]
            elif r["role"] == "target" and r["phase"] == "decode":
                s["targets"].append((r["tokens_out"], r["kv_len"]))
            elif r["role"] == "prm" and s["targets"]:
                s["scored"] = True
        path = 0
        for k, idx in enumerate(sorted(steps)):
            s = steps[idx]
            if s["d"] is None:
                raise UserError(f"{ds}/{prob}: step {idx} has no draft decode call")
            def unprompt(kv: int, prompt: int = prompt) -> int:
                return kv - prompt if kv >= prompt else kv

            kvv = unprompt(s["kvv"])
            tg = s["targets"]
            t, kvt = (tg[-1][0], unprompt(tg[-1][1])) if tg else (0, kvv)
            bt = s["outcome"] == "backtrack"
            rb = max(0, kvv - kvt) if bt else 0
            rescue = tg[0][0] if bt and len(tg) > 1 else 0
            path = (kvv + s["d"]) if s["outcome"] == "accept" else (kvt + t)
            rows.append(dict(trace_set=trace_set, dataset=ds, problem=prob, source="collect", step_idx=k,
                             logical_step=k + 1,
                             outcome=s["outcome"], prompt_tokens=prompt, draft_tokens=s["d"],
                             target_tokens=t if s["outcome"] != "accept" else 0, kv_verify=kvv,
                             kv_target=kvt, rollback_tokens=rb, path_tokens=path,
                             target_scored=s["scored"] or s["outcome"] == "accept", rescue_tokens=rescue,
                             critical_tokens=None, draft_kv=None))
    return pa.Table.from_pylist(rows, schema=REPLAY_STEPS_SCHEMA)


def write_steps(table: pa.Table, path: str | Path) -> Path:
    return write_parquet(table, path, REPLAY_STEPS_SCHEMA)


def read_steps(path: str | Path) -> pa.Table:
    return read_parquet(path, REPLAY_STEPS_SCHEMA)
