"""The ``heterospec`` command.

    heterospec query "SELECT * FROM accuracy"     SQL over every result (DuckDB; reads only, never writes)
    heterospec config experiment=ci               print a run's resolved config
    heterospec models evaluate                    the trio's quality report (accuracy, PRM AUROC)
    heterospec collect report                     Table III, KV reuse and step-ahead speedup of a run
    heterospec collect compare A B                two collects problem by problem (brsd_u280 brsd_w8a8)
    heterospec views                              list the catalogue's views and their columns
    heterospec summary RUN                        what a finished run produced (its accuracy or sweep table)
    heterospec check [RUN]                        every model, export and kernel file against its manifest's sha256
    heterospec tables [RUN]                       the README's tables of a run (default: default), from the views
    heterospec results-doc [RUN] [--check]        docs/results/<run>.md and the README's results blocks, from a run
    heterospec replay import|run|validate|load|...  trace replay (python -m heterospec.replay --help)
    heterospec dfvg collect|replay|bench          DFVG speculative decoding (python -m heterospec.dfvg --help)
    heterospec gpu bundle|check                   the GPU path on an offline node (docs/gpu_check.md)
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from heterospec import stage
from heterospec.errors import UserError
from heterospec.paths import DUCKDB_FILE
from heterospec.store.results_page import README_TABLES
from heterospec.text_table import format_table


def _query(args) -> None:
    from heterospec.store.catalog import query
    cols, rows = query(args.db, args.sql, readable=[*_data_paths(args.db), *args.allow])
    if args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    elif args.format == "json":
        print(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1))
    else:
        print(format_table(cols, rows))


def _data_paths(db: Path) -> list[Path]:
    """The configured data folders (the composed config's ``paths``: benchmarks, the artifact checkout), which a query
    may read beside the results; relative ones are relative to the project root (the catalogue's parent's parent)."""
    from heterospec.config import compose_config
    root = Path(db).resolve().parent.parent
    return [root / str(p) for p in compose_config().paths.values()]


def _views(args) -> None:
    from heterospec.store.catalog import query
    _, views = query(args.db, "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name")
    for (name,) in views:
        cols, _ = query(args.db, f"SELECT * FROM {name} LIMIT 0")
        print(f"{name}: {', '.join(cols)}")


def _summary(args) -> None:
    """A finished run's headline table (accuracy, or a sweep's points) when it has one, else its tables."""
    from heterospec.store.catalog import TABLES, query
    _, views = query(args.db, "SELECT view_name FROM duckdb_views() WHERE NOT internal")
    present = {v for (v,) in views}
    run = args.run.replace("'", "''")
    for headline in ("accuracy", "sweep"):
        if headline in present:
            cols, rows = query(args.db, f"SELECT * FROM {headline} WHERE run = '{run}'")
            if rows:
                print(format_table(cols, rows))
                return
    mine = [v for v in TABLES if v in present and query(args.db, f"SELECT 1 FROM {v} WHERE run = '{run}' LIMIT 1")[1]]
    print(f"run {args.run}: {', '.join(mine) or 'no tables yet'} (heterospec query \"SELECT * FROM <view>\")")


def _config(args) -> None:
    from heterospec.config import to_yaml
    cfg, paths = stage.compose(args)
    print(f"# run {cfg.name} -> {paths.root}/")
    print(to_yaml(cfg), end="")


def _models(args) -> None:
    from heterospec.models.quality_report import print_quality, quality_report
    cfg, paths = stage.compose(args)
    table = quality_report(cfg, paths, args.overrides, paths.model_quality, reuse=not args.recompute)
    print_quality(table)


def _collect(args) -> None:
    """The collect stage's numbers for one run: Table III, step shares and KV reuse, step-ahead speedup."""
    from heterospec.config import compose_config
    from heterospec.store.catalog import query
    cfg = compose_config(args.overrides)
    run = cfg.name.replace("'", "''")
    for title, sql in (
        ("Accuracy (Table III)", f"SELECT dataset, method, problems, accuracy FROM table3 WHERE run = '{run}'"),
        ("Collection", f"SELECT dataset, algorithm, executor, problems, accuracy, target_step_share, mean_backtracks, "
                       f"draft_kv_reuse_ratio, mean_latency_s FROM collect_summary WHERE run = '{run}'"),
        ("Step-ahead over sequential (same problems)",
         f"SELECT dataset, algorithm, problems, speedup, identical_outputs_pct FROM step_ahead_speedup "
         f"WHERE run = '{run}'"),
    ):
        cols, rows = query(args.db, sql)
        print(f"{title} — run {cfg.name}")
        print(format_table(cols, rows))
        print()


