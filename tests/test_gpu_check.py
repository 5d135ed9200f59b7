"""``heterospec gpu check --device cpu``: the GPU node's check, end to end on this CPU with the ci trio; every table it
lists loads in DuckDB, a rerun resumes without redoing a step, and bad input is one line."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import heterospec

SMALL = ["--limit", "2", "--batches", "1,2", "--contexts", "16", "--bench-prompts", "2", "--bench-repeats", "1"]


@pytest.mark.slow
def test_the_check_runs_on_the_cpu_and_its_tables_load_in_duckdb(trained_models, tmp_path):
    import duckdb
    cfg, paths = trained_models.run(["experiment=ci"])
    models = paths.model_root("draft").parents[1]              # the session's results/_models
    out = tmp_path / "check"
    r = heterospec("gpu", "check", "--device", "cpu", "--out", str(out), "--models", str(models), *SMALL,
                   timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    progress = [ln for ln in r.stdout.splitlines() if ln.startswith("[gpu check")]
    steps = [ln.split("] ", 1)[1] for ln in progress]
    order = [next(i for i, s in enumerate(steps) if s.startswith(p)) for p in
             ("batched prices", "collect synthetic/rsd/sequential", "collect synthetic/brsd_sd/sequential",
              "evaluate synthetic/target_sd", "DFVG bench", "done in")]
    assert order == sorted(order)
    assert not any("brsd_u280" in s for s in steps)           # the board's kernel is the FPGA's, not the GPU's
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cpu" and summary["run"].startswith("ci+")
    tables = {t["path"]: t["rows"] for t in summary["tables"]}
    con = duckdb.connect()
    for path, rows in tables.items():
        assert con.execute(f"SELECT count(*) FROM read_parquet('{out / path}')").fetchall() == [(rows,)]
        assert rows > 0 or path.endswith(("repeats.parquet", "rounds.parquet"))    # one repeat; rounds: brsd_sd only
    run = f"results/{summary['run']}"
    collects = {(a, e) for a in ("rsd", "brsd") for e in ("sequential", "step_ahead")} | {("brsd_sd", "sequential")}
    assert {p for p in tables if p.endswith("problems.parquet")} == {
        f"{run}/collect/synthetic/{a}/{e}/problems.parquet" for a, e in collects}
    assert all(tables[f"{run}/evaluate/synthetic/{m}.parquet"] == 2 for m in ("draft_only", "target_only", "target_sd"))
    assert tables[f"{run}/replay/batch_prices.parquet"] == 3 * 2 * 2        # roles x phases x batches, one context
    devices = con.execute(f"SELECT DISTINCT device FROM read_parquet('{out}/{run}/collect/*/*/*/calls.parquet')")
    assert devices.fetchall() == [("cpu",)]
    assert tables[f"{run}/dfvg/bench_wall.parquet"] >= 6 and set(summary["seconds"]) == {
        "prices", "dfvg_bench", *(f"collect_{a}_{e}" for a, e in collects),
        *(f"evaluate_{m}" for m in ("draft_only", "target_only", "target_sd"))}
    assert "## Batched prices" in (out / "summary.md").read_text() and (out / "dfvg_bench.txt").stat().st_size

    again = heterospec("gpu", "check", "--device", "cpu", "--out", str(out), "--models", str(models), *SMALL,
                       timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    kept = [ln for ln in again.stdout.splitlines() if ln.endswith("done already (kept)")]
    assert len(kept) == 1 + len(collects) + 3 + 1                 # prices, collects, evaluates, bench
    assert json.loads((out / "summary.json").read_text())["seconds"] == summary["seconds"]
    other = heterospec("gpu", "check", "--device", "cpu", "--out", str(out), "--models", str(models), "--limit", "3")
    assert other.returncode == 2 and "holds a check of" in other.stderr


def test_bad_input_is_one_line(tmp_path):
    cases = [(["--device", "tpu:0"], "--device tpu:0: expected cpu or cuda:N"),
             (["--device", "cpu", "--models", str(tmp_path / "none")], "no such folder"),
             (["--device", "cpu", "--models", str(tmp_path)], "the ci run's draft is not there")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda:0"], "--device cuda:0: this machine's PyTorch sees no CUDA device"))
    for args, message in cases:
        r = heterospec("gpu", "check", "--out", str(tmp_path / "out"), *args, timeout=300)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
