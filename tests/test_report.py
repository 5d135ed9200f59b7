"""The report stage: every figure has a caption and a data source, a figure's CSV is its view's rows, a figure
without rows is skipped with one line; sweeps parse Hydra's syntax; models are keyed by their own settings."""
from __future__ import annotations

import csv
import re

import duckdb
import pytest

from conftest import ROOT, run_cmd
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.paths import ROLES, RunPaths
from heterospec.report.__main__ import draw
from heterospec.report.figures import FIGURES
from heterospec.report.sweep import parse_sweep, sweep_name


def test_every_figure_has_a_caption_and_a_source_in_the_workflow():
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    block = common[common.index("FIGURE_SOURCES = {"):]
    named = set(re.findall(r'"(\w+)": \w+', block[:block.index("}")])) | {"sweep"}
    assert named == set(FIGURES)
    for name in FIGURES:
        caption = (ROOT / "workflow" / "report" / f"{name}.rst").read_text()
        assert "*Numbers:*" in caption and "*Against the paper" in caption and FIGURES[name].view in caption


def _catalogue(tmp_path, rows_sql: str, view: str = "table3_vs_paper"):
    db = tmp_path / "results" / "heterospec.duckdb"
    db.parent.mkdir(parents=True)
    con = duckdb.connect(str(db))
    con.execute(f"CREATE VIEW {view} AS {rows_sql}")
    con.close()
    return db


def test_figure_csv_holds_the_views_rows_of_its_run(tmp_path):
    db = _catalogue(tmp_path, """SELECT * FROM (VALUES
        ('ci', 'ours', 'tiny', 'synthetic', 'target_only', 20, 95.0),
        ('ci', 'ours', 'tiny', 'synthetic', 'draft_only', 20, 35.5),
        ('ci', 'paper Config1', '0.5B draft - 7B PRM - 7B target', 'math500', 'brsd_opt', NULL, 67.2),
        ('other', 'ours', 'tiny', 'synthetic', 'rsd', 20, 60.0)) t(run, source, models, dataset, method, problems, accuracy)""")
    out = tmp_path / "figures"
    files = draw("table3", "ci", out, db)
    assert sorted(f.name for f in files) == ["table3.csv", "table3.png", "table3.svg"]
    assert all(f.stat().st_size > 0 for f in files)
    with open(out / "table3.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["run", "source", "models", "dataset", "method", "problems", "accuracy"],
                    ["ci", "ours", "tiny", "synthetic", "draft_only", "20", "35.5"],
                    ["ci", "ours", "tiny", "synthetic", "target_only", "20", "95.0"],
                    ["ci", "paper Config1", "0.5B draft - 7B PRM - 7B target", "math500", "brsd_opt", "", "67.2"]]
    assert (out / "table3.png").read_bytes().startswith(b"\x89PNG")
    fig = FIGURES["table3"].draw([dict(zip(rows[0], r)) for r in rows[1:]])   # one panel per source
    assert [ax.get_title() for ax in fig.axes] == ["ours: models tiny", "paper Config1 (0.5B draft - 7B PRM - 7B target)"]


def _cfg(tmp_path, artifact):
    from heterospec.paths import RunPaths
    cfg = compose_config(["experiment=ci", f"paths.heteroreason_ae={artifact}"])
    return cfg, RunPaths(tmp_path / "results" / "ci")


def test_paper_table3_is_the_artifacts_reference(tmp_path):
    import pyarrow.parquet as pq
    from conftest import SHARED
    from heterospec.report.sources import paper_table3, paper_table3_path
    artifact = SHARED / "heteroreason_ae"
    if not artifact.is_dir():
        pytest.skip(f"HeteroReason artifact not found at {artifact}")
    cfg, paths = _cfg(tmp_path, artifact)
    paper_table3(cfg, paths)
    rows = pq.read_table(paper_table3_path(paths)).to_pylist()
    assert len(rows) == 2 * 3 * 4                      # Config1/2 x RSD, BRSD, BRSD+opt x four datasets
    acc = {(r["config"], r["method"], r["dataset"]): r["accuracy"] for r in rows}
    # the paper's Table III as REFERENCE.md quotes it (Config1, MATH500 / GSM8K / Gaokao2023EN / OlympiadBench)
    for method, values in {"rsd": [64.8, 87.3, 56.9, 26.5], "brsd": [67.0, 89.5, 58.4, 28.6]}.items():
        assert [acc[("Config1", method, d)] for d in ("math500", "gsm8k", "gaokao2023en", "olympiadbench")] == values
    assert acc[("Config2", "brsd_opt", "olympiadbench")] == 20.9 and {r["run"] for r in rows} == {cfg.name}


