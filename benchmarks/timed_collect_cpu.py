"""CPU time of the interleaved timed collect against the block-wise collects of the same calls.

    python benchmarks/timed_collect_cpu.py [--rounds 2] [--limit 50] [Hydra overrides, default experiment=default]

The timed job (``python -m heterospec.collect timed``) runs every algorithm x executor x repeat of the experiment's
timed collects in one session; before it, each configuration was a job of its own (``python -m heterospec.collect
run``), one session each. Both make the same calls. Each round runs the timed job, then the block-wise jobs one
after another, on the first ``--limit`` problems, each under a run name of its own (``cpu_timed<k>``,
``cpu_block<k>``: their results trees are deleted after); it needs the experiment's trained models (run the
workflow once first). It prints the machine's busy CPU seconds (``/proc/stat``: user, nice, system, irq, softirq;
worker processes included, which per-process accounting misses) over each part, so nothing else should run
meanwhile, and their ratio per round.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time


def busy_seconds() -> float:
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in cpu[1:8])
    return (user + nice + system + irq + softirq) / 100   # USER_HZ


def measure(cmds: list[list[str]]) -> tuple[float, float]:
    """(busy CPU s, wall s) of running ``cmds`` one after another."""
    b0, t0 = busy_seconds(), time.perf_counter()
    for cmd in cmds:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return busy_seconds() - b0, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--limit", type=int, default=50, help="problems (collect.limit)")
    p.add_argument("--dataset", default="synthetic")
    p.add_argument("overrides", nargs="*", default=["experiment=default"])
    args = p.parse_args()

    from heterospec.config import compose_config
    from heterospec.config.collect_variants import timed_collects
    from heterospec.paths import RunPaths
    cfg = compose_config(args.overrides)
    configs = timed_collects(cfg)
    base = [sys.executable, "-m", "heterospec.collect"]
    common = ["--dataset", args.dataset, "--shard", "0of1", *args.overrides, f"collect.limit={args.limit}"]
    print(f"{len(configs)} timed configurations x {cfg.collect.repeats} repeats on {args.limit} problems: {configs}")
    for k in range(1, args.rounds + 1):
        timed = measure([[*base, "timed", *common, f"name=cpu_timed{k}"]])
        block = measure([[*base, "run", "--algorithm", a, "--executor", e, *common, f"name=cpu_block{k}"]
                         for a, e in configs])
        for name in (f"cpu_timed{k}", f"cpu_block{k}"):
            over = [*args.overrides, f"name={name}"]
            shutil.rmtree(RunPaths.for_run(compose_config(over), over).root, ignore_errors=True)
        print(f"round {k}: timed job {timed[0]:.1f} CPU s ({timed[1]:.0f} s wall), block-wise jobs {block[0]:.1f} "
              f"CPU s ({block[1]:.0f} s wall): timed / block-wise {timed[0] / block[0]:.3f}")


if __name__ == "__main__":
    main()
