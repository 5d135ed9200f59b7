"""The Snakemake workflow: every experiment plans, the lint is clean, errors are one line, and (slow) the
ci experiment runs end to end into a queryable DuckDB catalogue."""
from __future__ import annotations

import base64
import json
import re

import pytest

from conftest import DATASETS, ROOT, heterospec, run_cmd, snakemake
import sys

EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
ARTIFACT = DATASETS.parent / "heteroreason_ae"
SHARED_ENV = {"HETEROSPEC_DATASETS": str(DATASETS), "HETEROSPEC_ARTIFACT": str(ARTIFACT)}
ABSENT = str(ROOT / "tests" / "absent")          # a benchmark or artifact folder that does not exist


def plan_call(experiment: str) -> tuple[tuple[str, ...], dict]:
    """How each experiment is planned: ci under the SLURM profile and without the artifact, paper_config1 without
    its benchmarks, the others with ../shared's benchmarks and artifact."""
    if experiment == "ci":
        return ("experiment=ci",), dict(profile="slurm", env={"HETEROSPEC_ARTIFACT": ABSENT})
    if experiment == "paper_config1":
        return ("experiment=paper_config1",), dict(env={**SHARED_ENV, "HETEROSPEC_DATASETS": ABSENT})
    return (f"experiment={experiment}",), dict(env=SHARED_ENV)


def plan(dry_run, experiment: str):
    """One experiment's dry run, shared by the tests below and test_dfvg (planned once per session)."""
    config, kwargs = plan_call(experiment)
    return dry_run(*config, **kwargs)


OVERRIDES = ("experiment=ci", "overrides=hardware@system.draft=v80 eval_limit=5")
GPU3 = (("experiment=ci", "overrides=system=gpu3"), dict(profile="slurm"))
DRY_RUNS = [plan_call(e) for e in ["ci", *(e for e in EXPERIMENTS if e != "ci")]] + [(OVERRIDES, {}), GPU3]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_dry_run_every_experiment(experiment, dry_run):
    if experiment == "paper_config2" and not DATASETS.exists():
        pytest.skip(f"benchmarks not found at {DATASETS}")
    on_artifact = experiment in ("artifact_replay", "design_space")   # the artifact's traces, no trio of ours
    if on_artifact and not ARTIFACT.exists():
        pytest.skip(f"HeteroReason artifact not found at {ARTIFACT}")
    r = plan(dry_run, experiment)
    assert r.returncode == 0, r.stderr[-2000:]
    stage = "replay" if on_artifact else "evaluate"
    assert f"results/{experiment}/{stage}/" in r.stdout + r.stderr
    if on_artifact:   # hls.enabled=false: no job needs the Config1 draft checkpoint
        assert "rule train_model" not in r.stdout and "rule quantize" not in r.stdout


def test_default_run_without_the_artifact_says_replay_is_skipped(dry_run):
    r = plan(dry_run, "ci")
    assert r.returncode == 0, r.stderr[-2000:]
    notice = [ln for ln in r.stderr.splitlines() if "replay of the artifact traces skipped" in ln]
    assert len(notice) == 1 and "replay/results.parquet" not in r.stdout


def test_missing_benchmark_is_planned_as_a_download(dry_run):
    r = plan(dry_run, "paper_config1")
    assert r.returncode == 0, r.stderr[-2000:]
    downloads = {ln.split("=", 1)[1] for ln in (r.stdout + r.stderr).split() if ln.startswith("bench=")}
    assert downloads == {"math500", "gsm8k", "gaokao2023en", "olympiadbench"}


def test_lint_is_clean():
    r = snakemake("--lint")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "Lints for" not in r.stdout + r.stderr


