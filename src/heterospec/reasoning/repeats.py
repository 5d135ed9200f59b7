"""Repeats of a problem in the collect stage (``collect.repeats``): the same steps, another set of timings.

Greedy decoding takes the same steps every time, so the calls, steps, problems and kvmu tables keep the first
repeat; with more than one, the ``repeats`` table (``collect_repeats/v1``) keeps every repeat's timings: each model
call, and the whole problem as one row of role ``controller``, phase ``problem`` (0 to its latency). The replay's
validation counts each problem with its fastest repeat (:mod:`heterospec.replay.validation.against_collect`): on a loaded machine,
the run least preempted.
"""
from __future__ import annotations

import math

from heterospec.errors import UserError

SCORE_RTOL = 1e-6   # the PRM's scores of a step in two repeats (the verdicts themselves must be identical)


def journal_name(index: int, repeat: int) -> str:
    """A problem's journal file; the first repeat's is the name a run without repeats uses."""
    return f"{index:06d}.json" if repeat == 0 else f"{index:06d}.r{repeat}.json"


def check_same_steps(first: dict, other: dict, repeat: int) -> None:
    """A repeat's rows (``Session.run``) took the first repeat's steps and wrote its output, else a UserError."""
    pid = first["problems"][0]["problem_id"]
    a, b = first["steps"], other["steps"]
    same = [(s["position"], s["outcome"]) for s in a] == [(s["position"], s["outcome"]) for s in b] and \
        first["problems"][0]["output"] == other["problems"][0]["output"]
    if same:
        same = all((x is None) == (y is None) and (x is None or math.isclose(x, y, rel_tol=SCORE_RTOL, abs_tol=1e-9))
                   for x, y in ((s["draft_score"], t["draft_score"]) for s, t in zip(a, b)))
    if not same:
        raise UserError(f"collect.repeats: repeat {repeat} of problem {pid} took other steps than repeat 0; "
                        f"repeats need deterministic decoding (algorithm.temperature 0)")


def repeat_rows(rows: dict, repeat: int) -> list[dict]:
    """The ``repeats`` table's rows of one repeat of one problem (run fields not filled)."""
    p = rows["problems"][0]
    out = [dict(problem_id=p["problem_id"], repeat=repeat, step_idx=c["step_idx"], role=c["role"],
                phase=c["phase"], tokens_in=c["tokens_in"], tokens_out=c["tokens_out"], kv_len=c["kv_len"],
                start_ns=c["start_ns"], end_ns=c["end_ns"]) for c in rows["calls"]]
    out.append(dict(problem_id=p["problem_id"], repeat=repeat, step_idx=-1, role="controller", phase="problem",
                    tokens_in=0, tokens_out=0, kv_len=0, start_ns=0, end_ns=round(p["latency_s"] * 1e9)))
    return out
