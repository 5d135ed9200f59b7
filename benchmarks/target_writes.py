"""Speculative target writes against plain ones in BRSD/RSD, and ``target_sd`` against ``target_only``, measured on
this machine (issue 23): wall time, the target's own decode time, and whether the outputs are identical.

    python benchmarks/target_writes.py --problems 20 experiment=ci
    python benchmarks/target_writes.py --problems 50 --strategies chain,tree experiment=default

Needs the run's trio (``snakemake --cores all --config experiment=...``, or ``python -m heterospec.models train``).
Each target decoding runs the run's algorithm over the same problems in worker processes, as the collect stage
does: ``sequential``, and ``step_ahead`` with the prefetch plain and speculative. Timings on a shared machine move
with its load: run it on a quiet one, and compare rows taken close together.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from heterospec import stage
from heterospec.config import compose_config
from heterospec.evaluate import evaluate
from heterospec.models.role_manifest import read_manifest
from heterospec.paths import ROLES, RunPaths
from heterospec.reasoning.session import Session
from heterospec.speculative.strategies import STRATEGIES
from heterospec.tasks import load_problems

CASES = [("sequential", False), ("step_ahead", False), ("step_ahead", True)]


def reason(cfg, checkpoints, overrides, decoding: str, executor: str, prefetch: bool, problems) -> dict:
    alg = compose_config([*overrides, f"algorithm.target_decoding={decoding}",
                          f"algorithm.speculative_prefetch={prefetch}"]).algorithm
    with Session(cfg, checkpoints, processes=True, alg=alg) as s:
        rows = [s.run(p, alg, executor) for p in problems]
    decode = [c for r in rows for c in r["calls"] if c["role"] == "target" and c["phase"] == "decode"]
    return dict(latency=sum(r["problems"][0]["latency_s"] for r in rows),
                target_s=sum(c["end_ns"] - c["start_ns"] for c in decode) / 1e9,
                target_tokens=sum(c["tokens_out"] for c in decode),
                outputs=[r["problems"][0]["output"] for r in rows],
                rounds=[r for row in rows for r in row["rounds"]])


def main(argv: list[str]) -> None:
    """Print the reasoning table (unless --target-sd-only), then the target_sd table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=20)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--target-sd-only", action="store_true", help="only target_sd against target_only (no PRM needed)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    cfg = compose_config(args.overrides)
    paths = RunPaths.for_run(cfg, args.overrides)
    problems = load_problems(cfg.dataset, args.problems)
    strategies = args.strategies.split(",")
    print(f"{cfg.name}: {cfg.algorithm.name}, {len(problems)} problems; speedup = plain's time / this one's")
    if not args.target_sd_only:
        reasoning(cfg, paths, args.overrides, strategies, problems)
    target_sd(paths, args.overrides, strategies, args.problems)


def reasoning(cfg, paths, overrides, strategies, problems) -> None:
    """The run's algorithm with each target decoding, under each executor and prefetch choice."""
    checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
    print(f"{'executor':<12} {'prefetch':<11} {'target':<13} {'latency s':>9} {'speedup':>7} {'target s':>8} "
          f"{'speedup':>7} {'tok':>5} {'tau':>5} identical")
    for executor, prefetch in CASES:
        base = reason(cfg, checkpoints, overrides, "plain", executor, prefetch, problems)
        for decoding in ["plain", *strategies]:
            r = base if decoding == "plain" else reason(cfg, checkpoints, overrides, decoding, executor, prefetch,
                                                        problems)
            tau = sum(x["accepted"] + 1 for x in r["rounds"]) / len(r["rounds"]) if r["rounds"] else float("nan")
            print(f"{executor:<12} {'speculative' if prefetch else 'plain':<11} {decoding:<13} {r['latency']:9.2f} "
                  f"{base['latency'] / r['latency']:7.3f} {r['target_s']:8.2f} "
                  f"{base['target_s'] / max(r['target_s'], 1e-9):7.3f} {r['target_tokens']:5d} {tau:5.2f} "
                  f"{r['outputs'] == base['outputs']}", flush=True)


def target_sd(paths, overrides, strategies, problems: int) -> None:
    """The evaluate stage's target_sd with each strategy against target_only on the same problems, each run right
    after a target_only run of its own (a shared machine's load drifts: each speedup compares neighbours), after one
    warm-up run."""
    ov = [*overrides, f"eval_limit={problems}"]

    def run(method: str, more: list[str], tmp: str) -> tuple[list[dict], float]:
        """The rows, and the CPU seconds this process spent (loading included): on a machine others load, CPU time
        moves far less than wall time."""
        cpu = time.process_time()
        rows = evaluate(compose_config([*ov, *more]), paths, "synthetic", method, [*ov, *more],
                        Path(tmp) / "x.parquet")
        return rows, time.process_time() - cpu

    print(f"\n{'method':<24} {'wall s':>7} {'target_only':>11} {'speedup':>7} {'cpu s':>7} {'target_only':>11} "
          f"{'speedup':>7} identical")
    with tempfile.TemporaryDirectory() as tmp:
        reference, _ = run("target_only", [], tmp)      # the warm-up, and the outputs to compare with
        for s in strategies:
            (base, bc), (rows, c) = run("target_only", [], tmp), run("target_sd", [f"algorithm.target_sd={s}"], tmp)
            w, b = sum(r["wall_s"] for r in rows), sum(r["wall_s"] for r in base)
            same = [r["output"] for r in rows] == [r["output"] for r in reference]
            print(f"{f'target_sd ({s})':<24} {w:7.2f} {b:11.2f} {b / w:7.3f} {c:7.2f} {bc:11.2f} {bc / c:7.3f} {same}",
                  flush=True)


if __name__ == "__main__":
    stage.run(main, sys.argv[1:])