def _collect_compare(args) -> None:
    """Two collects of the same problems, problem by problem (heterospec.store.compare)."""
    from heterospec.store.compare import compare_collects, parse_collect
    if len(args.collects) != 2:
        raise UserError(f"heterospec collect compare: expected two collects (ALGORITHM or RUN/ALGORITHM), "
                        f"got {len(args.collects)}")
    a, b = (parse_collect(c, args.run) for c in args.collects)
    cols, rows = compare_collects(args.db, a, b)
    print(f"{a[0]}/{a[1]} against {b[0]}/{b[1]}: problems alike (of those both collected)")
    print(format_table(cols, rows))
    differ = [r for r in rows if any(v is not None and v != r[2] for v in r[3:])]
    if differ and args.strict:
        raise UserError(f"{len(differ)} dataset/executor pair(s) differ")


def _check(args) -> None:
    """Every manifest under the results tree (or one run of it, with the shared models) against its files."""
    from heterospec.manifests import damage
    from heterospec.paths import artifact_manifests

    results = Path(args.results)
    if not results.is_dir():
        raise UserError(f"{results}: no results tree here (--results names another)")
    if args.run is not None and not (results / args.run).is_dir():
        raise UserError(f"{results / args.run}: no such run (heterospec check lists every run without RUN)")
    manifests = artifact_manifests(results, args.run)
    files, bad = 0, []
    for m in manifests:
        n, found = damage(m)
        files, bad = files + n, bad + found
    for line in bad:
        print(line)
    print(f"checked {len(manifests)} manifests, {files} files under {results}: "
          + (f"{len(bad)} damaged or missing" if bad else "all intact"), file=sys.stderr)
    if bad:
        sys.exit(1)
def _tables(args) -> None:
    """The README's tables for one run, from the catalogue's views; a view the run has no rows in says so."""
    from heterospec.store.catalog import query
    present = {v for (v,) in query(args.db, "SELECT view_name FROM duckdb_views() WHERE NOT internal")[1]}
    run = args.run.replace("'", "''")
    printed = 0
    for title, view, columns in README_TABLES:
        rows: list = []
        if view in present:
            cols, rows = query(args.db, f"SELECT {columns} FROM {view} WHERE run = '{run}' ORDER BY ALL")
        if not rows:
            print(f"{title}: no rows for run {args.run} in {view}\n")
            continue
        print(f"{title} — run {args.run}, view {view}")
        print(format_table(cols, rows))
        print()
        printed += 1
    if not printed:
        raise UserError(f"run {args.run}: none of the README's tables has rows in {args.db}; "
                        f"finished runs: heterospec query \"SELECT DISTINCT run FROM accuracy\"")


