"""The replay stage from the command line: import, run, validate, the DuckDB views, and one-line errors."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SHARED, heterospec
from heterospec.store.parquet import SCHEMA_VERSION_KEY

ARTIFACT = SHARED / "heteroreason_ae"
needs_artifact = pytest.mark.skipif(not (ARTIFACT / "Hardware").is_dir(), reason=f"{ARTIFACT} absent (shared artifact)")


def one_line_error(r, *fragments):
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heterospec: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@needs_artifact
def test_import_and_run_on_the_artifact_gaokao_traces(tmp_path):
    env = {"HETEROSPEC_ARTIFACT": str(ARTIFACT)}
    o = ["experiment=ci", "name=art", "replay.trace_sets=[with_bt]", "replay.datasets=[gaokao2023en]",
         "replay.systems=[gpu3,hetero_u280]", "replay.schedules=[sequential,step_ahead,hetero]"]
    r = heterospec("replay", "run", *o, cwd=tmp_path, env=env)
    one_line_error(r, "events.parquet: not imported yet", "--trace-set with_bt")
    r = heterospec("replay", "import", *o, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "with_bt: 385 problems, 4692 events" in r.stdout
    r = heterospec("replay", "run", *o, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "results" / "art" / "replay"
    res = pq.read_table(run / "results.parquet")
    assert res.num_rows == 385 * 2 * 3
    art = pq.read_table(run / "artifact.parquet").column("latency_ms").to_pylist()
    assert sum(art) / len(art) == pytest.approx(11512.70, rel=1e-3)      # the artifact's simulator_reference
    db = tmp_path / "results" / "heterospec.duckdb"
    from heterospec.store.catalog import build
    build(db, tmp_path)
    q = heterospec("query", "SELECT design, system, speedup_vs_3gpu, energy_efficiency_vs_3gpu FROM replay_figure8 "
                   "ORDER BY design", "--db", str(db), "--format", "json", cwd=tmp_path)
    rows = json.loads(q.stdout)
    assert [r["design"] for r in rows] == ["3-GPU", "FPGA+GPU (T1+T2)", "T2 on GPUs"]
    assert rows[0]["speedup_vs_3gpu"] == 1.0 and all(r["speedup_vs_3gpu"] > 1.2 for r in rows[1:])
    fpga, t2 = rows[1], rows[2]   # each draft device at its own price: the U280's 5.74 ms/token beats a 3090's
    assert fpga["system"] == "hetero_u280" and fpga["speedup_vs_3gpu"] > t2["speedup_vs_3gpu"] + 0.1
    assert fpga["energy_efficiency_vs_3gpu"] > t2["energy_efficiency_vs_3gpu"] > 1.0
    q = heterospec("query", "SELECT technique, backtracking FROM replay_figure10", "--db", str(db), "--format", "json",
                   cwd=tmp_path)
    assert [r["technique"] for r in json.loads(q.stdout)] == ["baseline", "+T2", "+T1"]
    q = heterospec("query", "SELECT problems, max_problem_error_pct FROM replay_vs_artifact", "--db", str(db),
                   "--format", "json", cwd=tmp_path)
    assert json.loads(q.stdout) == [{"problems": 385, "max_problem_error_pct": 0.0}]   # every problem within 0.0005 %
    # a schedule=... override is the one schedule the replay runs, and schedule.* overrides reach it
    import shutil
    shutil.copytree(run, tmp_path / "results" / "art2" / "replay")
    o2 = [x for x in o if not x.startswith("name=")] + ["name=art2", "replay.systems=[hetero_u280]", "schedule=hetero"]
    lat = {}
    for extra in ([], ["schedule.draft_pipeline=false"]):
        r = heterospec("replay", "run", *o2, *extra, cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        res2 = pq.read_table(tmp_path / "results" / "art2" / "replay" / "results.parquet")
        assert set(res2.column("schedule").to_pylist()) == {"hetero"}
        lat[bool(extra)] = sum(res2.column("latency_ms").to_pylist())
    hetero = [r["latency_ms"] for r in res.to_pylist() if r["schedule"] == "hetero" and r["system"] == "hetero_u280"]
    assert lat[False] == pytest.approx(sum(hetero), rel=1e-12) and lat[True] > 1.05 * lat[False]


def test_bad_names_are_one_line(tmp_path):
    one_line_error(heterospec("replay", "run", "experiment=ci", "replay.profiles=[paper_v13]", cwd=tmp_path),
                   "unknown latency profile 'paper_v13'", "roofline")
    one_line_error(heterospec("replay", "run", "experiment=ci", "replay.schedules=[warp]", cwd=tmp_path),
                   "unknown schedule 'warp'", "step_ahead")
    one_line_error(heterospec("replay", "run", "experiment=ci", "schedule=step_ahead", "schedule.draft_lookahead=0",
                              cwd=tmp_path), "draft_lookahead is 0, expected 1 or more")
    one_line_error(heterospec("replay", "run", "experiment=ci", "schedule.lookahead=2", cwd=tmp_path), "lookahead")
    one_line_error(heterospec("replay", "run", "experiment=ci", "replay.systems=[moon]", cwd=tmp_path),
                   "'moon' is not a system config")
    one_line_error(heterospec("replay", "run", "experiment=ci", "models=config1", "replay.profiles=[roofline]",
                              "replay.systems=[cpu3]", cwd=tmp_path), "hardware 'cpu' has no peak_tflops.fp16")
    one_line_error(heterospec("replay", "import", "experiment=ci", f"paths.heteroreason_ae={tmp_path / 'none'}",
                              cwd=tmp_path), "trace folder not found", "HETEROSPEC_ARTIFACT")
    one_line_error(heterospec("replay", "validate", "experiment=ci", cwd=tmp_path),
                   "results/ci/collect: no collect traces yet")


def test_validate_on_synthetic_collect_traces(tmp_path):
    """Calls generated from known coefficients plus 3 % noise (sequential), and a step_ahead run's per-problem
    latencies from the same profile: the fitted simulator must land within the issue's 10 % on both."""
    from test_replay_hw_profiles import TRUE, synthetic_calls
    from heterospec.config import compose_config
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.profiles.measured import MeasuredProfile
    from heterospec.replay.simulator.steps import steps_from_calls
    calls = synthetic_calls(40)
    seq = tmp_path / "results" / "ci" / "collect" / "synthetic" / "brsd" / "sequential" / "calls.parquet"
    seq.parent.mkdir(parents=True)
    pq.write_table(calls, seq)
    # the step_ahead executor's measured latency: what the true profile gives under that schedule, +-3 %
    from heterospec.replay.simulator.problem import problems_from_steps
    probs = problems_from_steps(steps_from_calls(calls))
    from heterospec.config.hardware import System
    cpu3 = System.of(compose_config(["experiment=ci"]).system)
    sa = simulate(probs, [cpu3], ["step_ahead"], MeasuredProfile(TRUE)).column("latency_ms").to_pylist()
    problems = pa.table({"algorithm": ["collect"] * len(probs), "executor": ["step_ahead"] * len(probs),
                         "dataset": [p.dataset for p in probs], "problem_id": [p.problem for p in probs],
                         "latency_s": [ms / 1e3 * (1.03 if i % 2 else 0.97) for i, ms in enumerate(sa)]})
    problems = problems.replace_schema_metadata({SCHEMA_VERSION_KEY: b"collect_problems/v1"})
    sa_dir = seq.parent.parent / "step_ahead"
    sa_dir.mkdir()
    pq.write_table(problems, sa_dir / "problems.parquet")
    r = heterospec("replay", "validate", "experiment=ci", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    val = pq.read_table(tmp_path / "results" / "ci" / "replay" / "validation.parquet").to_pylist()
    for ex in ("sequential", "step_ahead"):
        errs = [abs(v["rel_error"]) for v in val if v["executor"] == ex]
        assert len(errs) == 40 and sum(errs) / len(errs) < 0.10, ex
    assert "mae_pct" in r.stdout and "mae_95ci_pct" in r.stdout and "draft" in r.stdout and "r2" in r.stdout
    fit = pq.read_table(tmp_path / "results" / "ci" / "replay" / "measured_fit.parquet")
    assert min(fit.column("r2").to_pylist()) > 0.97
    before = (tmp_path / "results" / "ci" / "replay" / "validation.parquet").stat().st_mtime_ns
    r = heterospec("replay", "validate", "--fit-on", "collect", "experiment=ci", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "collect (fitted)" in r.stdout and "nothing saved" in r.stdout
    assert (tmp_path / "results" / "ci" / "replay" / "validation.parquet").stat().st_mtime_ns == before
    r = heterospec("replay", "validate", "--fit-on", "nope", "experiment=ci", cwd=tmp_path)
    assert r.returncode != 0 and "no such trace set" in r.stderr and "Traceback" not in r.stderr
