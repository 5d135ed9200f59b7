"""``python -m heterospec.report``: draw one figure of a run from the catalogue, or record a sweep's points; the
figures draw from stage outputs only (the replays they show are the replay stage's: ``python -m heterospec.replay
ours|tau-sweep``).

    python -m heterospec.report figure table3 --run ci --out results/ci/figures
    python -m heterospec.report sweep --out results/<sweep>/sweep/points.parquet --point RUN KEY=VALUE ...
    python -m heterospec.report paper-table3 [overrides]   the artifact's Table III, when a checkout is configured
"""
from __future__ import annotations

import csv
import logging
import re
import sys
from pathlib import Path

from heterospec import stage
from heterospec.errors import UserError
from heterospec.paths import DUCKDB_FILE

log = logging.getLogger("heterospec.report")


def rows_of(db: Path, view: str, run: str) -> tuple[list[str], list[tuple]]:
    """The view's rows of one run, in a fixed order: what a figure plots and its CSV holds."""
    from heterospec.store.catalog import query

    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", run):
        raise UserError(f"--run {run}: a run name holds only letters, digits and _ . + -")
    views = {name for (name,) in query(db, "SELECT view_name FROM duckdb_views() WHERE NOT internal")[1]}
    if view not in views:
        return [], []
    return query(db, f"SELECT * FROM {view} WHERE run = '{run}' ORDER BY ALL")


def draw(name: str, run: str, out: Path, db: Path = DUCKDB_FILE) -> list[Path]:
    """Write ``<out>/<name>.{png,svg,csv}``; a figure without rows for this run is skipped with one line."""
    from heterospec.report.figures import FIGURES
    from heterospec.report.plot import save

    if name not in FIGURES:
        raise UserError(f"figure '{name}': expected one of {list(FIGURES)}")
    fig = FIGURES[name]
    columns, rows = rows_of(db, fig.view, run)
    if not rows:
        print(f"heterospec: figure {name} skipped: view {fig.view} has no rows for run {run}", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    paths = save(fig.draw([dict(zip(columns, r)) for r in rows]), out / name)
    log.info("figure %s: %d rows of %s -> %s", name, len(rows), fig.view, out)
    return [out / f"{name}.csv", *paths]


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m heterospec.report", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("figure", help="draw one figure of a run")
    f.add_argument("name")
    f.add_argument("--run", required=True, help="the run's name (results/<run>/)")
    f.add_argument("--out", type=Path, required=True, help="folder for <name>.png, .svg, .csv")
    f.add_argument("--db", type=Path, default=DUCKDB_FILE)
    s = sub.add_parser("sweep", help="record which runs a sweep made")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--point", nargs="+", action="append", required=True, metavar=("RUN", "KEY=VALUE"))
    sub.add_parser("paper-table3", help="import the artifact's Table III").add_argument(
        "overrides", nargs="*", help="Hydra overrides")
    args = p.parse_args(argv)
    if args.command == "figure":
        draw(args.name, args.run, args.out, args.db)
    elif args.command == "sweep":
        from heterospec.report.sweep import write_points
        write_points(args.out, args.point)
    else:
        from heterospec.report import sources
        cfg, paths = stage.compose(args)
        sources.paper_table3(cfg, paths)


if __name__ == "__main__":
    stage.run(main)