def test_paper_table3_without_the_artifact_is_empty_and_a_bad_file_is_one_line(tmp_path):
    import pyarrow.parquet as pq
    from heterospec.report.sources import PAPER_TABLE3, paper_table3, paper_table3_path
    cfg, paths = _cfg(tmp_path, tmp_path / "absent")
    assert paper_table3(cfg, paths) == [] and pq.read_table(paper_table3_path(paths)).num_rows == 0
    ref = tmp_path / "art" / PAPER_TABLE3
    ref.parent.mkdir(parents=True)
    ref.write_text('{"configurations": {"Config1": {"models": "m", "methods": {"RSD": {"datasets": {"x": 1}}}}}}')
    cfg, paths = _cfg(tmp_path, tmp_path / "art")
    with pytest.raises(UserError, match="method 'RSD' unknown") as e:
        paper_table3(cfg, paths)
    ref.write_text('{"configurations": {"Config1": {"methods": {"BRSD": {}}}}}')
    with pytest.raises(UserError, match="table3_accuracy_reference.json: expected the artifact's Table III") as e:
        paper_table3(cfg, paths)
    assert "\n" not in str(e.value)


def test_replay_results_view_holds_the_artifacts_and_our_replays(tmp_path):
    from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
    from heterospec.store.catalog import build, query
    from heterospec.store.parquet import write_parquet
    row = {f.name: (0 if pa_int(f) else 0.0 if pa_float(f) else "x") for f in REPLAY_RESULTS_SCHEMA}
    db = tmp_path / "results" / "heterospec.duckdb"
    write_parquet([dict(row, run="a", trace_set="ours_brsd")], tmp_path / "results/a/report/replay_ours.parquet",
                  REPLAY_RESULTS_SCHEMA)
    build(db, tmp_path)      # only ours: the view exists without the artifact's replay
    assert query(db, "SELECT trace_set FROM replay_results")[1] == [("ours_brsd",)]
    write_parquet([dict(row, run="b", trace_set="with_bt")], tmp_path / "results/b/replay/results.parquet",
                  REPLAY_RESULTS_SCHEMA)
    build(db, tmp_path)
    assert query(db, "SELECT run, trace_set FROM replay_results ORDER BY run")[1] == [("a", "ours_brsd"),
                                                                                      ("b", "with_bt")]


def pa_int(field):
    import pyarrow as pa
    return pa.types.is_integer(field.type)


def pa_float(field):
    import pyarrow as pa
    return pa.types.is_floating(field.type)


def test_sweep_figure_draws_simulated_and_measured_latency():
    rows = [dict(run="s", parameter="algorithm.threshold", value=v, point_run=f"p{v}", dataset="synthetic",
                 algorithm=a, problems=6, accuracy=50.0 + i, target_step_share=10.0 * i, profile=prof, design=d,
                 system=sys, schedule=sch, latency_s=1.0 + i)
            for i, v in enumerate(["0.5", "0.7"]) for a in ("rsd", "brsd")
            for prof, d, sys, sch in [("paper_v12", "3-GPU", "gpu3", "sequential"),
                                      ("paper_v12", "FPGA+GPU (T1+T2)", "hetero_u280", "hetero"),
                                      ("measured", "measured: sequential", "this machine", "sequential"),
                                      ("measured", "measured: step_ahead", "this machine", "step_ahead")]]
    fig = FIGURES["sweep"].draw(rows)
    acc, share, simulated, measured = fig.axes
    assert acc.get_ylabel() == "accuracy (%)" and share.get_ylabel() == "target-step share (% of steps)"
    assert [t.get_text() for t in simulated.get_legend().get_texts()] == [
        "3-GPU: 3× RTX 3090 | rsd", "FPGA+GPU (T1+T2): U280 + 2× 3090 | rsd",
        "3-GPU: 3× RTX 3090 | brsd", "FPGA+GPU (T1+T2): U280 + 2× 3090 | brsd"]
    assert [t.get_text() for t in measured.get_legend().get_texts()] == [
        "sequential executor | rsd", "step_ahead executor | rsd", "sequential executor | brsd",
        "step_ahead executor | brsd"]
    assert list(simulated.get_lines()[0].get_ydata()) == [1.0, 2.0] and len(acc.get_lines()) == 2


