"""``heterospec replay validate``: the simulator against our own measured runs.

Reads the collect stage's traces under ``results/<run>/collect/`` (any depth; ``shard-*`` folders are skipped, the
merged tables beside them are read):

* per-call traces in ``model_calls/v1`` (:data:`heterospec.replay.steps.CALLS_SCHEMA`) — the contract; the
  executor is the file's path part named like one (``sequential``, ``step_ahead``), else ``sequential``;
* the collect stage's own ``collect_calls/v3`` with the ``collect_steps/v1`` table beside it (converted: wall =
  end_ns - start_ns; each call's step and that step's outcome as the collect run's controller decided them);
* per-problem wall latencies from ``collect_problems/v1`` (``latency_s``) when present; without them a sequential
  run's latency is the sum of its calls' wall times;
* with ``collect.repeats`` > 1, the ``collect_repeats/v1`` table beside them: every repeat's timings. Each
  problem then counts with its fastest repeat: its latency is the measured one, and the fit (calls and controller
  overheads) reads that repeat's calls. On a loaded machine it is the run least preempted, closest to what the
  replay models. (Each call shape's minimum over all repeats and problems, tried first, is an extreme of hundreds
  of calls: its fit put the mean prediction 38-60 % under the fastest runs; docs/replay.md has the numbers.)

* the ``collect_rounds/v1`` table beside them when the collect run's target writes speculated
  (``algorithm.target_decoding``, e.g. trace set ``brsd_sd``): such a trace set stays out of the plain fit, its
  sequential rounds give the fit of a round (:func:`find_rounds`, ``measured.fit_rounds``), and its problems are
  replayed with the ``<executor>_sd`` schedules at the tau and draft length of its own rounds
  (:func:`trace_speculation`).

The ``measured`` profile is fitted on the sequential executor's calls (nothing overlaps there, so each wall time
is the call's own). Steps come from the same calls; each executor's problems are replayed with the schedule of the
same name on ``replay.validate_system`` and the per-problem error printed (the issue's bar: mean |error| <= 10 %),
with a percentile-bootstrap 95 % interval over problems (:func:`mae_interval`): how far the MAE moves when the
same number of problems is drawn again, i.e. what of it is sampling noise.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.reasoning.collect_schemas import (CALLS_TRACE_SCHEMA, PROBLEMS_SCHEMA, REPEATS_SCHEMA, ROUNDS_TRACE_SCHEMA,
                                         STEPS_TRACE_SCHEMA)
from heterospec.replay.measured import MeasuredProfile, fit_calls, fit_overheads, fit_rounds, read_fit, write_fit
from heterospec.replay.steps import CALLS_SCHEMA, steps_from_calls
from heterospec.replay.system import SpeculationParams
from heterospec.store.parquet import SCHEMA_VERSION_KEY, read_parquet, versioned, write_parquet

CALLS_TAG = CALLS_SCHEMA.metadata[SCHEMA_VERSION_KEY].decode()
COLLECT_CALLS_TAG, COLLECT_STEPS_TAG, COLLECT_PROBLEMS_TAG, COLLECT_REPEATS_TAG, COLLECT_ROUNDS_TAG = (
    s.metadata[SCHEMA_VERSION_KEY].decode()
    for s in (CALLS_TRACE_SCHEMA, STEPS_TRACE_SCHEMA, PROBLEMS_SCHEMA, REPEATS_SCHEMA, ROUNDS_TRACE_SCHEMA))
MAE_BAR = 0.10

VALIDATION_SCHEMA = versioned("replay_validation", 2, [
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
])


def mae_interval(errors: list[float], resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean absolute error: the problems resampled with replacement."""
    n = len(errors)
    if n == 0:
        return float("nan"), float("nan")
    a = [abs(e) for e in errors]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(a, k=n)) / n for _ in range(resamples))
    lo = int((1 - level) / 2 * resamples)
    return means[lo], means[min(resamples - 1, resamples - 1 - lo)]


# ----------------------------------------------------------------------------- finding traces
def _tag(path: Path) -> str:
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None
    return (meta.get(SCHEMA_VERSION_KEY) or b"").decode()


def _executor_of(path: Path, root: Path, known: list[str]) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return next((p for p in reversed(parts) if p in known), "sequential")


