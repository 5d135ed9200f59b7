"""``heterospec replay validate``: the simulator against our own measured runs.

The ``measured`` profile is fitted on the sequential executor's calls (:mod:`heterospec.replay.traces.fit`; nothing overlaps there, so
each wall time is the call's own), read from the collect stage's traces (:mod:`heterospec.replay.traces.reader`). Steps come from the
same calls; each executor's problems are replayed with the schedule of the same name on ``replay.validate_system``
and the per-problem error printed, with a percentile-bootstrap 95 % interval over problems
(:func:`~heterospec.replay.validation.noise.mae_interval`): how far the MAE moves when the same number of problems is drawn
again, i.e. what of it is sampling noise. Trace sets whose target writes speculate are replayed with the
``<executor>_sd`` schedules at the tau and draft length of their own rounds.

Beside the per-problem error, two checks that noise cannot hide a model error from (docs/validation.md):

* **aggregate fidelity** (:func:`aggregates`): the replay's error on the mean, P50 and P90 of each trace set and
  executor's per-problem latencies, each with a paired bootstrap interval; the problems' own noise averages out of
  an aggregate, a systematic error does not. P50 and P90 by two estimators applied alike to both sides
  (:mod:`.quantiles`): the sample quantile and Harrell-Davis; the bar judges the mean and Harrell-Davis;
* **schedule-only** (``schedule_only_ms``): each problem replayed with every call priced at the time the run of that
  executor measured for it (:mod:`heterospec.replay.traces.call_times`; the step-ahead run's own calls for step_ahead), so that its error is
  the schedule model's alone.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.traces.reader import (COLLECT_PROBLEMS_TAG, fastest_calls, find_repeats, find_rounds,
                                              min_latency, overlapped_calls)
from heterospec.replay.traces.fit import fit_table, trace_speculation
from heterospec.replay.profiles.measured import MeasuredProfile, write_fit
from heterospec.replay.validation.noise import AGGREGATES, JUDGED, aggregate_error, aggregate_interval, draft_contention, draft_pace, \
    mae_interval, repeat_spread
from heterospec.replay.traces.problems import collect_traces, traced_problems
from heterospec.store.parquet import versioned, write_parquet

MAE_BAR = 0.10
AGGREGATE_BAR = 0.05       # the replay's error on the mean and the Harrell-Davis P50 and P90 (noise.JUDGED)
SCHEDULE_ONLY_BAR = 0.05   # the schedule model's per-problem error, calls priced at their own times

REPLAY_VALIDATION_SCHEMA = versioned("replay_validation", 3, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),     # the collect run's algorithm (rsd, brsd) or "collect"
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("executor", pa.string(), nullable=False),      # = the schedule replayed
    pa.field("system", pa.string(), nullable=False),
    pa.field("measured_ms", pa.float64(), nullable=False),
    pa.field("predicted_ms", pa.float64(), nullable=False),
    pa.field("rel_error", pa.float64(), nullable=False),    # (predicted - measured) / measured
    # the problem's own measurement noise (:func:`repeat_spread`); null without collect.repeats > 1
    pa.field("repeat_spread", pa.float64(), nullable=True),
    # the collect job's draft ms per token over all sequential jobs' (:func:`draft_pace`); null: no draft decodes
    pa.field("draft_pace", pa.float64(), nullable=True),
    # the problem replayed with every call at its own measured time (schedule-only check, :mod:`heterospec.replay.traces.call_times`); null
    # for trace sets whose target writes speculate
    pa.field("schedule_only_ms", pa.float64(), nullable=True),
])

REPLAY_VALIDATION_AGGREGATE_SCHEMA = versioned("replay_validation_aggregate", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),
    pa.field("executor", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    # mean | p50 | p90 (sample quantiles) | p50_hd | p90_hd (Harrell-Davis, replay.quantiles) of the per-problem latencies
    pa.field("statistic", pa.string(), nullable=False),
    pa.field("problems", pa.int32(), nullable=False),
    pa.field("measured_ms", pa.float64(), nullable=False),
    pa.field("predicted_ms", pa.float64(), nullable=False),
    pa.field("rel_error", pa.float64(), nullable=False),      # (predicted - measured) / measured, of the statistic
    pa.field("ci_low", pa.float64(), nullable=False),         # its percentile-bootstrap 95 % interval over problems
    pa.field("ci_high", pa.float64(), nullable=False),
])


def sd_schedule(cfg: Any, overrides: list[str], executor: str):
    """The schedule that replays ``executor``'s runs whose target writes speculate: ``<executor>_sd``."""
    from heterospec.replay.schedules import get_schedule, schedule_names
    from heterospec.replay.grid.entries import compose_schedule
    name = f"{executor}_sd"
    if name not in schedule_names():
        raise UserError(f"replay.validate_schedules: '{executor}' has no schedule '{name}' to replay the trace sets "
                        f"whose target writes speculate (collect_rounds); have {schedule_names()}")
    return get_schedule(compose_schedule(cfg, overrides, name, "replay.validate_schedules"))


