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
    sources = set(re.findall(r'"(\w+)": \w+_outputs|"(\w+)": evaluations', common))
    named = {a or b for a, b in sources} | {"sweep"}
    assert named == set(FIGURES)
    for name in FIGURES:
        caption = (ROOT / "workflow" / "report" / f"{name}.rst").read_text()
        assert "*Numbers:*" in caption and "*Against the paper" in caption and FIGURES[name].view in caption


def _catalogue(tmp_path, rows_sql: str):
    db = tmp_path / "results" / "heterospec.duckdb"
    db.parent.mkdir(parents=True)
    con = duckdb.connect(str(db))
    con.execute(f"CREATE VIEW table3 AS {rows_sql}")
    con.close()
    return db


def test_figure_csv_holds_the_views_rows_of_its_run(tmp_path):
    db = _catalogue(tmp_path, """SELECT * FROM (VALUES
        ('ci', 'tiny', 'synthetic', 'target_only', 20, 95.0), ('ci', 'tiny', 'synthetic', 'draft_only', 20, 35.5),
        ('other', 'tiny', 'synthetic', 'rsd', 20, 60.0)) t(run, models, dataset, method, problems, accuracy)""")
    out = tmp_path / "figures"
    files = draw("table3", "ci", out, db)
    assert sorted(f.name for f in files) == ["table3.csv", "table3.png", "table3.svg"]
    assert all(f.stat().st_size > 0 for f in files)
    with open(out / "table3.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["run", "models", "dataset", "method", "problems", "accuracy"],
                    ["ci", "tiny", "synthetic", "draft_only", "20", "35.5"],
                    ["ci", "tiny", "synthetic", "target_only", "20", "95.0"]]
    assert (out / "table3.png").read_bytes().startswith(b"\x89PNG")


def test_figure_without_rows_is_skipped_with_one_line(tmp_path, capsys):
    db = _catalogue(tmp_path, "SELECT 'ci' AS run, 'synthetic' AS dataset, 'rsd' AS method, 1.0 AS accuracy")
    assert draw("table3", "absent", tmp_path / "figures", db) == []
    assert draw("figure8", "ci", tmp_path / "figures", db) == []       # no replay_figure8 view at all
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["heterospec: figure table3 skipped: view table3 has no rows for run absent",
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
