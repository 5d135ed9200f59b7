"""The collect stage's traces as the replay reads them, found under ``results/<run>/collect/`` (any depth;
``shard-*`` folders are skipped, the merged tables beside them are read):

* per-call traces in ``model_calls/v1`` (:data:`heterospec.replay.simulator.steps.MODEL_CALLS_SCHEMA`) — the contract; the
  executor is the file's path part named like one (``sequential``, ``step_ahead``), else ``sequential``;
* the collect stage's own ``collect_calls/v3`` with the ``collect_steps/v1`` table beside it (converted: wall =
  end_ns - start_ns; each call's step and that step's outcome as the collect run's controller decided them);
* per-problem wall latencies from ``collect_problems/v1`` (``latency_s``) when present; without them a sequential
  run's latency is the sum of its calls' wall times;
* with ``collect.repeats`` > 1, the ``collect_repeats/v1`` table beside them: every repeat's timings. Each
  problem then counts with its fastest repeat: its latency is the measured one, and the fit (calls and controller
  overheads) reads that repeat's calls. On a loaded machine it is the run least preempted, closest to what the
  replay models;
* the ``collect_rounds/v1`` table beside them when the collect run's target writes speculated
  (``algorithm.target_decoding``, e.g. trace set ``brsd_sd``).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from heterospec.errors import UserError
from heterospec.reasoning.collect_schemas import (COLLECT_CALLS_SCHEMA, COLLECT_PROBLEMS_SCHEMA, COLLECT_REPEATS_SCHEMA,
                                                  COLLECT_ROUNDS_SCHEMA, COLLECT_STEPS_SCHEMA)
from heterospec.replay.simulator.steps import MODEL_CALLS_SCHEMA
from heterospec.store.parquet import SCHEMA_VERSION_KEY, read_parquet

CALLS_TAG = MODEL_CALLS_SCHEMA.metadata[SCHEMA_VERSION_KEY].decode()
COLLECT_CALLS_TAG, COLLECT_STEPS_TAG, COLLECT_PROBLEMS_TAG, COLLECT_REPEATS_TAG, COLLECT_ROUNDS_TAG = (
    s.metadata[SCHEMA_VERSION_KEY].decode()
    for s in (COLLECT_CALLS_SCHEMA, COLLECT_STEPS_SCHEMA, COLLECT_PROBLEMS_SCHEMA, COLLECT_REPEATS_SCHEMA, COLLECT_ROUNDS_SCHEMA))


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
            calls[("collect", _executor_of(path, root, executors))].append(read_parquet(path, MODEL_CALLS_SCHEMA))
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
        for r in read_parquet(path, COLLECT_REPEATS_SCHEMA).to_pylist():
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
        rows = read_parquet(path, COLLECT_ROUNDS_SCHEMA).to_pylist()
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
        for ts_ex, rs in group_rows(rows, ("algorithm", "executor")).items():
            ms = sum(w for k, w in wall.items() if k[:2] == ts_ex)
            old_rows, old_ms = out.get(ts_ex, ([], 0.0))
            out[ts_ex] = (old_rows + rs, old_ms + ms)
    return out


def _call_key(r: dict) -> tuple:
    """A speculative target call's identity, shared by its collect_calls row and its rounds."""
    return r["algorithm"], r["executor"], r["dataset"], r["problem_id"], r["step_idx"], r["start_ns"]


def group_rows(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def min_latency(latency: dict, repeats: dict) -> dict:
    """Each problem's measured latency (:func:`find_traces`), its minimum over its repeats where it has repeats."""
    out = dict(latency)
    for (ts, ex), rows in repeats.items():
        out.update({(ts, ex, ds, pid): ms for (ds, pid), (ms, _) in fastest_repeats(rows).items()})
    return out


def fastest_calls(rows: list[dict]) -> pa.Table:
    """MODEL_CALLS_SCHEMA rows (what the fit reads) of the calls of each problem's fastest repeat."""
    return pa.Table.from_pylist([dict(dataset=ds, problem=str(pid), step_idx=r["step_idx"], call_idx=k, role=r["role"],
                                      phase=r["phase"], tokens_in=r["tokens_in"], tokens_out=r["tokens_out"],
                                      kv_len=r["kv_len"], outcome="", wall_ms=(r["end_ns"] - r["start_ns"]) / 1e6)
                                 for (ds, pid), (_, rs) in fastest_repeats(rows).items() for k, r in enumerate(rs)],
                                schema=MODEL_CALLS_SCHEMA)


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
            for r in read_parquet(path, COLLECT_STEPS_SCHEMA).select(cols).to_pylist()}


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
    return pa.Table.from_pylist(out, schema=MODEL_CALLS_SCHEMA)


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


def overlapped_calls(root: Path, trace_set: str, executor: str, repeats: list[dict] | None = None
                     ) -> dict[tuple, list[dict]]:
    """{(dataset, problem): its calls} of an overlapped executor's collect, each with its own ``call_outcome`` (a
    cancelled draft, a stopped prefetch, a prefetch hit...) and its ``start_ns`` / ``end_ns``, for the schedule-only
    check (:func:`heterospec.replay.traces.call_times.overlapped_rows`). With repeats, each problem's fastest repeat's
    timings, the outcomes taken from the first repeat's calls of the same step, role and phase in time order (a
    problem whose repeats made other calls is left out)."""
    cols = ["algorithm", "executor", "dataset", "problem_id", "step_idx", "role", "phase", "tokens_in", "tokens_out",
            "kv_len", "start_ns", "end_ns", "outcome"]
    first: dict[tuple, list[dict]] = defaultdict(list)
    for path in sorted(root.rglob("calls.parquet")) if root.is_dir() else ():
        if any(p.startswith("shard-") for p in path.relative_to(root).parts) or _tag(path) != COLLECT_CALLS_TAG:
            continue
        for r in pq.read_table(path, columns=cols).to_pylist():
            if r["algorithm"] == trace_set and r["executor"] == executor:
                first[(r["dataset"], str(r["problem_id"]))].append(r)
    timed = {(ds, str(pid)): rs for (ds, pid), (_, rs) in fastest_repeats(repeats).items()} if repeats else first
    out = {}
    for key, rs in timed.items():
        outcomes = _outcomes_by_rank(first.get(key, []), rs)
        if outcomes is None:
            continue
        rs = sorted(rs, key=lambda r: r["start_ns"])
        out[key] = [dict(step_idx=r["step_idx"], call_idx=k, role=r["role"], phase=r["phase"],
                         tokens_in=r["tokens_in"], tokens_out=r["tokens_out"], kv_len=r["kv_len"],
                         start_ns=r["start_ns"], end_ns=r["end_ns"], call_outcome=outcomes[id(r)])
                    for k, r in enumerate(rs)]
    return out


def _outcomes_by_rank(first: list[dict], rows: list[dict]) -> dict[int, str] | None:
    """{id(row): outcome} pairing each of ``rows`` with the call of ``first`` (which carry outcomes) of the same step,
    role and phase and the same rank in time; None when the two do not hold the same calls."""
    def groups(rs):
        g: dict[tuple, list[dict]] = defaultdict(list)
        for r in sorted(rs, key=lambda r: r["start_ns"]):
            g[(r["step_idx"], r["role"], r["phase"])].append(r)
        return g
    a, b = groups(first), groups(rows)
    if {k: len(v) for k, v in a.items()} != {k: len(v) for k, v in b.items()}:
        return None
    return {id(r): f["outcome"] for k in b for f, r in zip(a[k], b[k])}
