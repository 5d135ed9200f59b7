"""Versioned Parquet tables and the DuckDB catalogue behind `heterospec query`."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import heterospec
from heterospec.errors import UserError
from heterospec.evaluate import EVALUATION_SCHEMA
from heterospec.store import read_parquet, versioned, write_parquet
from heterospec.store.catalog import build, query

SCHEMA = versioned("demo", 1, [pa.field("a", pa.int32()), pa.field("b", pa.string())])


def test_roundtrip_and_tag(tmp_path):
    write_parquet([{"a": 1, "b": "x"}], tmp_path / "t.parquet", SCHEMA)
    t = read_parquet(tmp_path / "t.parquet", SCHEMA)
    assert t.to_pylist() == [{"a": 1, "b": "x"}]
    assert not list(tmp_path.glob(".*tmp*"))  # atomic write leaves no temp file


def test_reader_rejects_other_schemas(tmp_path):
    pq.write_table(pa.table({"a": pa.array([1], pa.int64()), "b": ["x"]}), tmp_path / "untagged.parquet")
    with pytest.raises(UserError, match="untagged.parquet: schema untagged, expected demo/v1"):
        read_parquet(tmp_path / "untagged.parquet", SCHEMA)
    v2 = versioned("demo", 2, list(SCHEMA))
    write_parquet([{"a": 1, "b": "x"}], tmp_path / "v2.parquet", v2)
    with pytest.raises(UserError, match="schema demo/v2, expected demo/v1"):
        read_parquet(tmp_path / "v2.parquet", SCHEMA)
    wrong_type = versioned("demo", 1, [pa.field("a", pa.int64()), pa.field("b", pa.string())])
    write_parquet([{"a": 1, "b": "x"}], tmp_path / "w.parquet", wrong_type)
    with pytest.raises(UserError, match="column 'a' has type int64, expected int32"):
        read_parquet(tmp_path / "w.parquet", SCHEMA)
    missing = versioned("demo", 1, [pa.field("a", pa.int32())])
    write_parquet([{"a": 1}], tmp_path / "m.parquet", missing)
    with pytest.raises(UserError, match="column 'b' missing"):
        read_parquet(tmp_path / "m.parquet", SCHEMA)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="junk.parquet: not a readable Parquet file"):
        read_parquet(tmp_path / "junk.parquet", SCHEMA)


def _evaluation_rows(run, method, correct):
    return [dict(run=run, experiment=run, models="tiny", dataset="synthetic", method=method, problem_id=str(i),
                 answer="1", prediction="1" if c else "2", correct=c, output="", prompt_tokens=3, output_tokens=5,
                 wall_s=0.1) for i, c in enumerate(correct)]


def test_catalogue_views_and_query_cli(tmp_path):
    results = tmp_path / "results"
    write_parquet(_evaluation_rows("r1", "draft_only", [True, False, False, False]),
                  results / "r1" / "evaluate" / "synthetic" / "draft_only.parquet", EVALUATION_SCHEMA)
    write_parquet(_evaluation_rows("r1", "target_only", [True, True, True, False]),
                  results / "r1" / "evaluate" / "synthetic" / "target_only.parquet", EVALUATION_SCHEMA)
    db = results / "heterospec.duckdb"
    assert build(db, tmp_path) == ["evaluations", "accuracy", "target_sd_speedup"]
    cols, rows = query(db, "SELECT method, accuracy FROM accuracy ORDER BY method")
    assert rows == [("draft_only", 25.0), ("target_only", 75.0)]
    # the catalogue works from any working directory: its globs resolve against the project root
    r = heterospec("query", "SELECT method, problems, accuracy FROM accuracy", "--db", str(db), cwd=tmp_path.parent)
    assert r.returncode == 0, r.stderr
    assert "target_only  4         75" in r.stdout and "(2 rows)" in r.stdout
    r = heterospec("query", "SELECT nope FROM accuracy", "--db", str(db), "--format", "csv")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "query failed" in r.stderr


def test_query_without_catalogue_says_what_to_run(tmp_path):
    r = heterospec("query", "SELECT 1", "--db", str(tmp_path / "none.duckdb"))
    assert r.returncode == 2 and "snakemake --cores all" in r.stderr


def test_every_collect_table_has_a_view():
    # each table the collect stage writes (calls, steps, problems, kvmu, repeats) is queryable as collect_<name>
    from heterospec.reasoning.collect_schemas import COLLECT_TABLES as COLLECT
    from heterospec.store.catalog import TABLES
    for name in COLLECT:
        assert TABLES.get(f"collect_{name}") == f"results/*/collect/*/*/*/{name}.parquet", name