def test_overrides_pass_through_and_namespace_the_run(dry_run):
    r = dry_run(*OVERRIDES)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "results/ci+" in out and "hardware@system.draft=v80" in out
    # the bracketed list form is the same run: its config file is a target this workflow can make
    name = [w for w in out.split() if w.startswith("results/ci+")][0].split("/")[1]
    r2 = dry_run("experiment=ci", "overrides=[hardware@system.draft=v80,eval_limit=5]",
                 targets=(f"results/{name}/config.yaml",))
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert f"results/{name}/config.yaml" in r2.stdout and "rule config:" in r2.stdout
    other = dry_run("experiment=ci", "overrides=[hardware@system.draft=u280,eval_limit=5]",
                    targets=(f"results/{name}/config.yaml",))
    assert other.returncode != 0            # another override is another run: it cannot make this run's file


def test_bad_config_is_one_line(tmp_path):
    r = snakemake("-n", "--directory", str(tmp_path), "--config", "experiment=ci", "overrides=models.draft.arch.layers=2")
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("heterospec:")]
    assert len(lines) == 1 and "layers" in lines[0] and "Traceback" not in r.stderr


def test_failed_stage_leaves_no_output(tmp_path):
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "x #### 1"}) + "\n{broken\n")
    out = tmp_path / "out.parquet"
    r = run_cmd([sys.executable, "-m", "heterospec.evaluate", "--dataset", "gsm8k", "--method", "draft_only",
                 "--out", str(out), "experiment=ci", f"paths.datasets={tmp_path / 'data'}"], cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"heterospec: {data / 'test.jsonl'}:2: not valid JSON "
                                             "(Expecting property name enclosed in double quotes at column 2)"]
    assert not out.exists()


