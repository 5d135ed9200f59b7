"""The ``aggregate`` stage: rebuild ``results/heterospec.duckdb`` with views over all Parquet results.

    python -m heterospec.aggregate
"""
from __future__ import annotations

import argparse
from pathlib import Path

from heterospec import stage
from heterospec.paths import DUCKDB_FILE
from heterospec.store.catalog import build


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m heterospec.aggregate", description=__doc__.splitlines()[0])
    p.add_argument("--db", type=Path, default=DUCKDB_FILE)
    args = p.parse_args(argv)
    views = build(args.db, args.db.resolve().parent.parent)
    print(f"[aggregate] {args.db}: {len(views)} views")
    for i in range(0, len(views), 8):   # a few names a line: the log stays readable
        print(f"[aggregate]   {', '.join(views[i:i + 8])}")


if __name__ == "__main__":
    stage.run(main)
