"""Every problem x system x schedule of a replay, in this process or split over forked worker processes."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

import pyarrow as pa

from heterospec.replay.simulator import des
from heterospec.replay.simulator.engines import make_engine
from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
from heterospec.replay.simulator.problem import TracedProblem, problems_from_steps
from heterospec.config.hardware import System
from heterospec.progress import progress
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.simulator.system import Ctx, SystemParams, SpeculationParams

log = logging.getLogger("heterospec.replay")


def simulate(steps: pa.Table | list[TracedProblem], systems: Iterable[System | SystemParams], schedules: Iterable[Any],
             profile: str | LatencyProfile | Callable[[System], LatencyProfile] = "paper_v12",
             engine: str = "fast", workers: int = 1, run: str = "", recorded: bool | None = None,
             speculation: SpeculationParams | None = None) -> pa.Table:
    """Every problem x system x schedule. ``systems``: typed Systems (heterospec.config.hardware) or SystemParams; ``schedules``:
    names or ScheduleConfig-like objects; ``profile``: a name, a profile, or ``profile(system) -> profile`` for
    profiles that depend on the system's hardware. ``workers`` > 1 splits the grid over forked processes (same
    rows, same order). ``run`` fills the run column. ``recorded``: rejected steps' target work as the trace
    records it (True), simulated (False), or as the profile says (None; :class:`Ctx`). ``speculation``: how
    schedules with token-level speculation price a target write (:class:`SpeculationParams`)."""
    from heterospec.replay.schedules import get_schedule
    probs = problems_from_steps(steps) if isinstance(steps, pa.Table) else list(steps)
    scheds = [get_schedule(s) for s in schedules]
    make_engine(engine)
    jobs: list[tuple[Ctx, Any, list[TracedProblem], str]] = []
    for system in systems:
        sysp = system if isinstance(system, SystemParams) else SystemParams.of(system)
        if isinstance(profile, LatencyProfile):
            prof = profile
        elif callable(profile):
            prof = profile(system)
        else:
            prof = get_profile(profile, system=system if not isinstance(system, SystemParams) else None)
        jobs += [(Ctx(prof, sysp, recorded, speculation), sched, probs, engine, run) for sched in scheds]
    t0, big = time.perf_counter(), len(jobs) * len(probs) >= 2000
    if workers <= 1 or not big:
        parts = [_replay_job(j) for j in progress(jobs, desc="replay grid", unit="system x schedule", disable=not big)]
        out = pa.concat_tables(parts) if jobs else REPLAY_RESULTS_SCHEMA.empty_table()
    else:
        out = _in_processes(jobs, workers)
    if big:   # small grids (the validation's, the tests') stay quiet
        log.info("replay grid: %d problems x %d systems x schedules in %.1fs (%d workers)", len(probs), len(jobs),
                 time.perf_counter() - t0, workers)
    return out


def _replay_job(job: tuple) -> pa.Table:
    ctx, sched, probs, engine, run = job
    rows = []
    for prob in probs:
        m, _ = des.simulate_problem(prob, sched, ctx, engine)
        m.update(run=run, trace_set=prob.trace_set, dataset=prob.dataset, problem=prob.problem, system=ctx.system.name,
                 schedule=sched.name, profile=ctx.profile.name)
        rows.append(m)
    return pa.Table.from_pylist(rows, schema=REPLAY_RESULTS_SCHEMA)


_JOBS: list = []   # the grid, inherited by forked workers (profiles need not be picklable)


def _replay_chunk(k: int) -> pa.Table:
    return _replay_job(_JOBS[k])


def _in_processes(jobs: list, workers: int) -> pa.Table:
    """The grid split into ~4 chunks per worker (by problem), replayed in forked processes, concatenated in order."""
    import multiprocessing as mp
    per = max(1, -(-len(jobs[0][2]) * len(jobs) // (4 * workers)))
    chunks = [(ctx, sched, probs[i:i + per], eng, run) for ctx, sched, probs, eng, run in jobs
              for i in range(0, len(probs), per)]
    _JOBS[:] = chunks
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = list(progress(pool.imap(_replay_chunk, range(len(chunks)), chunksize=1), total=len(chunks),
                                  desc=f"replay grid ({workers} workers)", unit="chunk"))
    finally:
        _JOBS.clear()
    return pa.concat_tables(parts)


def speed(steps: pa.Table, systems, schedules, profile="paper_v12", engine="fast", workers=1) -> tuple[int, float]:
    """(problem-replays, seconds) for one full grid run."""
    probs = problems_from_steps(steps)
    t0 = time.perf_counter()
    out = simulate(probs, systems, schedules, profile, engine, workers)
    return out.num_rows, time.perf_counter() - t0
