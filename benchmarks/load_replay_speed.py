"""Load replay speed: simulated operations per second at one load point, and the capacity search of the default run
(3 systems x 5 methods) timed end to end.

Traces: the artifact's Config1 traces (``with_bt`` for the target and BRSD methods, ``no_bt`` for RSD) from the
shared checkout next to the repo (``../shared/heteroreason_ae``) or ``HETEROSPEC_ARTIFACT``; without one, this
repo's ``results/<run>/collect`` sequential traces (``--run``, default ``default``).

    python benchmarks/load_replay_speed.py [--workers 2] [--run default] [overrides...]

Prints the wall time (the issue's bar: under 60 s on 2 cores) and the CPU time of this process and its workers,
which does not depend on what else the machine is running.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

ARTIFACT = Path(os.environ.get("HETEROSPEC_ARTIFACT") or Path(__file__).resolve().parents[1].parent / "shared" /
                "heteroreason_ae")


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def setup(run: str, overrides: list[str]):
    """The config and paths: the artifact's traces imported into a scratch run, else this repo's run ``run``."""
    from heterospec.config import compose_config
    from heterospec.paths import RunPaths
    config1 = ARTIFACT / "Hardware" / "inputs" / "Config1"
    if config1.is_dir():
        scratch = Path(tempfile.mkdtemp(prefix="load_speed_"))
        over = [f"name={scratch.name}", f"replay.traces={config1}", "load.traces=artifact", *overrides]
        cfg = compose_config(over)
        paths = RunPaths(Path("results") / scratch.name)
        from heterospec.replay.grid.stage import import_stage
        for ts in ("with_bt", "no_bt"):
            import_stage(cfg, paths, ts)
        return cfg, paths, over, f"the artifact's Config1 traces ({config1})"
    over = [f"name={run}", "load.traces=ours", *overrides]
    cfg = compose_config(over)
    return cfg, RunPaths(Path("results") / run), over, f"our collect traces (results/{run}/collect)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2, help="processes (system x method jobs)")
    ap.add_argument("--run", default="default", help="without an artifact checkout: the run whose collects to read")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (load.requests=..., load.search_steps=...)")
    a = ap.parse_args()
    from heterospec.arrivals import Arrivals
    from heterospec.replay.load.stage import alone, load_plan, make_jobs, run_point, run_stage
    cfg, paths, over, source = setup(a.run, a.overrides)
    print(f"traces: {source}; {cfg.load.requests} counted requests per point, search steps {cfg.load.search_steps}, "
          f"curve {list(cfg.load.curve)}, profile {cfg.load.profile}")

    jobs = make_jobs(cfg, paths, over)
    t0 = time.perf_counter()
    ops = reqs = 0
    for job in jobs:       # one point per job at half its busiest device's batch-1 rate: the simulator's own speed
        rate = 0.5e3 / alone(job).busiest_ms
        run = run_point(job, load_plan(cfg), Arrivals("poisson", rate=rate, seed=0))
        ops += sum(len(r.jobs) for r in run.requests)
        reqs += len(run.requests)
    dt = time.perf_counter() - t0
    print(f"speed: {reqs} requests, {ops} operations in {dt:.2f} s: {reqs / dt:.0f} requests/s, "
          f"{ops / dt:.0f} operations/s (one process)")

    t0, c0 = time.perf_counter(), _cpu()
    cap = run_stage(cfg, paths, over, workers=a.workers)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if paths.root.name.startswith("load_speed_"):   # the scratch run of the artifact's traces
        shutil.rmtree(paths.root, ignore_errors=True)
    print(f"capacity search, {cap.num_rows} systems x methods: {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"({a.workers} workers)")


if __name__ == "__main__":
    main()