def test_figure_without_rows_is_skipped_with_one_line(tmp_path, capsys):
    db = _catalogue(tmp_path, "SELECT 'ci' AS run, 'synthetic' AS dataset, 'rsd' AS method, 1.0 AS accuracy")
    assert draw("table3", "absent", tmp_path / "figures", db) == []
    assert draw("figure8", "ci", tmp_path / "figures", db) == []       # no replay_figure8 view at all
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["heterospec: figure table3 skipped: view table3_vs_paper has no rows for run absent",
                     "heterospec: figure figure8 skipped: view replay_figure8 has no rows for run ci"]
    assert not (tmp_path / "figures").exists()
    with pytest.raises(UserError, match="figure 'fig8': expected one of"):
        draw("fig8", "ci", tmp_path / "figures", db)


def test_report_cli_error_is_one_line(tmp_path):
    import sys
    r = run_cmd([sys.executable, "-m", "heterospec.report", "figure", "table3", "--run", "ci'; DROP",
                 "--out", str(tmp_path), "--db", str(tmp_path / "none.duckdb")])
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--run" in r.stderr


@pytest.mark.parametrize("text, expected", [
    ("algorithm.threshold=0.5,0.6,0.7", ("algorithm.threshold", ["0.5", "0.6", "0.7"])),
    (" eval_limit=5 ", ("eval_limit", ["5"])),
])
def test_sweep_parses_hydra_syntax(text, expected):
    assert parse_sweep(text) == expected


@pytest.mark.parametrize("text", ["algorithm.threshold", "=0.5,0.6", "a=0.5,,0.6", "a=1,1", "a b=1,2"])
def test_bad_sweep_is_one_line(text):
    with pytest.raises(UserError, match="--config sweep=") as e:
        parse_sweep(text)
    assert "\n" not in str(e.value)


def test_sweep_name_depends_on_what_it_sweeps():
    a, b = sweep_name("ci", "algorithm.threshold=0.5,0.7"), sweep_name("ci", "algorithm.threshold=0.5,0.9")
    assert a != b and a.startswith("ci.sweep+") and re.fullmatch(r"[A-Za-z0-9_.+-]+", a)


def _keys(*overrides):
    overrides = ["experiment=ci", *overrides]
    return RunPaths.for_run(compose_config(overrides), overrides).model_keys


def test_models_are_keyed_by_their_own_settings_not_the_run():
    base = _keys()
    assert _keys("algorithm.threshold=0.5") == base           # an algorithm sweep shares the trio
    assert _keys("eval_limit=5", "name=elsewhere") == base
    target = _keys("models.target.train.steps=301")
    assert target["target"] != base["target"] and target["draft"] == base["draft"] and target["prm"] == base["prm"]
    task = _keys("dataset.generator.max_operand=8")             # the training task shapes every role
    assert all(task[r] != base[r] for r in ROLES)
    paths = RunPaths.for_run(compose_config(["experiment=ci"]), ["experiment=ci"])
    assert [str(paths.model_manifest(r)) for r in ROLES] == [f"results/_models/{r}/{base[r]}/manifest.json"
                                                             for r in ROLES]


def test_tau_sweep_of_an_experiment_without_collect_reads_only_the_artifacts_traces(tmp_path):
    """artifact_replay decodes nothing: its tau sweep must not ask for collect traces (it once stopped with
    "collect: no collect traces yet"); ci collects sequentially, so its sweep does."""
    from heterospec.replay.grid.tau_sweep import _trace_sets, sweeps_ours, tau_sweep

    artifact, ci = compose_config(["experiment=artifact_replay"]), compose_config(["experiment=ci"])
    assert not sweeps_ours(artifact) and sweeps_ours(ci)
    paths = RunPaths(tmp_path / "results" / "run")
    assert _trace_sets(artifact, paths) == {}      # nothing imported yet either: no trace set, no demand
    with pytest.raises(UserError, match="no collect traces yet"):
        _trace_sets(ci, paths)
    with pytest.raises(UserError, match=r"no imported artifact traces \(replay.trace_sets \['with_bt', 'no_bt'\]\)"):
        tau_sweep(artifact, paths, ["experiment=artifact_replay"])
