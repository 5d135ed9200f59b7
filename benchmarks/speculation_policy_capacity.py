"""Load-aware speculation against the static methods (docs/load.md, "Load-aware speculation"): per system of the
run's load replay, each method's capacity at the SLO and its unloaded P50, for the target alone, the static step-level
methods and the adaptive ones; the adaptive ``goodput`` method against the better of the target alone and the best
static method (capacity at least that minus 5 %, unloaded P50 within 5 % of the best static method's).

    python benchmarks/speculation_policy_capacity.py [--run default] [--base rsd,brsd] [overrides...]

Replays with the run's config and traces (``results/<run>/``, after the run) and writes nothing; the search is the
load stage's (``load.seeds`` seeds, points up to ``load.max_requests``), so it takes minutes.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="default", help="the run whose traces to replay (results/<run>/)")
    ap.add_argument("--base", default="rsd,brsd", help="the step-level methods to adapt, comma-separated")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides the run was made with (experiment=...)")
    a = ap.parse_args()
    a.base = a.base.split(",")
    from heterospec.config import compose_config
    from heterospec.paths import RunPaths
    from heterospec.replay.load.stage import (ADAPTIVE, _in_workers, alone, capacity_job, load_plan, make_jobs,
                                              slo_limits)
    from heterospec.replay.load.load_metrics import percentile
    from heterospec.text_table import format_table
    over = [f"name={a.run}", *a.overrides]
    cfg = compose_config(over)
    paths = RunPaths(Path("results") / a.run)
    plan = load_plan(cfg)
    methods = ["target", *a.base, *[f"{b}_{p}" for b in a.base for p in ADAPTIVE]]
    t0 = time.perf_counter()
    jobs = make_jobs(cfg, paths, over, methods=methods)
    solo = _in_workers(alone, jobs, a.workers)
    slo = slo_limits(plan, {f"{j.system.name}/{j.method}": s.latencies for j, s in zip(jobs, solo)})

    def searched(k: int, result) -> None:
        print(f"[policy capacity] {k + 1}/{len(jobs)} {jobs[k].system.name}/{jobs[k].method}: "
              f"{result[1]['capacity_rps']:.4g} req/s ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    found = _in_workers(lambda k: capacity_job(jobs[k], plan, slo[f"{jobs[k].system.name}/{jobs[k].method}"], solo[k]),
                        list(range(len(jobs))), a.workers, searched)
    got = {(j.system.name, j.method): (f[1]["capacity_rps"], percentile(s.latencies, 50))
           for j, s, f in zip(jobs, solo, found)}
    rows, failed = [], 0
    for system in dict.fromkeys(j.system.name for j in jobs):
        for base in a.base:
            target = got[system, "target"][0]
            static_cap, static_p50 = got[system, base]
            bar = max(target, static_cap)
            for policy in ADAPTIVE:
                cap, p50 = got[system, f"{base}_{policy}"]
                ok = cap >= 0.95 * bar and abs(p50 / static_p50 - 1) <= 0.05
                failed += policy == "goodput" and not ok
                rows.append((system, f"{base}_{policy}", cap, target, static_cap, f"{100 * (cap / bar - 1):+.1f}",
                             p50, static_p50, "ok" if ok else "misses"))
    print(format_table(["system", "method", "capacity_rps", "target_rps", "static_rps", "vs_best_pct", "p50_s",
                        "static_p50_s", "bars"], rows))
    n = sum(r[1].endswith("_goodput") for r in rows)
    print(f"{n - failed} of {n} goodput methods within 5 % of the better of the target alone and the static method "
          f"(capacity) and of the static method (unloaded P50); {plan.load.seeds} seed(s), "
          f"{time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