def find_traces(root: Path, executors: list[str]) -> tuple[dict, dict]:
    """({(trace_set, executor): CALLS table}, {(trace_set, executor, dataset, problem): measured ms})."""
    if not root.is_dir():
        raise UserError(f"{root}: no collect traces yet; run the collect stage first "
                        f"(snakemake --cores all, or python -m heterospec.collect)")
    calls: dict[tuple, list[pa.Table]] = defaultdict(list)
    latency: dict[tuple, float] = {}
    for path in sorted(root.rglob("*.parquet")):
        if any(p.startswith("shard-") for p in path.relative_to(root).parts):
            continue
        tag = _tag(path)
        if tag == CALLS_TAG:
            calls[("collect", _executor_of(path, root, executors))].append(read_parquet(path, CALLS_SCHEMA))
        elif tag == COLLECT_CALLS_TAG:
            steps = _steps_beside(path)
            for key, part in _split(pq.read_table(path), ("algorithm", "executor")).items():
                calls[key].append(calls_from_collect(part, steps, path))
        elif tag == COLLECT_PROBLEMS_TAG:
            for r in pq.read_table(path, columns=["algorithm", "executor", "dataset", "problem_id",
                                                   "latency_s"]).to_pylist():
                latency[(r["algorithm"], r["executor"], r["dataset"], r["problem_id"])] = r["latency_s"] * 1e3
    if not calls:
        raise UserError(f"{root}: no per-call traces ({CALLS_TAG} or {COLLECT_CALLS_TAG} Parquet files)")
    return {k: pa.concat_tables(v) for k, v in calls.items()}, latency


def plain_traces(cfg: Any, calls: dict, latency: dict, speculative: set[str] = frozenset()) -> tuple[dict, dict]:
    """The traces the validation covers: the algorithm configs', and those of a collect variant (collect.variants)
    whose target writes speculate (``speculative``: trace sets with rounds, :func:`find_rounds`) with the run's own
    draft, which the replay prices as rounds; a variant with another draft implementation (the W8A8 export, a
    board's kernel) prices its draft's calls otherwise and stays out of the fit and the validation."""
    from heterospec.config.collect_variants import is_variant, own_draft

    def covered(ts: str) -> bool:
        return not is_variant(cfg, ts) or (ts in speculative and own_draft(cfg, ts))
    return ({k: t for k, t in calls.items() if covered(k[0])}, {k: v for k, v in latency.items() if covered(k[0])})


def find_repeats(root: Path) -> dict[tuple, list[dict]]:
    """{(trace_set, executor): rows of its ``collect_repeats/v1`` tables}, only those with more than one repeat."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for path in sorted(root.rglob("repeats.parquet")) if root.is_dir() else ():
        if any(p.startswith("shard-") for p in path.relative_to(root).parts) or _tag(path) != COLLECT_REPEATS_TAG:
            continue
        for r in read_parquet(path, REPEATS_SCHEMA).to_pylist():
            out[(r["algorithm"], r["executor"])].append(r)
    return {k: v for k, v in out.items() if any(r["repeat"] > 0 for r in v)}


def fastest_repeats(rows: list[dict]) -> dict[tuple, tuple[float, list[dict]]]:
    """{(dataset, problem): (latency ms, its call rows)} of each problem's fastest repeat (``collect_repeats/v1``
    rows of one trace set and executor)."""
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        runs[(r["dataset"], r["problem_id"], r["repeat"])].append(r)
    best: dict[tuple, tuple[float, list[dict]]] = {}
    for (ds, pid, _), rs in sorted(runs.items()):
        ms = next(r["end_ns"] for r in rs if r["role"] == "controller") / 1e6
        if (ds, pid) not in best or ms < best[ds, pid][0]:
            best[ds, pid] = (ms, [r for r in rs if r["role"] != "controller"])
    return best


def find_rounds(root: Path) -> dict[tuple, tuple[list[dict], float]]:
    """{(trace_set, executor): (rows of its ``collect_rounds/v1`` tables, summed wall ms of the speculative target
    calls they belong to)} for the trace sets whose target writes speculate (non-empty rounds tables)."""
    out: dict[tuple, tuple[list[dict], float]] = {}
    for path in sorted(root.rglob("rounds.parquet")) if root.is_dir() else ():
        if any(p.startswith("shard-") for p in path.relative_to(root).parts) or _tag(path) != COLLECT_ROUNDS_TAG:
            continue
        rows = read_parquet(path, ROUNDS_TRACE_SCHEMA).to_pylist()
        if not rows:
            continue
        calls = path.with_name("calls.parquet")
        if not calls.exists() or _tag(calls) != COLLECT_CALLS_TAG:
            raise UserError(f"{calls}: the {COLLECT_CALLS_TAG} table of {path.name} is missing; rerun the collect "
                            f"stage that wrote it")
        mine = {_call_key(r) for r in rows}
        wall = {_call_key(c): (c["end_ns"] - c["start_ns"]) / 1e6 for c in pq.read_table(calls).to_pylist()
                if c["role"] == "target" and c["phase"] == "decode" and _call_key(c) in mine}
        if len(wall) != len(mine):
            raise UserError(f"{path}: {len(mine) - len(wall)} speculative calls have rounds but no target decode row "
                            f"in {calls.name}")
        for ts_ex, rs in _by(rows, ("algorithm", "executor")).items():
            ms = sum(w for k, w in wall.items() if k[:2] == ts_ex)
            old_rows, old_ms = out.get(ts_ex, ([], 0.0))
            out[ts_ex] = (old_rows + rs, old_ms + ms)
    return out


def _call_key(r: dict) -> tuple:
    """A speculative target call's identity, shared by its collect_calls row and its rounds."""
    return r["algorithm"], r["executor"], r["dataset"], r["problem_id"], r["step_idx"], r["start_ns"]


