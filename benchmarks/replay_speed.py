"""Replay speed: problem-replays per second over a paper-sized grid.

The paper grid is 2,879 problems (MATH500 500, GSM8K 1,319, Gaokao2023EN 385, OlympiadBench 675) x 4 schedules
x 3 systems = 34,548 problem-replays. Only the Gaokao2023EN traces are shared in full, so the grid is built by
cycling through them (``../shared`` next to the repo), or from seeded synthetic problems when that is absent.

    python benchmarks/replay_speed.py [--problems 2879] [--workers 2] [--simpy-sample 100] [--prefetch-outcome auto]

Prints wall time (the issue's bar: under 10 s) and the CPU time of this process and its workers, which does not
depend on what else the machine is running.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import time
from pathlib import Path

from heterospec.replay.grid.simulate import simulate

from heterospec.replay.simulator.problem import TracedProblem, problems_from_steps

from heterospec.replay.simulator.system import PREFETCH_OUTCOMES, SystemParams

GAOKAO = Path(__file__).resolve().parents[1].parent / "shared/heteroreason_ae/Hardware/inputs/Config1/with_bt/gaokao2023en"
SCHEDULES = ["sequential", "step_ahead", "prefetch_only", "hetero"]


def systems():
    def sp(name, draft_kind, active, idle):
        return SystemParams(name, {"draft": active, "prm": 349.0, "target": 349.0},
                            {"draft": idle, "prm": 175.0, "target": 175.0},
                            {"draft": draft_kind, "prm": "gpu", "target": "gpu"}, 16.0, 1.0)
    return [sp("gpu3", "gpu", 349.0, 175.0), sp("hetero_u280", "fpga", 60.0, 37.0),
            sp("hetero_v80", "fpga", 120.0, 60.0)]


def synthetic(n: int, seed: int = 0) -> list[TracedProblem]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        p = TracedProblem("synthetic", str(k), rng.randint(50, 200), [], [], [], [], [], [])
        kv = 0
        for _ in range(rng.randint(3, 20)):
            o = rng.choices(["accept", "rescue", "backtrack"], [0.76, 0.21, 0.03])[0]
            d, t = rng.randint(5, 150), (rng.randint(5, 150) if o != "accept" else 0)
            rb = rng.randint(0, kv) if o == "backtrack" else 0
            for column, value in zip((p.outcome, p.draft_tokens, p.target_tokens, p.kv_verify, p.kv_target), (o, d, t, kv, kv - rb)):
                column.append(value)
            kv = kv + d if o == "accept" else kv - rb + t
            p.path_tokens.append(kv)
        out.append(p)
    return out


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=2879)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for the fast engine's grid")
    ap.add_argument("--simpy-sample", type=int, default=100, help="problems replayed with the SimPy engine too")
    ap.add_argument("--prefetch-outcome", choices=PREFETCH_OUTCOMES, default="auto",
                    help="replay.prefetch_outcome (auto: recorded, as paper_v12 takes it)")
    a = ap.parse_args()
    recorded = None if a.prefetch_outcome == "auto" else a.prefetch_outcome == "recorded"
    if GAOKAO.is_dir():
        from heterospec.replay.artifact.importer import import_traces
        from heterospec.replay.artifact.event_steps import steps_from_events
        base = problems_from_steps(steps_from_events(import_traces(GAOKAO).events))
        probs = [base[i % len(base)] for i in range(a.problems)]
        src = f"Gaokao2023EN traces cycled to {a.problems} problems"
    else:
        probs = synthetic(a.problems)
        src = f"{a.problems} synthetic problems"
    steps = sum(len(p.draft_tokens) for p in probs)
    print(f"input: {src}, {steps / len(probs):.1f} steps/problem")
    syss = systems()
    t0, c0 = time.perf_counter(), _cpu()
    out = simulate(probs, syss, SCHEDULES, "paper_v12", "fast", workers=a.workers, recorded=recorded)
    dt, cpu = time.perf_counter() - t0, _cpu() - c0
    print(f"fast : {out.num_rows} problem-replays in {dt:.2f} s = {out.num_rows / dt:,.0f} problem-replays/s "
          f"({a.workers} worker{'s' if a.workers > 1 else ''}; {cpu:.2f} s CPU)")
    if a.simpy_sample:
        sample = probs[:a.simpy_sample]
        t0 = time.perf_counter()
        out2 = simulate(sample, syss, SCHEDULES, "paper_v12", "simpy", recorded=recorded)
        dt2 = time.perf_counter() - t0
        ref = simulate(sample, syss, SCHEDULES, "paper_v12", "fast", recorded=recorded)
        worst = max(abs(x - y) for x, y in zip(out2.column("latency_ms").to_pylist(),
                                               ref.column("latency_ms").to_pylist()))
        print(f"simpy: {out2.num_rows} problem-replays in {dt2:.2f} s = {out2.num_rows / dt2:,.0f} problem-replays/s"
              f" (max |latency - fast| = {worst:.3g} ms)")


if __name__ == "__main__":
    main()
