"""The check's short summary: every table it wrote (each read back through DuckDB, with its row count), the
headline numbers from them, where the time went; ``summary.json`` for machines and ``summary.md`` for people."""
from __future__ import annotations

import json
from pathlib import Path

from heterospec.paths import RunPaths
from heterospec.text_table import format_table

# (title, SQL over one glob of the run's tables)
CHECK_HEADLINES = (
    ("Batched prices: batch 1 against the largest batch, at each context (ms per pass)", "replay/batch_prices.parquet",
     "SELECT role, phase, context, tokens, min(batch) AS batch_lo, round(arg_min(ms, batch), 3) AS ms_lo, "
     "max(batch) AS batch_hi, round(arg_max(ms, batch), 3) AS ms_hi, "
     "round(arg_max(ms, batch) / arg_min(ms, batch), 2) AS cost_ratio FROM t GROUP BY ALL ORDER BY ALL"),
    ("Collects (RSD / BRSD on the device)", "collect/*/*/*/problems.parquet",
     "SELECT algorithm, executor, count(*) AS problems, round(100 * avg(correct::INT), 1) AS accuracy_pct, "
     "round(avg(latency_s), 3) AS mean_latency_s, round(sum(draft_tokens + target_tokens) / sum(latency_s), 1) "
     "AS tokens_per_s FROM t GROUP BY ALL ORDER BY ALL"),
    ("Evaluate (single models; target_sd: the target speculating with the draft)", "evaluate/*/*.parquet",
     "SELECT method, count(*) AS problems, round(100 * avg(correct::INT), 1) AS accuracy_pct, "
     "round(sum(output_tokens) / sum(wall_s), 1) AS tokens_per_s FROM t GROUP BY ALL ORDER BY ALL"),
    ("DFVG bench: wall clock per method (fastest repetition)", "dfvg/bench_wall.parquet",
     "SELECT method, tokens, wall_s, tok_per_s, speedup_vs_target, identical FROM t"),
    ("DFVG bench: tau per strategy", "dfvg/bench_tau.parquet",
     "SELECT strategy, rounds, tau, acceptance FROM t"),
)


def _sql_str(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def tables(root: Path) -> list[Path]:
    """The run's finished tables (the collects' per-shard tables and journals are their stage's intermediates)."""
    return sorted(p for p in root.rglob("*.parquet") if not any(part.startswith("shard-") for part in p.parts))


def summarise(out: Path, run: str, paths: RunPaths, env: dict, seconds: dict[str, float]) -> dict:
    """Write ``summary.json`` and ``summary.md`` under ``out`` (the working folder: paths are relative to it)."""
    import duckdb

    con = duckdb.connect()
    listed = []
    for p in tables(paths.root):
        rows = con.execute(f"SELECT count(*) FROM read_parquet({_sql_str(p)})").fetchall()[0][0]
        listed.append(dict(path=str(p), rows=rows))
    headlines = []
    for title, glob, sql in CHECK_HEADLINES:
        files = sorted(paths.root.glob(glob))
        if not files:
            continue
        con.execute(f"CREATE OR REPLACE TEMP VIEW t AS SELECT * FROM read_parquet([{', '.join(map(_sql_str, files))}], "
                    f"union_by_name = true)").fetchall()
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        headlines.append(dict(title=title, columns=cols, rows=[list(r) for r in cur.fetchall()]))
    summary = dict(run=run, results=str(paths.root), **env, seconds=dict(seconds),
                   steps_s=round(sum(seconds.values()), 1), tables=listed, headlines=headlines)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "summary.md").write_text(render(summary))
    return summary


def render(s: dict) -> str:
    """summary.md: what ran where, the headline tables, the time per step, the tables written."""
    lines = [f"# GPU check on {s['device']} ({s['device_name']})", "",
             f"Run `{s['run']}` ({' '.join(s['overrides'])}); Python {s['python']}, torch {s['torch']} (CUDA "
             f"{s['cuda'] or 'none'}), transformers {s['transformers']}. The steps took {s['steps_s']} s; this invocation "
             f"{s['this_run_s']} s (a resumed check keeps the steps it finished before).", ""]
    for h in s["headlines"]:
        lines += [f"## {h['title']}", "", "```", format_table(h["columns"], [tuple(r) for r in h["rows"]]), "```", ""]
    lines += ["## Seconds per step", "", "```",
              format_table(["step", "seconds"], list(s["seconds"].items())),
              "```", "", "## Tables (each read back through DuckDB)", "", "```",
              format_table(["path", "rows"], [(t["path"], t["rows"]) for t in s["tables"]]), "```", ""]
    return "\n".join(lines)