def _results_doc(args) -> None:
    """docs/results/<run>.md from a finished run, and the README's results blocks (heterospec.store.results_page)."""
    from datetime import datetime, timezone

    from heterospec.store.results_page import checkout_commit, generate
    readme = None if args.readme == Path("") else args.readme
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    written, stale = generate(args.db, args.run, args.out, readme, args.check, checkout_commit(Path.cwd()), date)
    if args.check:
        for s in stale:
            print(f"{s}: stale (heterospec results-doc {args.run} rewrites it)", file=sys.stderr)
        if stale:
            sys.exit(1)
        print(f"{readme}: every results block matches run {args.run}" if readme and readme.exists()
              else f"{readme}: no README to check", file=sys.stderr)
        return
    if written:
        print(f"wrote {written}", file=sys.stderr)
    if stale:
        print(f"rewrote {len(stale)} results block(s) in {readme}: {', '.join(s.split()[-1] for s in stale)}",
              file=sys.stderr)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="heterospec", description="Heterogeneous speculative inference, reproduced.")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("query", help="run read-only SQL against results/heterospec.duckdb")
    q.add_argument("sql")
    q.add_argument("--db", type=Path, default=DUCKDB_FILE)
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--allow", type=Path, action="append", default=[], metavar="DIR",
                   help="a further folder the query may read (the results and configured data paths always)")
    q.set_defaults(func=_query)

    v = sub.add_parser("views", help="list the catalogue's views and their columns")
    v.add_argument("--db", type=Path, default=DUCKDB_FILE)
    v.set_defaults(func=_views)

    s = sub.add_parser("summary", help="what a finished run produced: its accuracy table, or its tables")
    s.add_argument("run", help="the run's name (results/<run>/)")
    s.add_argument("--db", type=Path, default=DUCKDB_FILE)
    s.set_defaults(func=_summary)

    ck = sub.add_parser("check", help="check every model, export and kernel file against its manifest")
    ck.add_argument("run", nargs="?", help="one run (results/<run>/; the shared models too); default every run")
    ck.add_argument("--results", type=Path, default=DUCKDB_FILE.parent, help="the results tree (default results)")
    ck.set_defaults(func=_check)
    t = sub.add_parser("tables", help="print the README's tables (quality, Table III, collect, DFVG) of a run")
    t.add_argument("run", nargs="?", default="default", help="the run's name (results/<run>/; default: default)")
    t.add_argument("--db", type=Path, default=DUCKDB_FILE)
    t.set_defaults(func=_tables)
    rd = sub.add_parser("results-doc", help="write docs/results/<run>.md and the README's results blocks from a run")
    rd.add_argument("run", nargs="?", default="default", help="the run's name (results/<run>/; default: default)")
    rd.add_argument("--out", type=Path, default=Path("docs/results"), help="where the page goes (docs/results)")
    rd.add_argument("--readme", type=Path, default=Path("README.md"),
                    help="the README whose <!-- results: NAME --> blocks are rewritten ('' for none)")
    rd.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming each README block that differs from what it would write")
    rd.add_argument("--db", type=Path, default=DUCKDB_FILE)
    rd.set_defaults(func=_results_doc)

    c = sub.add_parser("config", help="print the resolved config for Hydra overrides")
    c.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
    c.set_defaults(func=_config)

    m = sub.add_parser("models", help="model commands")
    m.add_argument("action", choices=["evaluate"], help="evaluate: quality of the trained trio")
    m.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
    m.add_argument("--recompute", action="store_true", help="recompute even if the report exists")
    m.set_defaults(func=_models)

    k = sub.add_parser("collect", help="collect commands")
    ks = k.add_subparsers(dest="action", required=True)
    kr = ks.add_parser("report", help="accuracy, KV reuse and step-ahead speedup of a run")
    kr.add_argument("overrides", nargs="*", help="Hydra overrides naming the run (e.g. experiment=ci)")
    kr.add_argument("--db", type=Path, default=DUCKDB_FILE)
    kr.set_defaults(func=_collect)
    kc = ks.add_parser("compare", help="two collects problem by problem: same answers, steps, PRM calls, KVMU log")
    kc.add_argument("collects", nargs="+", metavar="COLLECT", help="two of ALGORITHM or RUN/ALGORITHM")
    kc.add_argument("--run", default="default", help="the run of a COLLECT given without one (default: default)")
    kc.add_argument("--strict", action="store_true", help="fail (exit 2) when any problem differs")
    kc.add_argument("--db", type=Path, default=DUCKDB_FILE)
    kc.set_defaults(func=_collect_compare)

    r = sub.add_parser("replay", help="trace replay: import | run | validate | load | load-point | ours | tau-sweep (python -m heterospec.replay)",
                       add_help=False)
    r.add_argument("args", nargs=argparse.REMAINDER)
    r.set_defaults(func=lambda a: _replay_main(a.args))

    f = sub.add_parser("dfvg", help="DFVG: collect | replay | bench (python -m heterospec.dfvg)", add_help=False)
    f.add_argument("args", nargs=argparse.REMAINDER)
    g = sub.add_parser("gpu", help="the GPU path on an offline node: bundle | check (docs/gpu_check.md)",
                       add_help=False)
    g.add_argument("args", nargs=argparse.REMAINDER)

    if argv[:1] == ["replay"]:   # its own parser, flags included (argparse's REMAINDER drops a leading --flag)
        return _replay_main(argv[1:])
    if argv[:1] == ["dfvg"]:
        from heterospec.dfvg.stage import main as dfvg_main
        return dfvg_main(argv[1:])
    if argv[:1] == ["gpu"]:
        from heterospec.gpu.__main__ import main as gpu_main
        return gpu_main(argv[1:])
    args = p.parse_args(argv)
    args.func(args)


def _replay_main(argv: list[str]) -> None:
    from heterospec.replay.__main__ import main as replay_main
    replay_main(argv)


def entry() -> None:
    stage.run(main)