@dataclass
class Measured:
    """What the validation compares against, read from a run's collect traces."""
    calls: dict          # (trace_set, executor) -> model_calls/v1 table
    latency: dict        # (trace_set, executor, dataset, problem) -> measured ms (the fastest repeat's)
    rounds: dict         # (trace_set, executor) -> (collect_rounds rows, their calls' ms): speculative target writes
    repeats: dict        # (trace_set, executor) -> collect_repeats rows, where collect.repeats > 1
    spread: dict         # (trace_set, executor, dataset, problem) -> the problem's repeat spread (noise floor)
    pace: dict           # (trace_set, executor) -> the job's draft pace (drift)
    root: Any = None     # the collect traces' folder (the overlapped executors' own calls, for the schedule-only check)


def measured(cfg: Any, paths: RunPaths, executors: list[str]) -> Measured:
    """The traces the validation covers, each problem at its fastest repeat, with their noise statistics."""
    rounds = find_rounds(paths.collect_root)
    calls, latency = collect_traces(cfg, paths, executors, {ts for ts, _ in rounds})
    rounds = {k: v for k, v in rounds.items() if k in calls}
    reps = find_repeats(paths.collect_root)
    spread = {(ts, ex, *k): v for (ts, ex), rs in reps.items() for k, v in repeat_spread(rs).items()}
    return Measured(calls, min_latency(latency, reps), rounds, reps, spread, draft_pace(calls), paths.collect_root)


def compare(cfg: Any, overrides: list[str], m: Measured, prof: MeasuredProfile, executors: list[str]) -> list[dict]:
    """Replay every covered problem under each executor's schedule; one REPLAY_VALIDATION_SCHEMA row per problem. Steps
    come from the sequential run; every executor reasons identically (greedy)."""
    from heterospec.config import hardware
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.grid.entries import compose_schedule
    from heterospec.replay.schedules import get_schedule

    scheds = {e: get_schedule(compose_schedule(cfg, overrides, e, "replay.validate_schedules")) for e in executors}
    system = hardware.system(cfg.replay.validate_system, cfg)
    rows = []
    for (ts, ex), t in sorted(m.calls.items()):
        if ex != "sequential":
            continue
        seq_wall: dict[tuple, float] = defaultdict(float)
        for r in t.select(["dataset", "problem", "wall_ms"]).to_pylist():
            seq_wall[(r["dataset"], r["problem"])] += r["wall_ms"] or 0.0
        probs = traced_problems(t, ts)
        own = _own_calls(fastest_calls(m.repeats[ts, ex]) if (ts, ex) in m.repeats else t)
        spec = None
        if (ts, ex) in m.rounds:   # its target writes speculate: replayed as rounds, tau and draft_len as recorded
            spec = trace_speculation(m.rounds[ts, ex][0], ts)
            print(f"[replay validate] {ts}: token-level rounds ({spec.strategy}), tau {spec.tau:.3f} tokens per "
                  f"round, {spec.draft_len} drafted; replayed with the *_sd schedules")
        for e in executors:
            meas = {p.problem: m.latency.get((ts, e, p.dataset, p.problem),
                                             seq_wall[(p.dataset, p.problem)] if e == "sequential" else None)
                    for p in probs}
            have = [p for p in probs if meas[p.problem]]
            if not have:
                print(f"[replay validate] {ts}/{e}: no measured per-problem latency (no {COLLECT_PROBLEMS_TAG} "
                      f"table for it); skipped")
                continue
            sched = scheds[e] if spec is None else sd_schedule(cfg, overrides, e)
            pred = simulate(have, [system], [sched], prof, cfg.replay.engine, speculation=spec)
            alone = {} if spec is not None else schedule_only(have, own if e == "sequential" else
                                                              _overlapped(m, ts, e, system), system, sched, prof,
                                                              cfg.replay.engine, f"{ts}/{e}")
            for p, r in zip(have, pred.select(["latency_ms"]).to_pylist()):
                ms = meas[p.problem]
                rows.append(dict(run=cfg.name, trace_set=ts, dataset=p.dataset, problem=p.problem, executor=e,
                                 system=str(system.name), measured_ms=ms, predicted_ms=r["latency_ms"],
                                 rel_error=(r["latency_ms"] - ms) / ms,
                                 repeat_spread=m.spread.get((ts, e, p.dataset, p.problem)),
                                 draft_pace=m.pace.get((ts, e)), schedule_only_ms=alone.get(p.problem)))
    return rows


