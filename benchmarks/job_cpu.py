"""CPU time of a run's jobs, and the serving stage's share of it against its budget.

    python benchmarks/job_cpu.py [--budget 0.15] [Hydra overrides, default experiment=default]

Reads every Snakemake benchmark file of the run (``results/<run>/benchmarks/*.tsv``, and its trained models'
``train.tsv``, which live under ``results/_models/``: one row per job, ``cpu_time`` the CPU seconds of the job's
process tree, worker processes included, as Snakemake's benchmark sampled them every few seconds, so a short-lived
child's last seconds may be missed) and prints each job's wall and CPU seconds, the run's sum, and the serving
stage's (``serve`` + ``serving_validate``) share of that sum beside the budget (docs/serving.md: 15 %). Exits 1
when the share is over the budget, 2 when the run has no benchmark files.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from heterospec import stage
from heterospec.paths import ROLES

SERVING = ("serve", "serving_validate")


def jobs(files: list[Path]) -> dict[str, tuple[float, float]]:
    """{job: (wall s, CPU s)} from benchmark files (a file with several rows: a rerun's; their sum)."""
    out = {}
    for f in files:
        with f.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows or "cpu_time" not in rows[0]:
            raise SystemExit(f"{f}: expected Snakemake's benchmark columns (s, ..., cpu_time)")
        name = f"train_{f.parent.parent.name}" if f.name == "train.tsv" else f.stem
        out[name] = (sum(float(r["s"]) for r in rows), sum(float(r["cpu_time"]) for r in rows))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=0.15, help="the serving stage's share of the summed job CPU")
    args = stage.parse(p, argv)
    _, paths = stage.compose(args)
    files = sorted((paths.root / "benchmarks").glob("*.tsv"))
    files += [paths.model_root(r) / "train.tsv" for r in ROLES if (paths.model_root(r) / "train.tsv").exists()]
    found = jobs(files)
    if not found:
        print(f"{paths.root}/benchmarks: no benchmark files (run the workflow first)", file=sys.stderr)
        return 2
    total = sum(cpu for _, cpu in found.values())
    width = max(len(k) for k in found)
    print(f"{'job':<{width}}  {'wall_s':>8}  {'cpu_s':>8}  {'cpu_share':>9}")
    for name, (wall, cpu) in sorted(found.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:<{width}}  {wall:8.1f}  {cpu:8.1f}  {100 * cpu / total:8.1f}%")
    serving = sum(found[k][1] for k in SERVING if k in found)
    share = serving / total
    print(f"summed job CPU {total:.1f} s over {len(found)} jobs; serving stage ({' + '.join(SERVING)}) {serving:.1f} s "
          f"= {100 * share:.1f} % (budget {100 * args.budget:.0f} %): {'within' if share <= args.budget else 'OVER'}")
    return 0 if share <= args.budget else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
