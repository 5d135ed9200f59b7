"""Capacities held to what the systems sustain: for every system x method of a run's load replay, the reported
capacity against every hard limit of its devices, and a replay of ``--requests`` requests at the reported capacity
under an arrival seed the search did not use (``load.seed + load.seeds``): its P99 within the SLO and the system
keeping up (docs/load.md, "Metrics and capacity"). Prints the table and one verdict line; exits 1 when a row fails.

    python benchmarks/load_capacity_check.py [--run default] [--requests 2000] [overrides...]
    python benchmarks/load_capacity_check.py --run artifact_replay experiment=artifact_replay

Reads ``results/<run>/load/capacity.parquet`` (the ``replay_load`` rule's output) and replays with the run's
config and traces; run it after the run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="default", help="the run whose load capacities to check (results/<run>/)")
    ap.add_argument("--requests", type=int, default=2000, help="counted requests of each check's replay")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides the run was made with (experiment=...)")
    a = ap.parse_args()
    from heterospec.arrivals import Arrivals
    from heterospec.config import compose_config
    from heterospec.errors import UserError
    from heterospec.paths import RunPaths
    from heterospec.replay.load.load_metrics import LOAD_CAPACITY_SCHEMA
    from heterospec.replay.load.stage import alone, hard_limits, load_plan, make_jobs, run_point
    from heterospec.store.parquet import read_parquet
    from heterospec.text_table import format_table
    over = [f"name={a.run}", *a.overrides]
    cfg = compose_config(over)
    paths = RunPaths(Path("results") / a.run)
    if not paths.load_capacity.exists():
        raise UserError(f"{paths.load_capacity}: absent; run the load replay first (snakemake --cores all, or "
                        f"python -m heterospec.replay load {' '.join(over)})")
    rows = {(r["system"], r["method"]): r for r in read_parquet(paths.load_capacity, LOAD_CAPACITY_SCHEMA).to_pylist()}
    plan = load_plan(cfg)
    seed = plan.load.seed + plan.load.seeds
    out, failed, t0 = [], 0, time.perf_counter()
    for job in make_jobs(cfg, paths, over):
        row = rows.get((job.system.name, job.method))
        if row is None:
            continue
        cap = row["capacity_rps"]
        solo = alone(job)
        limits = hard_limits(job, solo)
        under = all(cap <= v for v in limits.values())
        if cap > 0:
            run = run_point(job, plan, Arrivals("poisson", rate=cap, seed=seed, key="load.arrivals"), solo,
                            a.requests)
            p99, keeps = run.point["p99_s"], run.point["keeps_up"]
            ok = under and p99 <= row["slo_s"] and keeps
        else:
            p99, keeps, ok = float("nan"), None, under
        failed += not ok
        out.append((row["trace_set"], job.system.name, job.method, cap, min(limits.values(), default=float("inf")),
                    min(limits, key=limits.get, default="-"), row["slo_s"], p99, keeps, "ok" if ok else "FAILS"))
        print(f"[capacity check] {job.system.name}/{job.method}: {cap:.4g} req/s, P99 {p99:.4g} s "
              f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    print(format_table(["traces", "system", "method", "capacity_rps", "limit_rps", "limit_device", "slo_s",
                        f"p99_s_{a.requests}_seed{seed}", "keeps_up", "verdict"], out))
    print(f"{len(out) - failed} of {len(out)} capacities under every hard limit and sustained at {a.requests} "
          f"requests (seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
