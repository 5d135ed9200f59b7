"""The DuckDB catalogue: one file, ``results/heterospec.duckdb``, holding views over every run's Parquet.

Views name Parquet globs relative to the project root, so the file stays valid when the
project moves; :func:`connect` points DuckDB's file search path at that root. A stage that
writes a new table adds its glob to ``TABLES`` and any summaries to ``SUMMARIES``.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

import duckdb

from heterospec.errors import UserError

# view name -> Parquet glob (relative to the project root), one view per table kind
TABLES: dict[str, str] = {
    "evaluations": "results/*/evaluate/*/*.parquet",
    "model_quality": "results/*/models/quality.parquet",
}

# view name -> (tables it reads, SQL); created when all the tables it reads exist
SUMMARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "accuracy": (("evaluations",), """
        SELECT run, experiment, models, dataset, method,
               count(*) AS problems,
               round(100 * avg(correct::INTEGER), 1) AS accuracy,
               round(avg(output_tokens), 1) AS mean_output_tokens,
               round(sum(wall_s), 1) AS wall_s
        FROM evaluations GROUP BY ALL ORDER BY run, dataset, method"""),
}


def build(db_path: Path, root: Path = Path(".")) -> list[str]:
    """(Re)create the catalogue at ``db_path`` with a view for every table that has files; atomic."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(f".{db_path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    con.execute(f"SET file_search_path = '{Path(root).resolve()}'")
    made: list[str] = []
    try:
        for view, pattern in TABLES.items():
            if glob.glob(str(Path(root) / pattern)):
                con.execute(f"CREATE VIEW {view} AS SELECT * FROM read_parquet('{pattern}', union_by_name = true)")
                made.append(view)
        for view, (needs, sql) in SUMMARIES.items():
            if all(n in made for n in needs):
                con.execute(f"CREATE VIEW {view} AS {sql}")
                made.append(view)
    finally:
        con.close()
    os.replace(tmp, db_path)
    return made


def connect(db_path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection whose relative Parquet globs resolve against the project root."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise UserError(f"{db_path}: no results catalogue yet; run `snakemake --cores all` first")
    con = duckdb.connect(str(db_path), read_only=True)
    con.execute(f"SET file_search_path = '{db_path.resolve().parent.parent}'")
    return con


def query(db_path: Path, sql: str):
    """Run SQL against the catalogue; returns (column names, rows)."""
    con = connect(db_path)
    try:
        rel = con.sql(sql)
        if rel is None:
            return [], []
        return rel.columns, rel.fetchall()
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0]
        raise UserError(f"query failed: {first}") from None
    finally:
        con.close()
