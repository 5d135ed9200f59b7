"""Bad input gets one line that names the file or key and says what to do, and no traceback: Snakemake's --config,
a corrupt Parquet file under results/, an artifact trace that does not parse; and a run without an accuracy table
ends quietly."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT, heterospec, run_cmd, snakemake
from heterospec.config.snakemake import parse_overrides, validate_config
from heterospec.errors import UserError
from heterospec.evaluate import EVALUATION_SCHEMA
from heterospec.replay.artifact.importer import import_traces
from heterospec.replay.validation.against_collect import REPLAY_VALIDATION_SCHEMA
from heterospec.store import write_parquet
from heterospec.store.catalog import build, query
from test_replay_importer import v12_doc, write
from test_store import _evaluation_rows

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_misspelt_config_key_stops_the_workflow(tmp_path):
    r = snakemake("-n", "--directory", str(tmp_path), "--config", "experment=ci")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("heterospec:")]
    assert len(line) == 1 and "'experment'" in line[0]
    assert all(k in line[0] for k in ("experiment", "overrides", "name"))
    assert "results/" not in r.stdout   # nothing was planned


def test_config_schema_fills_defaults_and_checks_types():
    cfg = {}
    validate_config(cfg, SCHEMA)
    assert cfg == {"experiment": "default", "overrides": "", "sweep": ""}
    validate_config(ok := {"experiment": "ci", "overrides": ["eval_limit=5"], "name": 7}, SCHEMA)
    assert ok["name"] == 7
    with pytest.raises(UserError, match=r"--config name: .* not of type") as e:
        validate_config({"name": [1, 2]}, SCHEMA)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="unknown --config key 'sweeps'"):
        validate_config({"experiment": "ci", "sweeps": "x"}, SCHEMA)


@pytest.mark.parametrize("text, expected", [
    ("", []),
    ("eval_limit=5 'name=a b'", ["eval_limit=5", "name=a b"]),
    ("[eval_limit=5,replay.profiles=[roofline,hls],x={a:1,b:2}]",
     ["eval_limit=5", "replay.profiles=[roofline,hls]", "x={a:1,b:2}"]),
    (["a=1", "b=2"], ["a=1", "b=2"]),
])
def test_overrides_parse(text, expected):
    assert parse_overrides(text) == expected


def _catalogue_with_a_truncated_file(tmp_path):
    results = tmp_path / "results"
    good = results / "r1" / "evaluate" / "synthetic" / "draft_only.parquet"
    write_parquet(_evaluation_rows("r1", "draft_only", [True, False]), good, EVALUATION_SCHEMA)
    bad = results / "r2" / "evaluate" / "synthetic" / "draft_only.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    return results / "heterospec.duckdb", bad


def test_truncated_parquet_names_the_file_and_the_fix(tmp_path):
    db, bad = _catalogue_with_a_truncated_file(tmp_path)
    r = heterospec_aggregate(db)
    line = one_line(r.stderr)
    assert r.returncode == 2 and str(bad) in line and "delete it" in line and "rerun" in line
    assert not db.exists() and not list(db.parent.glob(".heterospec.duckdb.tmp*"))   # nothing half-written
    bad.unlink()
    assert build(db, tmp_path) == ["evaluations", "accuracy", "target_sd_speedup"]


def test_file_broken_after_the_catalogue_was_built(tmp_path):
    db, bad = _catalogue_with_a_truncated_file(tmp_path)
    good_bytes = (tmp_path / "results/r1/evaluate/synthetic/draft_only.parquet").read_bytes()
    bad.write_bytes(good_bytes)
    build(db, tmp_path)
    bad.write_bytes(good_bytes[:100])
    with pytest.raises(UserError) as e:
        query(db, "SELECT * FROM accuracy")
    assert str(bad) in str(e.value) and "delete it" in str(e.value)


def heterospec_aggregate(db):
    return run_cmd([sys.executable, "-m", "heterospec.aggregate", "--db", str(db)])


def test_run_without_accuracy_ends_quietly(tmp_path):
    results = tmp_path / "results"
    write_parquet([], results / "rr" / "replay" / "validation.parquet", REPLAY_VALIDATION_SCHEMA)
    db = results / "heterospec.duckdb"
    build(db, tmp_path)
    r = heterospec("summary", "rr", "--db", str(db))
    assert r.returncode == 0 and r.stderr == ""
    assert "error" not in r.stdout.lower() and r.stdout.startswith("run rr:")
    write_parquet(_evaluation_rows("r1", "draft_only", [True, False]),
                  results / "r1" / "evaluate" / "synthetic" / "draft_only.parquet", EVALUATION_SCHEMA)
    build(db, tmp_path)
    r = heterospec("summary", "r1", "--db", str(db))
    assert r.returncode == 0 and "draft_only" in r.stdout and "50" in r.stdout


def test_bad_trace_names_file_field_and_how_many_were_read(tmp_path):
    for i in range(3):
        write(tmp_path, f"ds/example_{i}.json", v12_doc(i))
    doc = v12_doc(3)
    doc["execution_trace"][1].pop("draft_tokens_spent")
    bad = write(tmp_path, "ds/example_3.json", doc)
    write(tmp_path, "ds/example_4.json", v12_doc(4))
    with pytest.raises(UserError) as e:
        import_traces(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and str(bad) in msg and "execution_trace[1].draft_tokens_spent" in msg
    assert "3 of 5 traces read before it" in msg
