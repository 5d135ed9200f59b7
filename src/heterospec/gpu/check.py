"""``heterospec gpu check``: the project's GPU path on one device, end to end, in a few minutes.

On ``--device`` (cuda:0 on a GPU node; cpu here) with every role on it (a gpu3-like system on one device), the
``ci`` run's trio (from ``--models``, a ``_models`` folder) runs, in this order (the most wanted numbers first):

1. the batched-price sweep (:mod:`heterospec.replay.profiles.price_sweep`): draft, PRM and target at batch 1..64;
2. the collects of RSD / BRSD (and the speculating target) with every executor;
3. the evaluate stage's draft-only, target-only and target_sd;
4. the DFVG bench.

Everything lands under ``--out``: the run's results tree (``results/<run>/``, every table in its stage's schema),
the bench's printout, ``progress.log`` and ``summary.md`` / ``summary.json``. A rerun with the same ``--out``
resumes: finished steps are kept (the collects resume problem by problem).
"""
from __future__ import annotations

import contextlib
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import EVAL_METHODS, ROLES, RunPaths
from heterospec.store import versioned, write_parquet

DATASET = "synthetic"
GPU_CHECK_DFVG_TAU_SCHEMA = versioned("gpu_check_dfvg_tau", 1, [
    pa.field("run", pa.string()), pa.field("device", pa.string()), pa.field("strategy", pa.string()),
    pa.field("rounds", pa.int64()), pa.field("tau", pa.float64()), pa.field("acceptance", pa.float64()),
    pa.field("draft_efficiency", pa.float64()), pa.field("nodes", pa.float64()), pa.field("depth", pa.float64()),
    pa.field("draft_passes", pa.float64()),
])
GPU_CHECK_DFVG_WALL_SCHEMA = versioned("gpu_check_dfvg_wall", 1, [
    pa.field("run", pa.string()), pa.field("device", pa.string()), pa.field("method", pa.string()),
    pa.field("tokens", pa.int64()), pa.field("wall_s", pa.float64()), pa.field("tok_per_s", pa.float64()),
    pa.field("speedup_vs_target", pa.float64()), pa.field("speedup_vs_hf_assisted", pa.float64()),
    pa.field("identical", pa.string()),        # n/m prompts with exactly the target's greedy tokens; "reference"
])


class CheckProgress:
    """Progress lines on stdout and in ``progress.log``, each with the time since the check started."""

    def __init__(self, log: Path):
        self.t0 = time.perf_counter()
        self.log = log

    def __call__(self, line: str) -> None:
        text = f"[gpu check {time.perf_counter() - self.t0:6.1f} s] {line}"
        print(text, flush=True)
        with open(self.log, "a") as f:
            f.write(text + "\n")


def check_torch_device(device: str) -> str:
    """The device's name in words, or one line saying why this machine has no such device."""
    import torch

    from heterospec.replay.profiles.price_sweep import device_name
    if device == "cpu":
        return device_name(device)
    if not device.startswith("cuda:") or not device[5:].isdigit():
        raise UserError(f"--device {device}: expected cpu or cuda:N (e.g. cuda:0)")
    if not torch.cuda.is_available():
        raise UserError(f"--device {device}: this machine's PyTorch sees no CUDA device "
                        f"(torch {torch.__version__}; a CPU-only build, or no driver); --device cpu runs the check here")
    if int(device[5:]) >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device_name(device)


def run_overrides(run: str, device: str, limit: int | None) -> list[str]:
    """The check's run: ``run``'s experiment on a gpu3-like system whose three roles share ``device``."""
    out = [f"experiment={run}", "system=gpu3", *(f"system.torch_devices.{r}={device}" for r in ROLES)]
    if limit is not None:
        out += [f"collect.limit={limit}", f"eval_limit={limit}"]
    return out


def place_models(models: Path, paths: RunPaths, run: str) -> None:
    """Copy the run's trio from ``models`` (a ``_models`` folder) into the check's results tree; each manifest's
    files are checked against their sha256 before use."""
    from heterospec.models.role_manifest import read_manifest
    for role in ROLES:
        key = paths.model_keys[role]
        source, target = models / role / key, paths.model_root(role)
        if not (source / "manifest.json").exists():
            raise UserError(f"{source}/manifest.json: the {run} run's {role} is not there; train the run first "
                            f"(snakemake --cores all --config experiment={run}) or pass --models <its _models folder>")
        if not target.exists():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(".*"))
        read_manifest(paths.model_manifest(role))


def collects(cfg) -> list[tuple[str, str]]:
    """(algorithm, executor) of the run's collects that its own models run (not an int8 export or a board's
    kernel: those are the FPGA's stand-ins, not the GPU's work)."""
    from heterospec.config.collect_variants import draft_implementation, executors
    return [(a, e) for a in cfg.collect.algorithms if draft_implementation(cfg, a) == "model"
            for e in executors(cfg, a)]


class Tee:
    """Writes to a file and to another stream (the bench's printout: on screen and kept)."""

    def __init__(self, f, other):
        self.f, self.other = f, other

    def write(self, s):
        self.f.write(s)
        return self.other.write(s)

    def flush(self):
        self.f.flush()
        self.other.flush()


class Steps:
    """Runs the check's steps, each unless its outputs exist, and keeps each step's seconds in ``seconds.json`` (a
    resumed check reports the time its kept steps took when they ran)."""

    def __init__(self, say: CheckProgress, record: Path):
        self.say, self.record = say, record
        self.seconds: dict[str, float] = json.loads(record.read_text()) if record.exists() else {}

    def run(self, key: str, what: str, done: bool, fn) -> None:
        if done:
            self.say(f"{what}: done already (kept)")
            return
        self.say(f"{what} ...")
        t0 = time.perf_counter()
        fn()
        self.seconds[key] = round(time.perf_counter() - t0, 1)
        self.record.write_text(json.dumps(self.seconds, indent=1))
        self.say(f"{what}: {self.seconds[key]:.1f} s")