def _by(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def trace_speculation(rows: list[dict], name: str) -> SpeculationParams:
    """The replay's :class:`SpeculationParams` for a trace set, from its recorded rounds: ``draft_len`` the mean
    tokens drafted per round (rounded), ``tau`` the smallest value at which the replay's ceil(g / tau) rounds per
    write, summed over the recorded writes of g = sum(kept) tokens, are no more than the recorded rounds (a mean of
    accepted + 1 per round would miss the writes' last, partly kept rounds)."""
    calls = _by(rows, ("dataset", "problem_id", "step_idx", "start_ns"))
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


def repeat_spread(rows: list[dict]) -> dict[tuple, float]:
    """{(dataset, problem): spread} over ``collect_repeats/v1`` rows of one trace set and executor: the mean, over
    every pair of the problem's repeats, of |a - b| / ((a + b) / 2) of their latencies. It is the error one
    measurement scores as a prediction of another of the same problem on the same models: what a replay that
    predicts every problem exactly right would still score against a single run (the noise floor of the MAE)."""
    runs: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r["role"] == "controller":
            runs[(r["dataset"], r["problem_id"])].append(r["end_ns"] / 1e6)
    return {key: pair_spread(ms) for key, ms in sorted(runs.items()) if len(ms) > 1}


def pair_spread(values: list[float]) -> float:
    """The mean, over every pair of ``values`` (two or more measurements of the same work), of |a - b| / ((a + b) / 2)."""
    pairs = [(a, b) for i, a in enumerate(values) for b in values[i + 1:]]
    return sum(abs(a - b) / ((a + b) / 2) for a, b in pairs) / len(pairs)


def draft_pace(calls: dict) -> dict[tuple, float]:
    """{(trace_set, executor): pace}: the median draft decode time per token of each collect job over that of every
    sequential job pooled. Every job runs the same draft on the same problems, so a pace away from 1 is load the
    job met that the others did not (the fit pools the sequential jobs: it cannot price both)."""
    per_token: dict[tuple, list[float]] = {}
    for key, t in calls.items():
        d = t.select(["role", "phase", "tokens_out", "wall_ms"]).to_pydict()
        per_token[key] = [w / n for r, ph, n, w in zip(d["role"], d["phase"], d["tokens_out"], d["wall_ms"])
                          if r == "draft" and ph == "decode" and n and n > 0 and w is not None]
    pooled = [v for (_, ex), vs in per_token.items() if ex == "sequential" for v in vs]
    if not pooled:
        return {}
    ref = _median(pooled)
    return {k: _median(vs) / ref for k, vs in per_token.items() if vs and ref > 0}


def _median(v: list[float]) -> float:
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def min_latency(latency: dict, repeats: dict) -> dict:
    """Each problem's measured latency (:func:`find_traces`), its minimum over its repeats where it has repeats."""
    out = dict(latency)
    for (ts, ex), rows in repeats.items():
        out.update({(ts, ex, ds, pid): ms for (ds, pid), (ms, _) in fastest_repeats(rows).items()})
    return out


def fastest_calls(rows: list[dict]) -> pa.Table:
    """CALLS_SCHEMA rows (what the fit reads) of the calls of each problem's fastest repeat."""
    return pa.Table.from_pylist([dict(dataset=ds, problem=str(pid), step_idx=r["step_idx"], call_idx=k, role=r["role"],
                                      phase=r["phase"], tokens_in=r["tokens_in"], tokens_out=r["tokens_out"],
                                      kv_len=r["kv_len"], outcome="", wall_ms=(r["end_ns"] - r["start_ns"]) / 1e6)
                                 for (ds, pid), (_, rs) in fastest_repeats(rows).items() for k, r in enumerate(rs)],
                                schema=CALLS_SCHEMA)


def _split(t: pa.Table, keys: tuple[str, ...]) -> dict[tuple, pa.Table]:
    cols = t.select(list(keys)).to_pydict()
    idx: dict[tuple, list[int]] = defaultdict(list)
    for i, k in enumerate(zip(*(cols[c] for c in keys))):
        idx[k].append(i)
    return {k: t.take(pa.array(v)) for k, v in idx.items()}


def _steps_beside(calls_path: Path) -> dict[tuple, str]:
    """The collect steps table next to a calls table: (algorithm, executor, dataset, problem, step_idx) -> outcome."""
    path = calls_path.with_name("steps.parquet")
    if not path.exists() or _tag(path) != COLLECT_STEPS_TAG:
        raise UserError(f"{path}: the {COLLECT_STEPS_TAG} table of {calls_path.name} is missing; rerun the collect "
                        f"stage that wrote it")
    cols = ["algorithm", "executor", "dataset", "problem_id", "step_idx", "outcome"]
    return {(r["algorithm"], r["executor"], r["dataset"], r["problem_id"], r["step_idx"]): r["outcome"]
            for r in read_parquet(path, STEPS_TRACE_SCHEMA).select(cols).to_pylist()}


def calls_from_collect(t: pa.Table, steps: dict[tuple, str], path: Path) -> pa.Table:
    """collect_calls/v3 rows -> model_calls/v1 rows: each call in its step, with the step's outcome from ``steps``
    (:func:`_steps_beside`); calls in time order, a step's calls together."""
    need = ["algorithm", "executor", "dataset", "problem_id", "step_idx", "role", "phase", "tokens_in", "tokens_out",
            "kv_len", "start_ns", "end_ns"]
    missing = [c for c in need if c not in t.schema.names]
    if missing:
        raise UserError(f"{path}: column '{missing[0]}' missing ({COLLECT_CALLS_TAG})")
    by_problem: dict[tuple, list[dict]] = defaultdict(list)
    for r in t.select(need).to_pylist():
        by_problem[(r["dataset"], r["problem_id"])].append(r)
    out = []
    for (ds, prob), rs in by_problem.items():
        rs.sort(key=lambda r: (r["step_idx"], r["start_ns"], r["end_ns"]))
        for k, r in enumerate(rs):
            key = (r["algorithm"], r["executor"], ds, prob, r["step_idx"])
            if key not in steps:
                raise UserError(f"{path}: {ds}/{prob} has calls of step {r['step_idx']}, which its steps table lacks")
            prompt = r["role"] == "draft" and r["phase"] == "prefill" and r["kv_len"] == 0   # the prompt going in
            out.append(dict(dataset=ds, problem=str(prob), step_idx=-1 if prompt else r["step_idx"], call_idx=k,
                            role=r["role"],
                            phase=r["phase"], tokens_in=r["tokens_in"], tokens_out=r["tokens_out"], kv_len=r["kv_len"],
                            outcome=steps[key], wall_ms=(r["end_ns"] - r["start_ns"]) / 1e6))
    return pa.Table.from_pylist(out, schema=CALLS_SCHEMA)


# ----------------------------------------------------------------------------- the measured profile
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


def sequential_rows(root: Path, latency: dict, fit_on: str | None = None, repeats: dict | None = None,
                    trace_sets: set[str] | None = None) -> tuple[list[dict], dict]:
    """The sequential executor's collect_calls/v3 rows (problem ids made unique per trace set and dataset; only
    trace set ``fit_on`` when given; only those in ``trace_sets`` when given) and their problems' measured latencies,
    for :func:`fit_overheads`; a problem with repeats gives its fastest repeat's rows."""
    cols = ["algorithm", "executor", "dataset", "problem_id", "role", "phase", "start_ns", "end_ns"]
    rows, lat = [], {}
    for path in sorted(root.rglob("*.parquet")):
        if any(p.startswith("shard-") for p in path.relative_to(root).parts) or _tag(path) != COLLECT_CALLS_TAG:
            continue
        for r in pq.read_table(path, columns=cols).to_pylist():
            if r["executor"] == "sequential" and fit_on in (None, r["algorithm"]) and \
                    (trace_sets is None or r["algorithm"] in trace_sets) and \
                    (r["algorithm"], "sequential") not in (repeats or {}):
                key = (r["algorithm"], "sequential", r["dataset"], r["problem_id"])
                r["problem_id"] = key
                rows.append(r)
                if key in latency:
                    lat[key] = latency[key]
    for (ts, ex), reps in (repeats or {}).items():
        if ex != "sequential" or fit_on not in (None, ts) or (trace_sets is not None and ts not in trace_sets):
            continue
        for (ds, pid), (ms, rs) in fastest_repeats(reps).items():
            key = (ts, ex, ds, pid)
            rows += [{**{c: r[c] for c in cols}, "problem_id": key} for r in rs]
            lat[key] = ms
    return rows, lat


def measured_profile(cfg: Any, paths: RunPaths) -> MeasuredProfile:
    """The run's measured profile: its saved fit, else fitted now from its collect traces."""
    if paths.replay_fit.exists():
        return MeasuredProfile.from_fit(read_fit(paths.replay_fit))
    rounds = find_rounds(paths.collect_root)
    calls, latency = plain_traces(cfg, *find_traces(paths.collect_root, list(cfg.replay.validate_schedules)),
                                  {ts for ts, _ in rounds})
    rounds = {k: v for k, v in rounds.items() if k in calls}
    reps = find_repeats(paths.collect_root)
    return MeasuredProfile.from_fit(fit_table(calls, root=paths.collect_root, latency=min_latency(latency, reps),
                                              repeats=reps, rounds=rounds))


# ----------------------------------------------------------------------------- validation
def sd_schedule(cfg: Any, overrides: list[str], executor: str):
    """The schedule that replays ``executor``'s runs whose target writes speculate: ``<executor>_sd``."""
    from heterospec.replay.schedules import get_schedule, schedule_names
    from heterospec.replay.group_entries import compose_schedule
    name = f"{executor}_sd"
    if name not in schedule_names():
        raise UserError(f"replay.validate_schedules: '{executor}' has no schedule '{name}' to replay the trace sets "
                        f"whose target writes speculate (collect_rounds); have {schedule_names()}")
    return get_schedule(compose_schedule(cfg, overrides, name, "replay.validate_schedules"))


def validate(cfg: Any, paths: RunPaths, overrides: list[str], fit_on: str | None = None) -> pa.Table:
    """Fit, replay each executor's problems, compare with their measured latency; print and write the errors.
    With ``fit_on`` (a trace set) the fit sees only that set's sequential calls, the others are held out, and
    nothing is written (the run's saved fit and validation stay those of the full fit)."""
    from heterospec.text_table import format_table
    from heterospec.config import hardware
    from heterospec.replay.grid import simulate
    from heterospec.replay.problem import problems_from_steps
    from heterospec.replay.schedules import get_schedule
    from heterospec.replay.group_entries import compose_schedule

    executors = list(cfg.replay.validate_schedules)
    scheds = {e: get_schedule(compose_schedule(cfg, overrides, e, "replay.validate_schedules")) for e in executors}
    rounds = find_rounds(paths.collect_root)
    calls, latency = plain_traces(cfg, *find_traces(paths.collect_root, executors), {ts for ts, _ in rounds})
    rounds = {k: v for k, v in rounds.items() if k in calls}
    reps = find_repeats(paths.collect_root)
    latency = min_latency(latency, reps)
    spread = {(ts, ex, *k): v for (ts, ex), rs in reps.items() for k, v in repeat_spread(rs).items()}
    pace = draft_pace(calls)
    for (ts, ex), rs in sorted(reps.items()):
        print(f"[replay validate] {ts}/{ex}: {1 + max(r['repeat'] for r in rs)} repeats; each problem's fastest "
              f"counts")
    fit = fit_table(calls, cfg.name, paths.collect_root, latency, fit_on, reps, rounds)
    if fit_on is None:
        write_fit(fit, paths.replay_fit)
    print(format_table(["role", "phase", "calls", "r2", "mape", "coefficients (ms)"],
                       [(r["role"], r["phase"], r["calls"], r["r2"], r["mape"],
                         ", ".join(f"{f}: {c:.4g}" for f, c in zip(r["features"], r["coefficients"])))
                        for r in fit.to_pylist()]))
    prof = MeasuredProfile.from_fit(fit)
    sysname = cfg.replay.validate_system
    system = hardware.system(sysname, cfg)
    rows = []
    for (ts, ex), t in sorted(calls.items()):
        if ex != "sequential":
            continue   # steps come from the sequential run; every executor reasons identically (greedy)
        seq_wall: dict[tuple, float] = defaultdict(float)
        for r in t.select(["dataset", "problem", "wall_ms"]).to_pylist():
            seq_wall[(r["dataset"], r["problem"])] += r["wall_ms"] or 0.0
        probs = problems_from_steps(steps_from_calls(t, ts))
        spec = None
        if (ts, ex) in rounds:   # its target writes speculate: replayed as rounds, tau and draft_len as recorded
            spec = trace_speculation(rounds[ts, ex][0], ts)
            print(f"[replay validate] {ts}: token-level rounds ({spec.strategy}), tau {spec.tau:.3f} tokens per "
                  f"round, {spec.draft_len} drafted; replayed with the *_sd schedules")
        for e in executors:
            meas = {p.problem: latency.get((ts, e, p.dataset, p.problem),
                                           seq_wall[(p.dataset, p.problem)] if e == "sequential" else None)
                    for p in probs}
            have = [p for p in probs if meas[p.problem]]
            if not have:
                print(f"[replay validate] {ts}/{e}: no measured per-problem latency (no {COLLECT_PROBLEMS_TAG} "
                      f"table for it); skipped")
                continue
            sched = scheds[e] if spec is None else sd_schedule(cfg, overrides, e)
            pred = simulate(have, [system], [sched], prof, cfg.replay.engine, speculation=spec)
            for p, r in zip(have, pred.select(["latency_ms"]).to_pylist()):
                m = meas[p.problem]
                rows.append(dict(run=cfg.name, trace_set=ts, dataset=p.dataset, problem=p.problem, executor=e,
                                 system=str(system.name), measured_ms=m, predicted_ms=r["latency_ms"],
                                 rel_error=(r["latency_ms"] - m) / m,
                                 repeat_spread=spread.get((ts, e, p.dataset, p.problem)),
                                 draft_pace=pace.get((ts, e))))
    table = pa.Table.from_pylist(rows, schema=VALIDATION_SCHEMA)
    if fit_on is None:
        write_parquet(table, paths.replay_validation, VALIDATION_SCHEMA)
    summary = defaultdict(list)
    for r in rows:
        summary[(r["trace_set"], r["executor"])].append(r)
    out = []
    for (ts, e), rs in sorted(summary.items()):
        mae = sum(abs(r["rel_error"]) for r in rs) / len(rs)
        lo, hi = mae_interval([r["rel_error"] for r in rs])
        noise = [r["repeat_spread"] for r in rs if r["repeat_spread"] is not None]
        out.append((ts + (" (fitted)" if ts == fit_on else " (held out)" if fit_on else ""), e, len(rs),
                    sum(r["measured_ms"] for r in rs) / len(rs),
                    sum(r["predicted_ms"] for r in rs) / len(rs), 100 * mae, f"{100 * lo:.1f}-{100 * hi:.1f}",
                    100 * sum(r["rel_error"] for r in rs) / len(rs),
                    f"{100 * sum(noise) / len(noise):.2f}" if noise else "-",
                    f"{rs[0]['draft_pace']:.2f}" if rs[0]["draft_pace"] is not None else "-",
                    "yes" if mae <= MAE_BAR else "NO"))
    print(format_table(["traces", "executor", "problems", "measured_ms", "predicted_ms", "mae_pct", "mae_95ci_pct",
                        "mean_bias_pct", "noise_floor_pct", "draft_pace", "within_10pct"], out))
    where = f"fit on {fit_on} only; nothing saved" if fit_on else str(paths.replay_validation)
    print(f"[replay validate] {len(rows)} problem comparisons on {system.name} -> {where}")
    return table
