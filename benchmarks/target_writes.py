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
from pathlib import Path

from heterospec import stage
from heterospec.config import compose_config
from heterospec.evaluate import evaluate
from heterospec.models.manifest import read_manifest
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=20)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    cfg = compose_config(args.overrides)
    paths = RunPaths.for_run(cfg, args.overrides)
    checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
    problems = load_problems(cfg.dataset, args.problems)
    strategies = args.strategies.split(",")
    print(f"{cfg.name}: {cfg.algorithm.name}, {len(problems)} problems; speedup = plain's time / this one's")
    print(f"{'executor':<12} {'prefetch':<11} {'target':<13} {'latency s':>9} {'speedup':>7} {'target s':>8} "
          f"{'speedup':>7} {'tok':>5} {'tau':>5} identical")
    for executor, prefetch in CASES:
        base = reason(cfg, checkpoints, args.overrides, "plain", executor, prefetch, problems)
        for decoding in ["plain", *strategies]:
            r = base if decoding == "plain" else reason(cfg, checkpoints, args.overrides, decoding, executor,
                                                        prefetch, problems)
            tau = sum(x["accepted"] + 1 for x in r["rounds"]) / len(r["rounds"]) if r["rounds"] else float("nan")
            print(f"{executor:<12} {'speculative' if prefetch else 'plain':<11} {decoding:<13} {r['latency']:9.2f} "
                  f"{base['latency'] / r['latency']:7.3f} {r['target_s']:8.2f} "
                  f"{base['target_s'] / max(r['target_s'], 1e-9):7.3f} {r['target_tokens']:5d} {tau:5.2f} "
                  f"{r['outputs'] == base['outputs']}", flush=True)
    ov = [*args.overrides, f"eval_limit={args.problems}"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"target_only": evaluate(compose_config(ov), paths, "synthetic", "target_only", ov,
                                        Path(tmp) / "target_only.parquet")}
        for s in strategies:
            sov = [*ov, f"algorithm.target_sd={s}"]
            runs[s] = evaluate(compose_config(sov), paths, "synthetic", "target_sd", sov, Path(tmp) / f"{s}.parquet")
    base = runs["target_only"]
    wall = sum(r["wall_s"] for r in base)
    print(f"\n{'method':<22} {'wall s':>7} {'speedup':>7} identical")
    for name, rows in runs.items():
        w = sum(r["wall_s"] for r in rows)
        label = name if name == "target_only" else f"target_sd ({name})"
        print(f"{label:<22} {w:7.2f} {wall / w:7.3f} {[r['output'] for r in rows] == [r['output'] for r in base]}")


if __name__ == "__main__":
    stage.run(main, sys.argv[1:])