def check(device: str, out: Path, models: Path, run: str = "ci", limit: int | None = None,
          batches=None, contexts=None, bench_prompts: int = 20, bench_repeats: int = 2) -> dict:
    """Run the check; returns the summary (also written to ``out/summary.json`` and ``summary.md``)."""
    import torch
    import transformers

    from heterospec.config import compose_config
    from heterospec.gpu.summary import summarise
    from heterospec.replay.profiles.price_sweep import GPU_BATCHES, GPU_CONTEXTS, sweep
    from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA

    name = check_torch_device(device)
    if device == "cpu":        # as the workflow's rule prices the CPU: one thread, the roles' own cores kept free
        torch.set_num_threads(1)
    out, models = Path(out).resolve(), Path(models).resolve()
    if not models.is_dir():
        raise UserError(f"--models {models}: no such folder (a results/_models folder holding the {run} run's trio)")
    out.mkdir(parents=True, exist_ok=True)
    batches, contexts = tuple(batches or GPU_BATCHES), tuple(contexts or GPU_CONTEXTS)
    stamp = out / "check.json"
    mine = json.loads(json.dumps(dict(device=device, run=run, limit=limit, batches=batches, contexts=contexts,
                                      bench_prompts=bench_prompts, bench_repeats=bench_repeats)))
    if stamp.exists() and json.loads(stamp.read_text()) != mine:
        raise UserError(f"{out} holds a check of {stamp.read_text().strip()}; give another --out for {mine}")
    stamp.write_text(json.dumps(mine))
    say = CheckProgress(out / "progress.log")
    overrides = run_overrides(run, device, limit)
    env = dict(device=device, device_name=name, python=platform.python_version(), torch=torch.__version__,
               transformers=transformers.__version__, cuda=torch.version.cuda, overrides=overrides)
    say(f"on {device} ({name}); Python {env['python']}, torch {env['torch']}, transformers {env['transformers']}")
    steps = Steps(say, out / "seconds.json")
    t0 = time.perf_counter()
    with contextlib.chdir(out):                   # the stages write results/<run>/ under the working folder
        cfg = compose_config(overrides)
        paths = RunPaths.for_run(cfg, overrides)
        say(f"run {cfg.name}: experiment {run}, system gpu3 with draft, PRM and target on {device}")
        place_models(models, paths, run)
        prices = paths.batch_prices
        steps.run(
            "prices", f"batched prices: batch {','.join(map(str, batches))} x context {','.join(map(str, contexts))}",
            prices.exists(), lambda: write_parquet(sweep(cfg, paths, device, batches, contexts, say=say), prices,
                                                   BATCH_PRICES_SCHEMA))
        run_collects(cfg, paths, overrides, steps)
        run_evaluates(cfg, paths, overrides, steps)
        steps.run("dfvg_bench", f"DFVG bench: {bench_prompts} prompts, fastest of {bench_repeats}",
                  (paths.root / "dfvg" / "bench_wall.parquet").exists(),
                  lambda: run_bench(cfg, paths, overrides, device, bench_prompts, bench_repeats,
                                    out / "dfvg_bench.txt"))
        env["this_run_s"] = round(time.perf_counter() - t0, 1)
        summary = summarise(out, cfg.name, paths, env, steps.seconds)
    say(f"done in {env['this_run_s']:.1f} s (steps: {sum(steps.seconds.values()):.1f} s): {out / 'summary.md'} "
        f"({len(summary['tables'])} tables)")
    return summary


def run_collects(cfg, paths: RunPaths, overrides: list[str], steps: Steps) -> None:
    from heterospec.collect import merge, run_shard
    from heterospec.reasoning.workers import start_forkserver

    start_forkserver()
    for alg, ex in collects(cfg):
        def one(alg=alg, ex=ex):
            run_shard(cfg, paths, overrides, DATASET, alg, ex, "0of1")
            merge(paths, DATASET, alg, ex, 1)
        done = paths.collect_table(DATASET, alg, ex, "problems").exists()
        steps.run(f"collect_{alg}_{ex}", f"collect {DATASET}/{alg}/{ex} ({cfg.collect.limit} problems)", done, one)


def run_evaluates(cfg, paths: RunPaths, overrides: list[str], steps: Steps) -> None:
    from heterospec.evaluate import evaluate
    for method in EVAL_METHODS:
        target = paths.evaluation(DATASET, method)
        steps.run(
            f"evaluate_{method}", f"evaluate {DATASET}/{method} ({cfg.eval_limit} problems)", target.exists(),
            lambda method=method, target=target: evaluate(cfg, paths, DATASET, method, overrides, target))


def run_bench(cfg, paths: RunPaths, overrides: list[str], device: str, prompts: int, repeats: int,
              printout: Path) -> None:
    """The DFVG bench on the run's pair; its printout kept, its τ and wall-clock tables written."""
    from heterospec.dfvg.bench import bench
    with open(printout, "w") as f, contextlib.redirect_stdout(Tee(f, sys.stdout)):
        tables = bench(cfg, paths, overrides, repeats, prompts)
    base = dict(run=cfg.name, device=device)
    for name, schema in (("tau", GPU_CHECK_DFVG_TAU_SCHEMA), ("wall", GPU_CHECK_DFVG_WALL_SCHEMA)):
        cols, rows = tables[name]
        write_parquet([{**base, **dict(zip(cols, r))} for r in rows], paths.root / "dfvg" / f"bench_{name}.parquet",
                      schema)
