"""Where the replay validation's error comes from on this machine: the collect jobs' own call times, and (with
``collect.repeats`` > 1) how much the same call and the same problem vary between repeats.

    python benchmarks/validation_noise.py results/default      # a finished run (any collect.repeats)

Prints two tables (docs/validation.md, "Measuring on a machine that is not quiet"):

* per collect job (trace set, executor): the median wall time of the calls every job makes in the same shape
  (the draft's and the target's decodes per token, the PRM's score) and the mean problem latency.
  Every job runs the same models on the same problems, so a median that differs between jobs is load that
  differed between them; the fit pools the sequential jobs, so such a difference becomes a bias of each.
* with repeats: the mean spread of one problem's latency between two repeats (|a - b| / mean, over every pair:
  the noise floor of ``replay_validation_summary``), and on the sequential executor that of each role's calls.
"""
from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from heterospec.text_table import format_table


def show(sql: str) -> None:
    rel = duckdb.sql(sql)
    print(format_table(rel.columns, rel.fetchall()))


def main(run: Path) -> None:
    calls = str(run / "collect" / "*" / "*" / "*" / "calls.parquet")
    problems = str(run / "collect" / "*" / "*" / "*" / "problems.parquet")
    repeats = str(run / "collect" / "*" / "*" / "*" / "repeats.parquet")
    print("per collect job: median call ms of one shape (load that differs between jobs shows here)")
    show(f"""
        WITH c AS (SELECT algorithm, executor, role, phase, tokens_out, (end_ns - start_ns) / 1e6 AS ms
                   FROM '{calls}' WHERE impl NOT LIKE '%+%')
        SELECT c.algorithm, c.executor,
               round(median(ms / tokens_out) FILTER (role = 'draft' AND phase = 'decode' AND tokens_out > 0), 2)
                   AS draft_ms_per_token,
               round(median(ms) FILTER (role = 'prm' AND phase = 'score'), 2) AS prm_score_ms,
               round(median(ms / tokens_out) FILTER (role = 'target' AND phase = 'decode' AND tokens_out > 0), 2)
                   AS target_ms_per_token,
               round(any_value(p.latency_ms), 1) AS problem_ms
        FROM c JOIN (SELECT algorithm, executor, avg(latency_s) * 1e3 AS latency_ms FROM '{problems}'
                     GROUP BY ALL) p USING (algorithm, executor)
        GROUP BY ALL ORDER BY ALL""")
    if not list(run.glob("collect/*/*/*/repeats.parquet")) or \
            duckdb.sql(f"SELECT count(*) FROM '{repeats}' WHERE repeat > 0").fetchall()[0][0] == 0:
        print("no repeats (collect.repeats = 1): no spreads")
        return
    print("spread between repeats: the same problem (role controller), and on the sequential executor (whose calls are\n"
          "the same in every repeat) the same call (mean |a - b| / mean over pairs of repeats, %)")
    show(f"""
        WITH r AS (SELECT algorithm, executor, dataset, problem_id, repeat, role, phase,
                          row_number() OVER (PARTITION BY algorithm, executor, dataset, problem_id, repeat
                                             ORDER BY start_ns, end_ns) AS k,
                          (CASE WHEN role = 'controller' THEN end_ns ELSE end_ns - start_ns END) / 1e6 AS ms
                   FROM '{repeats}'),
             pairs AS (SELECT a.algorithm, a.executor, a.role, a.phase,
                              abs(a.ms - b.ms) / nullif((a.ms + b.ms) / 2, 0) AS spread
                       FROM r a JOIN r b USING (algorithm, executor, dataset, problem_id, k)
                       WHERE a.repeat < b.repeat AND (a.executor = 'sequential' OR a.role = 'controller'))
        SELECT algorithm, executor, role, phase, count(*) AS pairs, round(100 * avg(spread), 1) AS spread_pct
        FROM pairs GROUP BY ALL ORDER BY ALL""")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "collect").is_dir():
        sys.exit("usage: python benchmarks/validation_noise.py results/<run>   (a run with collect traces)")
    main(Path(sys.argv[1]))
