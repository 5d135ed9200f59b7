"""The cluster path for real (-m slow): the ci experiment through SLURM with workflow/profiles/slurm and no resource
overrides, its head process killed once mid-run and the run resumed; its results equal a local run's.

Needs a SLURM with partitions ``gpu`` and ``cpu`` that sees this machine's files (``.ci/slurm-up`` starts a
single-node one, as root). Without one it skips, except under CI=true, where it fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, heterospec, run_cmd, snakemake
from heterospec.config import compose_config
from heterospec.config.collect_variants import executors as collect_executors
from heterospec.paths import EVAL_METHODS

pytestmark = pytest.mark.slow

PROFILE = str(ROOT / "workflow" / "profiles" / "slurm")
# The cluster's polling knob (not a resource): poll soon, and keep the logs of successful jobs as the evidence.
SLURM_ARGS = ("--profile", PROFILE, "--slurm-init-seconds-before-status-checks", "2", "--slurm-keep-successful-logs",
              "--config", "experiment=ci")
# What the local reference run builds: the single-model rows and the collect tables behind Table III.
CI = compose_config(["experiment=ci"])
COLLECTS = [(a, e) for a in CI.collect.algorithms for e in collect_executors(CI, a)]
REFERENCE = [f"results/ci/evaluate/synthetic/{m}.parquet" for m in EVAL_METHODS] + [
    f"results/ci/collect/synthetic/{a}/{e}/{t}.parquet" for a, e in COLLECTS for t in ("problems", "calls")]
# The reasoning, not its timing: a problem's answer and path, and the sequential executor's calls in order.
PROBLEM_COLUMNS = "problem_id, prediction, correct, output, stop, steps, draft_steps, target_steps, backtracks"
CALL_COLUMNS = "problem_id, step, attempt, role, phase, tokens_in, tokens_out, kv_len, round(prm_score, 6), outcome"


def slurm_missing() -> str | None:
    """Why no usable SLURM is here, or None."""
    tools = [t for t in ("sbatch", "squeue", "sinfo", "scancel") if not shutil.which(t)]
    if tools:
        return f"SLURM is not installed ({', '.join(tools)} not on PATH); as root, .ci/slurm-up starts a one-node SLURM"
    r = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no SLURM controller answers (sinfo: {last}); as root, .ci/slurm-up starts a one-node SLURM"
    partitions = {p.rstrip("*") for p in r.stdout.split()}
    if not {"gpu", "cpu"} <= partitions:
        return f"SLURM has partitions {sorted(partitions)}; workflow/profiles/slurm/partitions.yaml names gpu and cpu"
    return None


@pytest.fixture(scope="module")
def slurm():
    reason = slurm_missing()
    if reason and os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    if reason:
        pytest.skip(reason)


def job_stats(output: str) -> set[str]:
    """The rules of Snakemake's planned "Job stats" table."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {ln.split()[0] for ln in table.splitlines()[3:] if ln.split() and ln.split()[0] != "total"}


def finished(output: str, rule: str) -> int:
    return len(re.findall(rf"Finished jobid: \d+ \(Rule: {rule}\)", output))


def slurm_logs(workdir: Path) -> dict[str, list[Path]]:
    """SLURM job logs per rule (the plugin writes one per sbatch submission)."""
    logs = {}
    for log in (workdir / ".snakemake" / "slurm_logs").glob("rule_*/**/*.log"):
        rule = log.relative_to(workdir / ".snakemake" / "slurm_logs").parts[0].removeprefix("rule_")
        logs.setdefault(rule, []).append(log)
    return logs


def trained_manifests(workdir: Path) -> dict[str, int]:
    """Each role's model manifest (results/_models/<role>/<key>/, heterospec.paths.model_dir) -> its mtime."""
    return {p.parent.parent.name: p.stat().st_mtime_ns for p in (workdir / "results/_models").glob("*/*/manifest.json")}


