"""`heterospec tables RUN` prints the README's tables of a run from the catalogue's views: every column it asks
for exists in its view, a run's rows come out (and only that run's), a view without rows says so, and a run with
none of them is one line."""
from __future__ import annotations

from conftest import heterospec
from heterospec.cli import README_TABLES
from heterospec.evaluate import EVALUATION_SCHEMA
from heterospec.store import write_parquet
from heterospec.store.catalog import TABLES, build, query
from test_query_readonly import SCHEMAS


def _rows(run: str, method: str, correct: list[bool]) -> list[dict]:
    return [dict(run=run, experiment=run, models="tiny", dataset="synthetic", method=method, problem_id=str(i),
                 answer="1", prediction="1" if c else "2", correct=c, output="", prompt_tokens=3, output_tokens=5,
                 wall_s=0.1) for i, c in enumerate(correct)]


def test_readme_tables_of_a_run(tmp_path):
    for view, globs in TABLES.items():          # every view present (empty), so every table's SELECT is checked
        for g in (globs,) if isinstance(globs, str) else globs:
            write_parquet([], tmp_path / g.replace("*", "empty"), SCHEMAS[view])
    ev = tmp_path / "results" / "r1" / "evaluate" / "synthetic"
    write_parquet(_rows("r1", "draft_only", [True, False, False, False]), ev / "draft_only.parquet", EVALUATION_SCHEMA)
    write_parquet(_rows("r1", "target_only", [True, True, True, True]), ev / "target_only.parquet", EVALUATION_SCHEMA)
    write_parquet(_rows("r2", "draft_only", [False]), tmp_path / "results" / "r2" / "evaluate" / "synthetic" /
                  "draft_only.parquet", EVALUATION_SCHEMA)
    db = tmp_path / "results" / "heterospec.duckdb"
    build(db, tmp_path)
    for _, view, columns in README_TABLES:
        assert query(db, f"SELECT {columns} FROM {view} LIMIT 0")[0] == [c.strip() for c in columns.split(",")]
    r = heterospec("tables", "r1", "--db", str(db))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Accuracy, Table III — run r1, view table3" in out
    assert "synthetic  draft_only   4         25" in out and "synthetic  target_only  4         100" in out, out
    table3 = out.split("view table3\n")[1].split("\n\n")[0]
    assert table3.endswith("(2 rows)"), table3              # r1's two methods, not r2's
    assert "Model quality (docs/models.md): no rows for run r1 in model_quality" in out
    r = heterospec("tables", "nope", "--db", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "run nope: none of the README's tables" in r.stderr
