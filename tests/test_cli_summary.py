"""`heterospec summary RUN` prints a sweep's points as its headline table, like a run's accuracy."""
from __future__ import annotations

import pyarrow as pa

from conftest import heterospec
from heterospec.reasoning.collect_schemas import COLLECT_PROBLEMS_SCHEMA
from heterospec.report.sweep import write_points
from heterospec.store import write_parquet
from heterospec.store.catalog import build


def _problem(run: str, pid: str, correct: bool) -> dict:
    """One collect_problems row: zero counts, one step written by the draft."""
    row = {f.name: (0 if pa.types.is_integer(f.type) else 0.0 if pa.types.is_floating(f.type) else "")
           for f in COLLECT_PROBLEMS_SCHEMA}
    row.update(run=run, models="tiny", dataset="synthetic", algorithm="brsd", executor="sequential",
               problem_id=pid, correct=correct, steps=1, draft_steps=1, draft_tokens=4, latency_s=0.1)
    return row


def test_summary_of_a_sweep_prints_its_points(tmp_path):
    results = tmp_path / "results"
    for point, correct in (("base+a", [True, True]), ("base+b", [True, False])):
        rows = [_problem(point, f"p{i}", c) for i, c in enumerate(correct)]
        write_parquet(rows, results / point / "collect" / "synthetic" / "brsd" / "sequential" / "problems.parquet",
                      COLLECT_PROBLEMS_SCHEMA)
    write_points(results / "base.sweep+1" / "sweep" / "points.parquet",
                 [["base+a", "algorithm.threshold=0.5"], ["base+b", "algorithm.threshold=0.7"]])
    db = results / "heterospec.duckdb"
    build(db, tmp_path)
    r = heterospec("summary", "base.sweep+1", "--db", str(db))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["run", "parameter", "value", "point_run"]
    # one row per point, in value order, each with its own run's accuracy
    rows = [dict(zip(lines[0].split(), ln.split())) for ln in lines[2:] if not ln.startswith("(")]
    assert [(r["value"], r["point_run"], r["accuracy"]) for r in rows] == [("0.5", "base+a", "100"),
                                                                           ("0.7", "base+b", "50")]