def kill_head_after_training(workdir: Path) -> tuple[str, dict[str, float]]:
    """Run the head until the three models are trained, kill -9 it, cancel what it left in SLURM."""
    out = workdir / "head.log"
    with out.open("w") as f:
        head = subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                                 str(workdir), *SLURM_ARGS], cwd=workdir, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.time() + 1200
        while finished(out.read_text(), "train_model") < 3:
            assert head.poll() is None, f"the head exited ({head.returncode}) before training finished:\n" \
                                        f"{out.read_text()[-3000:]}"
            assert time.time() < deadline, out.read_text()[-3000:]
            time.sleep(1)
        head.send_signal(signal.SIGKILL)
    finally:
        head.kill()
        head.wait()
    trained = trained_manifests(workdir)
    # a dead head leaves its jobs running and its lock behind: what a user does next
    ids = [log.stem for logs in slurm_logs(workdir).values() for log in logs]
    subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    while subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-t", "PD,R,CG"], capture_output=True,
                         text=True, timeout=60).stdout.strip():
        time.sleep(1)
    return out.read_text(), trained


@pytest.fixture(scope="module")
def slurm_run(slurm, tmp_path_factory):
    """The ci experiment through SLURM: killed once after training, unlocked, rerun to the end."""
    workdir = tmp_path_factory.mktemp("slurm")
    first, trained = kill_head_after_training(workdir)
    unlock = snakemake("--directory", str(workdir), *SLURM_ARGS, "--unlock")
    assert unlock.returncode == 0, unlock.stderr[-2000:]
    rerun = snakemake("--directory", str(workdir), *SLURM_ARGS, timeout=3600)
    return dict(workdir=workdir, first=first, trained=trained, rerun=rerun)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The same outputs built locally: the reference."""
    workdir = tmp_path_factory.mktemp("local")
    r = snakemake(*REFERENCE, "--cores", "2", "--directory", str(workdir), "--config", "experiment=ci")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    db = workdir / "results" / "heterospec.duckdb"
    agg = run_cmd([sys.executable, "-m", "heterospec.aggregate", "--db", str(db)], cwd=workdir)
    assert agg.returncode == 0, agg.stderr[-2000:]
    return workdir


def query(workdir: Path, sql: str) -> list[dict]:
    r = heterospec("query", sql, "--db", str(workdir / "results" / "heterospec.duckdb"), "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_run_completes_and_every_job_went_through_sbatch(slurm_run):
    rerun, workdir = slurm_run["rerun"], slurm_run["workdir"]
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
    planned = job_stats(slurm_run["first"]) - {"all"}           # `all` is Snakemake's local target rule
    assert {"train_model", "collect_shard", "evaluate", "aggregate"} <= planned
    assert set(slurm_logs(workdir)) == planned
    assert (workdir / "results" / "heterospec.duckdb").is_file()


def test_killed_head_resumes_without_redoing_finished_jobs(slurm_run):
    rerun, workdir = slurm_run["rerun"], slurm_run["workdir"]
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
    out = rerun.stdout + rerun.stderr
    assert "train_model" not in job_stats(out) and "collect_shard" in job_stats(out)
    assert len(slurm_run["trained"]) == 3 and len(slurm_logs(workdir)["train_model"]) == 3
    now = trained_manifests(workdir)
    assert now == slurm_run["trained"]


def test_results_equal_a_local_run(slurm_run, local_run):
    cluster = slurm_run["workdir"]
    assert slurm_run["rerun"].returncode == 0
    table3 = "SELECT dataset, method, problems, accuracy FROM table3 WHERE run = 'ci' ORDER BY ALL"
    assert len(query(local_run, table3)) == len(EVAL_METHODS) + len(CI.collect.algorithms)
    assert query(cluster, table3) == query(local_run, table3)
    evaluations = "SELECT method, problem_id, prediction, correct, output FROM evaluations WHERE run = 'ci' ORDER BY ALL"
    assert query(cluster, evaluations) == query(local_run, evaluations)
    problems = f"SELECT algorithm, executor, {PROBLEM_COLUMNS} FROM collect_problems WHERE run = 'ci' ORDER BY ALL"
    assert len(query(local_run, problems)) == len(COLLECTS) * CI.collect.limit
    assert query(cluster, problems) == query(local_run, problems)
    calls = f"SELECT algorithm, {CALL_COLUMNS} FROM collect_calls WHERE run = 'ci' AND executor = 'sequential' " \
            "ORDER BY algorithm, problem_id, start_ns"
    assert query(cluster, calls) == query(local_run, calls)
