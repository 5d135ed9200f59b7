"""A run's traces as the problems the simulator takes: the one chain from a trace table to
:class:`~heterospec.replay.simulator.problem.TracedProblem` s, for every caller.

* :func:`collect_traces`: the run's collect traces, one calls table per (algorithm, executor), plain (without the
  speculative target writes' rounds unless asked), and each problem's measured latency.
* :func:`traced_problems`: one trace table (our model calls, or the artifact's imported events) as problems.
* :func:`ours_problems`: every sequential collect of the run, as ``ours_<algorithm>``.
* :func:`run_problems`: trace sets by name: ``ours_<algorithm>`` (that algorithm's sequential collect) or an
  artifact trace set the run imported (``with_bt``, ``no_bt``).
"""
from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.artifact.event_steps import steps_from_events
from heterospec.replay.artifact.importer import read_events
from heterospec.replay.simulator.problem import TracedProblem, problems_from_steps
from heterospec.replay.simulator.steps import steps_from_calls
from heterospec.replay.traces.reader import find_traces, plain_traces

OURS = "ours_"   # trace-set prefix of our own sequential collect traces


def collect_traces(cfg: Any, paths: RunPaths, executors: Iterable[str],
                   speculative: set[str] = frozenset()) -> tuple[dict, dict]:
    """(algorithm, executor) -> calls table, and (algorithm, executor) -> {problem: latency}, of the run's collect
    traces for ``executors`` (``speculative``: the trace sets whose rounds are kept)."""
    return plain_traces(cfg, *find_traces(paths.collect_root, list(executors)), speculative)


def traced_problems(table: pa.Table, trace_set: str) -> list[TracedProblem]:
    """One trace table as problems: a model-calls table (ours) or the artifact's events table, by its columns."""
    if "status" in table.column_names:              # the artifact's events
        return problems_from_steps(steps_from_events(table, trace_set))
    return problems_from_steps(steps_from_calls(table, trace_set))


def ours_problems(cfg: Any, paths: RunPaths) -> dict[str, list[TracedProblem]]:
    """``ours_<algorithm>`` -> its problems, for every algorithm the run collected sequentially (sorted by name):
    every executor reasons identically (greedy), so the sequential run's calls are the steps."""
    calls = collect_traces(cfg, paths, cfg.collect.executors)[0]
    return {OURS + alg: traced_problems(table, OURS + alg) for (alg, ex), table in sorted(calls.items())
            if ex == "sequential"}


def run_problems(cfg: Any, paths: RunPaths, trace_sets: Iterable[str], hint: str = "") -> dict[str, list[TracedProblem]]:
    """Trace set -> its problems, for each name: ``ours_<algorithm>`` from that algorithm's sequential collect, any
    other an artifact trace set the run imported. A missing one is a one-line error (``hint``: what else to set)."""
    names = list(trace_sets)
    ours = ours_problems(cfg, paths) if any(n.startswith(OURS) for n in names) else {}
    out = {}
    for name in names:
        if name.startswith(OURS):
            if name not in ours:
                raise UserError(f"{paths.collect_root}: no sequential collect of '{name.removeprefix(OURS)}' for "
                                f"trace set {name} (collect.algorithms){hint}")
            out[name] = ours[name]
            continue
        path = paths.replay_events(name)
        if not path.exists():
            raise UserError(f"{path}: not imported yet; run `python -m heterospec.replay import --trace-set {name}`{hint}")
        out[name] = traced_problems(read_events(path), name)
    return out
