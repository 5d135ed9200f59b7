"""The embedded default's trio trained with several seeds: one row per seed, then the range.

    python benchmarks/trio_seeds.py [--seeds 0 1 2] [--dir /tmp/trio_seeds] [--collect-problems 200] [--reuse] [overrides...]

Each seed runs the workflow's own stage commands in ``--dir`` (draft and target at once, then the PRM on the
trained draft's steps, as ``snakemake --cores 2`` schedules them), then the quality report and sequential RSD
and BRSD collects. Per seed it prints accuracy draft / target / RSD / BRSD, the % of steps written by the
target under RSD and BRSD, the PRM's AUROC, false-reject and miss rate on the draft's own steps, and the trio's
training wall time (critical path: max(draft + PRM, target)), the step whose weights the draft keeps (it stops
at its ``stop_at_step_error``), and the CPU seconds of draft + PRM and of the target (what the wall times would be
on free cores). Timings depend on the machine's load; note ``uptime`` beside them.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROLES = ("draft", "prm", "target")


def stage(cwd: Path, name: str, *args: str) -> subprocess.Popen:
    """One stage command in the background, its output in ``<cwd>/<name>.log``."""
    log = open(cwd / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, stdout=log, stderr=subprocess.STDOUT)


def wait(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"{' '.join(p.args)} failed (exit {p.returncode}); see its log in the seed's directory")


def manifest_path(cwd: Path, role: str, ov: list[str]) -> Path:
    """Where ``role``'s manifest for these settings lies in ``cwd``'s results."""
    from heterospec.config import compose_config
    from heterospec.paths import RunPaths

    return cwd / RunPaths.for_run(compose_config(ov), ov).model_manifest(role)


def trained(cwd: Path, role: str, ov: list[str]) -> bool:
    """Whether ``role``'s model for these settings is already in ``cwd``'s results (its manifest exists)."""
    return manifest_path(cwd, role, ov).exists()


def manifest(cwd: Path, role: str, ov: list[str]) -> dict:
    from heterospec.models.role_manifest import read_manifest

    return read_manifest(manifest_path(cwd, role, ov))


def train(cwd: Path, role: str, ov: list[str], reuse: bool) -> subprocess.Popen | None:
    if reuse and trained(cwd, role, ov):
        print(f"  {cwd.name}: reusing the trained {role}", flush=True)
        return None
    return stage(cwd, f"train_{role}", "heterospec.models", "train", "--role", role, *ov)


def one_seed(seed: int, base: Path, overrides: list[str], problems: int, reuse: bool = False) -> dict:
    """Train the trio with ``seed``, evaluate it, run RSD and BRSD; the seed's row."""
    cwd = base / f"seed{seed}"
    cwd.mkdir(parents=True, exist_ok=True)
    run = f"trio_seed{seed}"
    ov = [*overrides, f"name={run}", f"collect.limit={problems}",
          *(f"models.{r}.train.seed={seed}" for r in ROLES)]
    t0 = time.time()
    draft, target = train(cwd, "draft", ov, reuse), train(cwd, "target", ov, reuse)
    wait(*filter(None, [draft]))
    t_draft = time.time() - t0
    prm = train(cwd, "prm", ov, reuse)
    wait(*filter(None, [prm, target]))
    train_s = time.time() - t0
    cpu = {r: manifest(cwd, r, ov)["train"] for r in ROLES}
    wait(stage(cwd, "quality", "heterospec.models", "quality", *ov))
    q = pq.read_table(cwd / "results" / run / "models" / "quality.parquet").to_pylist()[0]
    row = dict(seed=seed, draft=q["draft_accuracy"], target=q["target_accuracy"], auroc=q["prm_auroc"],
               false_reject=100 * q["prm_false_reject"], miss=100 * q["prm_miss"], train_s=train_s,
               train_draft_then_prm_s=t_draft + q["train_s_prm"], auroc_corruptions=q["prm_auroc_corruptions"],
               draft_steps=cpu["draft"].get("stopped_at") or cpu["draft"]["steps"], cpu_draft_prm=cpu["draft"]["cpu_s"] + cpu["prm"]["cpu_s"],
               cpu_target=cpu["target"]["cpu_s"])
    for alg in ("rsd", "brsd"):
        wait(stage(cwd, f"collect_{alg}", "heterospec.collect", "run", "--dataset", "synthetic", "--algorithm", alg,
                   "--executor", "sequential", "--shard", "0of1", *ov))
        t = pq.read_table(cwd / "results" / run / "collect" / "synthetic" / alg / "sequential" / "shard-0of1"
                          / "problems.parquet").to_pylist()
        row[alg] = 100 * sum(r["correct"] for r in t) / len(t)
        row[f"{alg}_target_steps"] = 100 * sum(r["target_steps"] for r in t) / sum(r["steps"] for r in t)
    return row


COLUMNS = [("seed", "{:>4}"), ("draft", "{:6.1f}"), ("target", "{:6.1f}"), ("rsd", "{:6.1f}"), ("brsd", "{:6.1f}"),
           ("rsd_target_steps", "{:6.1f}"), ("brsd_target_steps", "{:6.1f}"), ("auroc", "{:6.3f}"),
           ("false_reject", "{:6.1f}"), ("miss", "{:6.1f}"), ("auroc_corruptions", "{:6.3f}"), ("train_s", "{:6.0f}"), ("draft_steps", "{:6d}"),
           ("cpu_draft_prm", "{:6.0f}"), ("cpu_target", "{:6.0f}")]
HEADER = ("seed  draft target    RSD   BRSD  RSD-T% BRSD-T% AUROC  FR%  miss%  AUROCc train_s d_steps "
          "cpu_d+p cpu_t")


def show(row: dict) -> str:
    return "  ".join(fmt.format(row[k]) for k, fmt in COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/trio_seeds"))
    ap.add_argument("--collect-problems", type=int, default=200)
    ap.add_argument("--reuse", action="store_true",
                    help="keep a role already trained in --dir with the same settings (train_s then omits it)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to every seed")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} CPUs", flush=True)
    print(HEADER, flush=True)
    rows = []
    for seed in args.seeds:
        rows.append(one_seed(seed, args.dir, args.overrides, args.collect_problems, args.reuse))
        print(show(rows[-1]) + f"   (load {os.getloadavg()[0]:.1f})", flush=True)
    if len(rows) > 1:
        for k, fmt in COLUMNS[1:]:
            vals = [r[k] for r in rows]
            print(f"  {k:>18}: {fmt.format(min(vals)).strip()} .. {fmt.format(max(vals)).strip()}")


if __name__ == "__main__":
    main()
