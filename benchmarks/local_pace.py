"""How much of the replay validation's aggregate error is drift on the scale of seconds: the measured latencies
divided by the draft's pace in their round and block of problems, against the replay.

    python benchmarks/local_pace.py results/default [--block 20]     # a finished default run (collect.repeats 2)

The timed job measures every problem of a round in the dataset's order (docs/collect.md), so a block of
``--block`` consecutive problems is a few seconds of one round, in which every configuration ran. Its local pace,
per executor, is the draft's decode ms per token over the block's calls of that executor's configurations, divided
by the same over the whole run: 1.0 is the run's average speed, 1.15 a spell 15 % slower. Dividing each repeat's
latency by its block's pace and taking the faster repeat gives a measured latency the spells no longer move; the
replay (``replay/validation.parquet``) is unchanged. It prints, per trace set and executor, the replay's error on
the mean, the P50 and the P90 of the per-problem latencies and its per-problem MAE, as measured (the numbers of
``replay_validation_summary``) and with the local pace taken out, and the range of the local paces.

This is a diagnostic, not the validation: the draft's pace is measured on the very calls whose latencies it
divides, so it takes out the draft's own per-block noise as well as the machine's. The order of the problems is the
number that ends their id (the synthetic dataset's ``syn-<seed>-<index>``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

from heterospec.text_table import format_table

QUERY = """
WITH rep AS (
    SELECT algorithm AS trace_set, executor, problem_id, repeat,
           CAST(regexp_extract(problem_id, '(\\d+)$', 1) AS INTEGER) // $block AS block,
           max(end_ns) / 1e6 AS ms,
           sum(end_ns - start_ns) FILTER (role = 'draft' AND phase = 'decode') AS draft_ns,
           sum(tokens_out) FILTER (role = 'draft' AND phase = 'decode') AS draft_tokens
    FROM read_parquet($repeats, union_by_name = true)
    WHERE algorithm IN (SELECT DISTINCT trace_set FROM read_parquet($validation))
    GROUP BY ALL),
run_pace AS (SELECT executor, sum(draft_ns) / sum(draft_tokens) AS ns_per_token FROM rep GROUP BY ALL),
pace AS (SELECT r.executor, repeat, block, sum(draft_ns) / sum(draft_tokens) / any_value(p.ns_per_token) AS pace
         FROM rep r JOIN run_pace p USING (executor) GROUP BY ALL),
adjusted AS (SELECT trace_set, executor, problem_id, min(ms / pace) AS ms
             FROM rep JOIN pace USING (executor, repeat, block) GROUP BY ALL),
v AS (SELECT v.trace_set, v.executor, v.predicted_ms, v.measured_ms, a.ms AS adjusted_ms
      FROM read_parquet($validation) v
      JOIN adjusted a ON a.trace_set = v.trace_set AND a.executor = v.executor AND a.problem_id = v.problem)
SELECT trace_set, executor, count(*) AS problems,
       round(100 * (avg(predicted_ms) / avg(measured_ms) - 1), 2) AS mean_error_pct,
       round(100 * (median(predicted_ms) / median(measured_ms) - 1), 2) AS p50_error_pct,
       round(100 * (quantile_cont(predicted_ms, 0.9) / quantile_cont(measured_ms, 0.9) - 1), 2) AS p90_error_pct,
       round(100 * avg(abs(predicted_ms / measured_ms - 1)), 2) AS mae_pct,
       round(100 * (avg(predicted_ms) / avg(adjusted_ms) - 1), 2) AS paced_mean_error_pct,
       round(100 * (median(predicted_ms) / median(adjusted_ms) - 1), 2) AS paced_p50_error_pct,
       round(100 * (quantile_cont(predicted_ms, 0.9) / quantile_cont(adjusted_ms, 0.9) - 1), 2) AS paced_p90_error_pct,
       round(100 * avg(abs(predicted_ms / adjusted_ms - 1)), 2) AS paced_mae_pct,
       (SELECT round(min(pace), 3) FROM pace) AS pace_min, (SELECT round(max(pace), 3) FROM pace) AS pace_max
FROM v GROUP BY ALL ORDER BY ALL
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished run's folder, e.g. results/default")
    ap.add_argument("--block", type=int, default=20, help="consecutive problems per block (default 20)")
    a = ap.parse_args(argv)
    repeats = sorted(str(p) for p in a.run.glob("collect/*/*/*/repeats.parquet"))
    validation = a.run / "replay" / "validation.parquet"
    if not repeats or not validation.exists():
        raise SystemExit(f"local_pace: {a.run} has no collect/*/*/*/repeats.parquet or replay/validation.parquet; "
                         "run the default experiment first (snakemake --cores all)")
    if a.block < 1:
        raise SystemExit(f"local_pace: --block must be at least 1, not {a.block}")
    rel = duckdb.sql(QUERY, params={"block": a.block, "repeats": repeats, "validation": str(validation)})
    print(format_table(rel.columns, rel.fetchall()))


if __name__ == "__main__":
    main()