def _overlapped(m: Measured, ts: str, e: str, system) -> dict[tuple, list[dict]]:
    """{(dataset, problem): the calls of executor ``e``'s own run of it} (its fastest repeat's), each at its own
    work (:func:`~heterospec.replay.traces.call_times.overlapped_rows`): the schedule-only check of an overlapped executor
    prices every call at the time that very run measured for it."""
    from heterospec.replay.traces.call_times import overlapped_rows
    own = overlapped_calls(m.root, ts, e, m.repeats.get((ts, e))) if m.root is not None else {}
    return {k: overlapped_rows(rs, system.yields_to) for k, rs in own.items()}


def _own_calls(calls: pa.Table) -> dict[tuple, list[dict]]:
    """{(dataset, problem): its model_calls/v1 rows}."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in calls.to_pylist():
        out[(r["dataset"], r["problem"])].append(r)
    return out


def schedule_only(probs: list, own: dict, system, sched, fallback: MeasuredProfile, engine: str,
                  name: str) -> dict[str, float]:
    """{problem: latency ms} of each problem replayed under ``sched`` with every call at its own measured time (``own``:
    the calls of the run of that executor, :class:`~heterospec.replay.traces.call_times.TraceTimes`), the controller's time
    and work the run did not do in full priced by ``fallback``. Prints how many of the calls were the problems' own."""
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.traces.call_times import TraceTimes

    out, matched, unmatched = {}, 0, 0
    for p in probs:
        if (p.dataset, p.problem) not in own:
            continue
        tt = TraceTimes(p, own[p.dataset, p.problem], fallback)
        out[p.problem] = simulate([p], [system], [sched], tt, engine).column("latency_ms")[0].as_py()
        matched, unmatched = matched + len(tt.matched), unmatched + len(tt.unmatched)
    if matched + unmatched:
        print(f"[replay validate] {name}: schedule-only, {matched} of {matched + unmatched} distinct calls priced at "
              f"their own measured time (the rest is work the measured run did not do in full, a prefetch or a draft "
              f"that a verdict cut: the fit prices it)")
    return out


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    by = defaultdict(list)
    for r in rows:
        by[(r["trace_set"], r["executor"], r["system"])].append(r)
    return dict(sorted(by.items()))


def aggregates(rows: list[dict], run: str = "") -> list[dict]:
    """Per trace set x executor: the replay's error on the mean, P50 and P90 of the per-problem latencies, with
    percentile-bootstrap 95 % intervals over the problems (``REPLAY_VALIDATION_AGGREGATE_SCHEMA`` rows)."""
    out = []
    for (ts, e, system), rs in _groups(rows).items():
        meas, pred = [r["measured_ms"] for r in rs], [r["predicted_ms"] for r in rs]
        for stat, f in AGGREGATES.items():
            lo, hi = aggregate_interval(meas, pred, stat)
            out.append(dict(run=run or rs[0]["run"], trace_set=ts, executor=e, system=system, statistic=stat,
                            problems=len(rs), measured_ms=f(meas), predicted_ms=f(pred),
                            rel_error=aggregate_error(meas, pred, stat), ci_low=lo, ci_high=hi))
    return out


