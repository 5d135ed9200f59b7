"""Two collects of the same problems, problem by problem: did they reason alike?

``heterospec collect compare brsd_u280 brsd_w8a8`` (issue 24: the kernel draft against the torch int8 reference) or
``heterospec collect compare brsd brsd_sd`` (issue 23: speculative target writes against plain ones) counts, per
dataset and executor, the problems both collected and of them those with the same answer and path (output, answer,
stop, steps written by whom, backtracks), the same controller steps (each proposal's position, verdict and the PRM's
reward for the draft's step), the same PRM calls (step, attempt, reward to 1e-6, verdict) and the same KVMU pointer
log (mode, valid, current, step-ahead, reason, in order). Timing-dependent fields are not compared: call times, a
cancelled prefetch's length, and the step-ahead pointer of a step drafted ahead (``step_ahead`` rows: how far the
draft got before a reject cancelled it; two runs of one configuration differ there, and nowhere else in the log).
"""
from __future__ import annotations

from pathlib import Path

from heterospec.errors import UserError

# per problem: one string per aspect; equal strings = equal behaviour
_ASPECTS = """
WITH p AS (
  SELECT run, dataset, algorithm, executor, problem_id,
         concat_ws('|', output, prediction, correct, stop, steps, draft_steps, target_steps, backtracks) AS answer
  FROM collect_problems),
s AS (
  SELECT run, dataset, algorithm, executor, problem_id,
         string_agg(concat_ws(':', position, outcome, round(draft_score, 6)), ';' ORDER BY step_idx) AS steps
  FROM collect_steps GROUP BY ALL),
c AS (
  SELECT run, dataset, algorithm, executor, problem_id,
         string_agg(concat_ws(':', step, attempt, round(prm_score, 6), outcome), ';'
                    ORDER BY step, attempt, round(prm_score, 6), outcome) AS prm
  FROM collect_calls WHERE role = 'prm' GROUP BY ALL),
k AS (
  SELECT run, dataset, algorithm, executor, problem_id,
         string_agg(concat_ws(':', mode, valid, current, CASE WHEN reason <> 'step_ahead' THEN step_ahead END,
                              reason), ';' ORDER BY seq) AS kvmu
  FROM collect_kvmu GROUP BY ALL),
a AS (
  SELECT p.*, s.steps, c.prm, k.kvmu FROM p
  LEFT JOIN s USING (run, dataset, algorithm, executor, problem_id)
  LEFT JOIN c USING (run, dataset, algorithm, executor, problem_id)
  LEFT JOIN k USING (run, dataset, algorithm, executor, problem_id))
"""

COLUMNS = ["dataset", "executor", "problems", "same_answer_and_path", "same_steps", "same_prm_calls",
           "same_kvmu_log"]


def parse_collect(text: str, default_run: str) -> tuple[str, str]:
    """``RUN/ALGORITHM`` or ``ALGORITHM`` (in ``default_run``) -> (run, algorithm)."""
    run, _, alg = text.rpartition("/")
    if not alg:
        raise UserError(f"{text!r}: expected ALGORITHM or RUN/ALGORITHM (e.g. brsd_u280 or default/brsd_u280)")
    return (run or default_run), alg


def compare_collects(db: Path, a: tuple[str, str], b: tuple[str, str]) -> tuple[list[str], list[tuple]]:
    """Per dataset and executor that both collects ran: the problem counts above (see the module docstring)."""
    from heterospec.store.catalog import query

    def lit(x: str) -> str:
        return "'" + x.replace("'", "''") + "'"

    sql = _ASPECTS + f"""
    SELECT x.dataset, x.executor, count(*) AS problems,
           count(*) FILTER (x.answer = y.answer) AS same_answer_and_path,
           count(*) FILTER (x.steps IS NOT DISTINCT FROM y.steps) AS same_steps,
           count(*) FILTER (x.prm IS NOT DISTINCT FROM y.prm) AS same_prm_calls,
           count(*) FILTER (x.kvmu IS NOT DISTINCT FROM y.kvmu) AS same_kvmu_log
    FROM a x JOIN a y USING (dataset, executor, problem_id)
    WHERE x.run = {lit(a[0])} AND x.algorithm = {lit(a[1])} AND y.run = {lit(b[0])} AND y.algorithm = {lit(b[1])}
    GROUP BY ALL ORDER BY ALL"""
    cols, rows = query(db, sql)
    if not rows:
        have = query(db, "SELECT DISTINCT run || '/' || algorithm FROM collect_problems ORDER BY 1")[1]
        raise UserError(f"no problems collected by both {a[0]}/{a[1]} and {b[0]}/{b[1]} "
                        f"(collected: {', '.join(r[0] for r in have) or 'none'})")
    return cols, rows
