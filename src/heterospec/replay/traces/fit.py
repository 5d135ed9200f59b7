"""The ``measured`` profile fitted on our own collect traces: each call shape's time on the sequential executor's
calls (each problem's fastest repeat where it has repeats), the controller's overheads, and, for trace sets whose
target writes speculate, the price of a verification round and the tau and draft length the replay uses."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.traces.reader import (group_rows, fastest_calls, find_repeats, find_rounds, min_latency,
                                              sequential_rows)
from heterospec.replay.profiles.measured import MeasuredProfile, fit_calls, fit_overheads, fit_rounds, read_fit
from heterospec.replay.simulator.system import SpeculationParams
from heterospec.replay.traces.problems import collect_traces


def trace_speculation(rows: list[dict], name: str) -> SpeculationParams:
    """The replay's :class:`SpeculationParams` for a trace set, from its recorded rounds: ``draft_len`` the mean
    tokens drafted per round (rounded), ``tau`` the smallest value at which the replay's ceil(g / tau) rounds per
    write, summed over the recorded writes of g = sum(kept) tokens, are no more than the recorded rounds (a mean of
    accepted + 1 per round would miss the writes' last, partly kept rounds)."""
    calls = group_rows(rows, ("dataset", "problem_id", "step_idx", "start_ns"))
    written = [sum(r["kept"] for r in rs) for rs in calls.values()]
    n_rounds = sum(len(rs) for rs in calls.values())
    draft_len = max(1, round(sum(r["drafted"] for r in rows) / len(rows)))
    lo, hi = 1.0, float(draft_len + 1)

    def count(tau: float) -> int:
        return sum(math.ceil(g / tau) for g in written)

    if count(hi) > n_rounds:
        lo = hi
    for _ in range(60):   # bisection: count() falls as tau grows
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if count(mid) <= n_rounds else (mid, hi)
    return SpeculationParams(hi, draft_len, str(rows[0]["strategy"]), f"collect_rounds of {name}")


def fit_table(calls: dict, run: str = "", root: Path | None = None, latency: dict | None = None,
              fit_on: str | None = None, repeats: dict | None = None, rounds: dict | None = None) -> pa.Table:
    """Fit on the sequential executor's calls (every trace set, or only ``fit_on``), else on everything there is;
    with the collect root, the controller overheads from its sequential ``collect_calls/v3`` rows too. A trace
    set with ``repeats`` (:func:`find_repeats`) gives the fit the calls of each problem's fastest repeat. Trace
    sets with token-level ``rounds`` (:func:`find_rounds`) stay out of those fits (a speculative target write is
    not a plain decode); their sequential rounds give the fit of a round (:func:`fit_rounds`)."""
    repeats, rounds = repeats or {}, rounds or {}
    if fit_on is not None:
        if fit_on not in {ts for ts, _ in calls}:
            raise UserError(f"replay validate --fit-on {fit_on}: no such trace set (have {sorted({ts for ts, _ in calls})})")
        calls = {k: t for k, t in calls.items() if k[0] == fit_on}
    spec = {ts for ts, _ in rounds}
    plain = {k: t for k, t in calls.items() if k[0] not in spec} or calls
    keys = [k for k in plain if k[1] == "sequential"] or list(plain)
    seq = [fastest_calls(repeats[k]) if k in repeats else plain[k] for k in keys]
    fit = fit_calls(pa.concat_tables(seq), run)
    rows, lat = sequential_rows(root, latency or {}, fit_on, repeats, {ts for ts, _ in plain}) \
        if root is not None else ([], {})
    parts = [fit, fit_overheads(rows, lat, run)] if rows else [fit]
    if rounds:
        use = [v for k, v in rounds.items() if k[1] == "sequential"] or list(rounds.values())
        parts.append(fit_rounds([r for rs, _ in use for r in rs], sum(ms for _, ms in use), run))
    return pa.concat_tables(parts)


def measured_profile(cfg: Any, paths: RunPaths) -> MeasuredProfile:
    """The run's measured profile: its saved fit, else fitted now from its collect traces."""
    if paths.replay_fit.exists():
        return MeasuredProfile.from_fit(read_fit(paths.replay_fit))
    rounds = find_rounds(paths.collect_root)
    calls, latency = collect_traces(cfg, paths, cfg.replay.validate_schedules, {ts for ts, _ in rounds})
    rounds = {k: v for k, v in rounds.items() if k in calls}
    reps = find_repeats(paths.collect_root)
    return MeasuredProfile.from_fit(fit_table(calls, root=paths.collect_root, latency=min_latency(latency, reps),
                                              repeats=reps, rounds=rounds))