def summary(rows: list[dict], fit_on: str | None = None, agg: list[dict] | None = None) -> str:
    """Per trace set x executor: MAE with its bootstrap interval, mean bias, noise floor, draft pace and the
    schedule-only MAE; then the aggregate errors (:func:`aggregates`) with their intervals."""
    from heterospec.text_table import format_table
    out = []
    for (ts, e, _), rs in _groups(rows).items():
        mae = sum(abs(r["rel_error"]) for r in rs) / len(rs)
        lo, hi = mae_interval([r["rel_error"] for r in rs])
        noise = [r["repeat_spread"] for r in rs if r["repeat_spread"] is not None]
        alone = [abs(r["schedule_only_ms"] - r["measured_ms"]) / r["measured_ms"] for r in rs
                 if r.get("schedule_only_ms") is not None]
        out.append((ts + (" (fitted)" if ts == fit_on else " (held out)" if fit_on else ""), e, len(rs),
                    sum(r["measured_ms"] for r in rs) / len(rs),
                    sum(r["predicted_ms"] for r in rs) / len(rs), 100 * mae, f"{100 * lo:.1f}-{100 * hi:.1f}",
                    100 * sum(r["rel_error"] for r in rs) / len(rs),
                    f"{100 * sum(noise) / len(noise):.2f}" if noise else "-",
                    f"{rs[0]['draft_pace']:.2f}" if rs[0]["draft_pace"] is not None else "-",
                    f"{100 * sum(alone) / len(alone):.2f}" if alone else "-",
                    "yes" if mae <= MAE_BAR else "NO"))
    text = format_table(["traces", "executor", "problems", "measured_ms", "predicted_ms", "mae_pct", "mae_95ci_pct",
                         "mean_bias_pct", "noise_floor_pct", "draft_pace", "schedule_only_mae_pct", "within_10pct"],
                        out)
    by = defaultdict(dict)
    for a in aggregates(rows) if agg is None else agg:
        by[(a["trace_set"], a["executor"])][a["statistic"]] = a
    table = [(ts, e, *(f"{100 * a[s]['rel_error']:+.1f} ({100 * a[s]['ci_low']:+.1f} to {100 * a[s]['ci_high']:+.1f})"
                       for s in AGGREGATES),
              "yes" if all(abs(a[s]["rel_error"]) <= AGGREGATE_BAR for s in JUDGED) else "NO")
             for (ts, e), a in sorted(by.items())]
    return text + "\n" + format_table(["traces", "executor", *(f"{s}_error_pct (95% ci)" for s in AGGREGATES),
                                       f"within_{round(100 * AGGREGATE_BAR)}pct ({', '.join(JUDGED)})"], table)


def validate(cfg: Any, paths: RunPaths, overrides: list[str], fit_on: str | None = None) -> pa.Table:
    """Fit, replay each executor's problems, compare with their measured latency; print and write the errors.
    With ``fit_on`` (a trace set) the fit sees only that set's sequential calls, the others are held out, and
    nothing is written (the run's saved fit and validation stay those of the full fit)."""
    from heterospec.text_table import format_table

    executors = list(cfg.replay.validate_schedules)
    m = measured(cfg, paths, executors)
    for (ts, ex), rs in sorted(m.repeats.items()):
        print(f"[replay validate] {ts}/{ex}: {1 + max(r['repeat'] for r in rs)} repeats; each problem's fastest "
              f"counts")
    fit = fit_table(m.calls, cfg.name, paths.collect_root, m.latency, fit_on, m.repeats, m.rounds)
    if fit_on is None:
        write_fit(fit, paths.replay_fit)
    print(format_table(["role", "phase", "calls", "r2", "mape", "coefficients (ms)"],
                       [(r["role"], r["phase"], r["calls"], r["r2"], r["mape"],
                         ", ".join(f"{f}: {c:.4g}" for f, c in zip(r["features"], r["coefficients"])))
                        for r in fit.to_pylist()]))
    for ex, c in draft_contention(m.calls).items():
        if ex != "sequential":
            print(f"[replay validate] {ex}: the draft decodes at {c:.2f}x the sequential executor's time per token "
                  f"(the same problems, interleaved: what overlapping the roles costs the draft here, not drift)")
    rows = compare(cfg, overrides, m, MeasuredProfile.from_fit(fit), executors)
    table = pa.Table.from_pylist(rows, schema=REPLAY_VALIDATION_SCHEMA)
    agg = aggregates(rows, cfg.name)
    if fit_on is None:
        write_parquet(table, paths.replay_validation, REPLAY_VALIDATION_SCHEMA)
        write_parquet(agg, paths.replay_validation_aggregate, REPLAY_VALIDATION_AGGREGATE_SCHEMA)
    print(summary(rows, fit_on, agg))
    where = f"fit on {fit_on} only; nothing saved" if fit_on else str(paths.replay_validation)
    print(f"[replay validate] {len(rows)} problem comparisons on {cfg.replay.validate_system} -> {where}")
    return table