@pytest.mark.slow
def test_ci_experiment_end_to_end(tmp_path):
    r = snakemake("--cores", "2", "--directory", str(tmp_path), "--config", "experiment=ci")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    run = tmp_path / "results" / "ci"
    assert (run / "config.yaml").read_text().startswith("# run ci")
    for role in ("draft", "prm", "target"):   # keyed by the role's settings, outside the run
        manifests = list((tmp_path / "results" / "_models" / role).glob("*/manifest.json"))
        assert len(manifests) == 1 and json.loads(manifests[0].read_text())["source"] == "train"
    db = tmp_path / "results" / "heterospec.duckdb"
    q = heterospec("query", "SELECT method, problems FROM accuracy WHERE run = 'ci' ORDER BY method",
                   "--db", str(db), "--format", "json")
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"method": m, "problems": 20} for m in ("draft_only", "target_only", "target_sd")]
    q = heterospec("query", "SELECT problems, prm_auroc FROM model_quality", "--db", str(db), "--format", "json")
    assert json.loads(q.stdout)[0]["problems"] == 20
    again = snakemake("--cores", "2", "--directory", str(tmp_path), "--config", "experiment=ci")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    # the figures the run has data for (no artifact, no DFVG here; Figure 8, 10, the time shares, the methods with
    # token-level speculation, the tau sweep, the FPGA draft's design space and accuracy against latency of our own
    # collect traces on the paper's systems), each file non-empty, each CSV its view's rows
    from heterospec.report.figures import FIGURES
    names = sorted(p.stem for p in (run / "figures").glob("*.png"))
    assert names == ["accuracy_latency", "figure10", "figure8", "hls_breakdown", "hls_latency", "kvmu_resources",
                     "load_capacity", "load_design_space", "load_latency", "load_utilisation", "methods",
                     "replay_validation", "serving_load", "table3", "tau_sweep", "time_shares"]
    q = heterospec("query", "SELECT DISTINCT trace_set, design FROM replay_figure8 WHERE run = 'ci' ORDER BY ALL",
                   "--db", str(db), "--format", "json")
    assert {(r["trace_set"], r["design"]) for r in json.loads(q.stdout)} == {
        (t, d) for t in ("ours_brsd", "ours_rsd") for d in ("3-GPU", "T2 on GPUs", "FPGA+GPU (T1+T2)")}
    for name in names:
        assert all((run / "figures" / f"{name}.{ext}").stat().st_size > 0 for ext in ("png", "svg", "csv"))
        view = heterospec("query", f"SELECT * FROM {FIGURES[name].view} WHERE run = 'ci' ORDER BY ALL",
                          "--db", str(db), "--format", "csv")
        assert view.stdout.count("\n") > 1 and (run / "figures" / f"{name}.csv").read_text() == view.stdout, name

    # one HTML report holding every figure (Snakemake embeds each file base64-encoded)
    html = tmp_path / "results" / "report.html"
    rep = snakemake("--directory", str(tmp_path), "--config", "experiment=ci", "--report", str(html))
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-3000:]
    text = html.read_text()
    for name in names:
        png = base64.b64encode((run / "figures" / f"{name}.png").read_bytes()).decode()
        assert png in text, name

    # a sweep over the algorithm: one run per value on the same trio, never a train_model job (hls and the collect
    # variants and the serving run off: faster)
    sweep = snakemake("--cores", "2", "--directory", str(tmp_path), "--config", "experiment=ci",
                      "overrides=hls.enabled=false collect.algorithms=[rsd,brsd] serving.enabled=false", "sweep=algorithm.threshold=0.5,0.7,0.9")
    out = sweep.stdout + sweep.stderr
    assert sweep.returncode == 0, out[-4000:]
    logs = "".join(p.read_text() for p in tmp_path.glob("results/ci*.sweep+*/logs/sweep_*.log"))
    assert "rule collect_timed" in logs and "train_model" not in logs + out
    assert len(list((tmp_path / "results" / "_models").glob("*/*/manifest.json"))) == 3
    (sweep_dir,) = tmp_path.glob("results/ci*.sweep+*")
    rows = heterospec("query", f"SELECT value, algorithm, executor, problems FROM sweep WHERE run = '{sweep_dir.name}'",
                      "--db", str(db), "--format", "json")
    assert {(r["value"], r["problems"]) for r in json.loads(rows.stdout)} == {("0.5", 6), ("0.7", 6), ("0.9", 6)}
    view = heterospec("query", f"SELECT * FROM {FIGURES['sweep'].view} WHERE run = '{sweep_dir.name}' ORDER BY ALL",
                      "--db", str(db), "--format", "csv")
    assert (sweep_dir / "figures" / "sweep.csv").read_text() == view.stdout
    q = heterospec("query", f"SELECT DISTINCT value, design FROM sweep_systems WHERE run = '{sweep_dir.name}' "
                   "AND profile = 'paper_v12'", "--db", str(db), "--format", "json")   # each value on the paper's systems
    assert len({(r["value"], r["design"]) for r in json.loads(q.stdout)}) == 3 * 3
    assert (sweep_dir / "figures" / "sweep.png").stat().st_size > 0


def planned_gpus(output: str) -> dict[str, set[int]]:
    """GPUs each planned rule asks for, from a dry run's ``rule X:`` and ``resources: ...`` lines."""
    asks, rule = {}, None
    for line in output.splitlines():
        if line.startswith("rule "):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("resources:") and rule:
            gpu = re.search(r"\bgpu=(\d+)", line)
            asks.setdefault(rule, set()).add(int(gpu.group(1)) if gpu else 0)
    return asks


def test_slurm_profile_plans(dry_run):
    """The bar: on a machine without GPUs the ci experiment plans no job that asks for one; gpu3 asks for three."""
    r = plan(dry_run, "ci")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    asks = planned_gpus(r.stdout + r.stderr)
    assert {"collect_timed", "collect_shard", "train_model"} <= set(asks)
    assert {rule: n for rule, n in asks.items() if n != {0}} == {}
    r = dry_run(*GPU3[0], **GPU3[1])
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    asks = planned_gpus(r.stdout + r.stderr)
    assert asks["collect_timed"] == asks["collect_shard"] == {3} and asks["evaluate"] == {1, 3} and \
        asks["train_model"] == {0}
