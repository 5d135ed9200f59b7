"""The DuckDB catalogue: one file, ``results/heterospec.duckdb``, holding views over every run's Parquet.

Views name Parquet globs relative to the project root, so the file stays valid when the
project moves; :func:`connect` points DuckDB's file search path at that root. A stage that
writes a new table adds its glob to ``TABLES`` and any summaries to ``SUMMARIES``.
"""
from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Iterable

import duckdb
import pyarrow.parquet as pq

from heterospec.errors import UserError

def _pivot(statistic: str, columns: str, alias: str = "") -> str:
    """SQL select-list items that pivot one row kind of a long (statistic, value...) table into columns:
    ``columns`` names each as ``kind`` or ``kind:output name`` (default ``measured_<statistic>_s``, ``<statistic>_error_pct``, ...);
    kinds: measured, replayed (s, 4 decimals), error, low, high, spread (%, 2 decimals)."""
    src = {"measured": "measured", "replayed": "replayed", "error": "rel_error", "low": "ci_low",
           "high": "ci_high", "spread": "spread"}
    name = {"measured": "measured_{s}_s", "replayed": "replayed_{s}_s", "error": "{s}_error_pct",
            "low": "{s}_error_low_pct", "high": "{s}_error_high_pct", "spread": "{s}_spread_pct"}
    out = []
    for c in columns.split():
        kind, _, as_name = c.partition(":")
        value = f"any_value({alias}{src[kind]}) FILTER (statistic = '{statistic}')"
        value = f"round({value}, 4)" if kind in ("measured", "replayed") else f"round(100 * {value}, 2)"
        out.append(f"{value} AS {as_name or name[kind].format(s=statistic)}")
    return ",\n               ".join(out)


# view name -> Parquet glob (relative to the project root), or several, one view per table kind
TABLES: dict[str, str | tuple[str, ...]] = {
    "evaluations": "results/*/evaluate/*/*.parquet",
    "model_quality": "results/*/models/quality.parquet",
    "quantize_quality": "results/*/quantize/quality.parquet",
    "hls_perf": "results/*/hls/perf.parquet",
    "hls_breakdown": "results/*/hls/breakdown.parquet",
    "hls_resources": "results/*/hls/resources.parquet",
    "hls_csim": "results/*/hls/*/csim.parquet",
    "kvmu_synth": "results/*/hls/kvmu/synth.parquet",
    "machines": "results/*/machines/*.parquet",   # each job's machine and commit (heterospec.store.machines)
    # the artifact's traces (replay stage) and our collect traces (report stage) on the same modelled systems
    "replay_results": ("results/*/replay/results.parquet", "results/*/report/replay_ours.parquet"),
    "replay_artifact": "results/*/replay/artifact.parquet",
    "replay_validation": "results/*/replay/validation.parquet",
    "replay_validation_aggregate": "results/*/replay/validation_aggregate.parquet",   # mean, P50, P90 errors
    "measured_fit": "results/*/replay/measured_fit.parquet",
    "collect_problems": "results/*/collect/*/*/*/problems.parquet",
    "collect_calls": "results/*/collect/*/*/*/calls.parquet",
    "collect_kvmu": "results/*/collect/*/*/*/kvmu.parquet",
    "collect_steps": "results/*/collect/*/*/*/steps.parquet",       # the controller's steps (collect_steps/v1)
    "collect_repeats": "results/*/collect/*/*/*/repeats.parquet",   # every round's timings (collect.repeats)
    "collect_rounds": "results/*/collect/*/*/*/rounds.parquet",     # speculative target writes' rounds (v1)
    # a serving run (heterospec.serve) and the load replay's validation against it (docs/serving.md)
    "serving_requests": "results/*/serving/requests.parquet",
    "serving_calls": "results/*/serving/calls.parquet",
    "serving_steps": "results/*/serving/steps.parquet",
    "serving_passes": "results/*/serving/passes.parquet",
    "serving_kvmu": "results/*/serving/kvmu.parquet",
    "serving_batch_prices": "results/*/serving/batch_prices.parquet",   # its passes as batch_prices/v1
    "serving_outputs": "results/*/serving/outputs.parquet",
    "serving_validation": "results/*/serving/validation.parquet",
    "serving_replayed": "results/*/serving/replayed.parquet",      # every request beside its replay
    "serving_errors": "results/*/serving/errors.parquet",          # per load point and statistic, with intervals
    "dfvg_generations": "results/*/dfvg/*/generations.parquet",
    "dfvg_rounds": "results/*/dfvg/*/rounds.parquet",
    "dfvg_replay": "results/*/dfvg/replay.parquet",
    "sweep_points": "results/*/sweep/points.parquet",
    "paper_table3": "results/*/report/paper_table3.parquet",
    "tau_sweep": "results/*/report/tau_sweep.parquet",          # heterospec.replay.grid.tau_sweep
    # the load replay (heterospec.replay.load): per request, per load point, capacity at the SLO
    "load_requests": "results/*/load/requests.parquet",
    "load_points": "results/*/load/points.parquet",
    "load_capacity": "results/*/load/capacity.parquet",
    "load_design_space": "results/*/load/design_space.parquet",   # heterospec.replay.load.design_space
}

# view name -> (tables it reads, SQL); created when all the tables it reads exist
SUMMARIES: dict[str, tuple[tuple[str, ...], str]] = {
    # the machines and commits a run's jobs recorded (a run may span machines: a cluster, a resumed run, models
    # trained by another run); numbers compare only between runs on one CPU model (docs/models.md)
    "run_machines": (("machines",), """
        SELECT run, cpu_model, cpu_id, vector_isa, logical_cores, usable_cores, count(*) AS jobs,
               count(DISTINCT host) AS hosts, string_agg(DISTINCT stage, ', ' ORDER BY stage) AS stages,
               min(recorded_at) AS first_job, max(recorded_at) AS last_job
        FROM machines GROUP BY ALL ORDER BY run, jobs DESC, cpu_model, cpu_id, vector_isa, logical_cores, usable_cores"""),
    "run_commits": (("machines",), """
        SELECT run, commit, dirty, count(*) AS jobs, string_agg(DISTINCT stage, ', ' ORDER BY stage) AS stages,
               min(recorded_at) AS first_job, max(recorded_at) AS last_job
        FROM machines GROUP BY ALL ORDER BY run, jobs DESC, commit, dirty"""),
    "hls_csim_summary": (("hls_csim",), """
        SELECT run, board, count(*) FILTER (scenario = 'greedy') AS prompts,
               count(*) FILTER (scenario = 'greedy' AND bit_exact) AS bit_exact_prompts,
               sum(tokens_generated) FILTER (scenario = 'greedy') AS tokens,
               sum(taps_match) FILTER (scenario <> 'batch') AS accumulators_matching,
               sum(taps_compared) FILTER (scenario <> 'batch') AS accumulators,
               bool_and(bit_exact) FILTER (scenario LIKE 'kvmu%') AS kvmu_modes_ok,
               string_agg(batch::VARCHAR, ', ' ORDER BY batch) FILTER (scenario = 'batch' AND bit_exact)
                   AS batches_bit_exact,
               string_agg(batch::VARCHAR, ', ' ORDER BY batch) FILTER (scenario = 'batch' AND NOT bit_exact)
                   AS batches_differing
        FROM hls_csim GROUP BY ALL ORDER BY run, board"""),
    "accuracy": (("evaluations",), """
        SELECT run, experiment, models, dataset, method,
               count(*) AS problems,
               round(100 * avg(correct::INTEGER), 1) AS accuracy,
               round(avg(output_tokens), 1) AS mean_output_tokens,
               round(sum(wall_s), 1) AS wall_s
        FROM evaluations GROUP BY ALL ORDER BY run, dataset, method"""),
    # replay: one row per trace set x dataset x latency profile x system x schedule
    "replay_summary": (("replay_results",), """
        SELECT run, trace_set, dataset, profile, system, schedule, count(*) AS problems,
               sum(backtracks) AS backtracks,
               round(avg(latency_ms) / 1e3, 3) AS latency_s,
               round(1e3 * sum(accepted_tokens) / sum(latency_ms), 2) AS goodput_tok_s,
               round(sum(energy_j) / sum(accepted_tokens), 3) AS j_per_token,
               round(1e3 * sum(energy_j) / sum(latency_ms), 1) AS system_power_w,
               round(100 * sum(stall_ms) / sum(latency_ms), 2) AS stall_pct,
               round(100 * sum(comm_ms) / sum(latency_ms), 4) AS comm_pct,
               round(100 * sum(discarded_energy_j) / sum(energy_j), 2) AS discarded_energy_pct,
               round(100 * sum(speculation_waste_j) / sum(energy_j), 2) AS speculation_waste_pct,
               round(sum(lower_bound_ms) / sum(latency_ms), 3) AS efficiency
        FROM replay_results GROUP BY ALL ORDER BY ALL"""),
    # the paper's Figure 8: 3-GPU baseline, T2 on GPUs, FPGA+GPU (T1+T2): latency, goodput, energy
    "replay_figure8": (("replay_results",), """
        SELECT s.run, s.trace_set, s.dataset, s.profile,
               CASE WHEN s.schedule = 'sequential' THEN '3-GPU' WHEN s.schedule = 'step_ahead' THEN 'T2 on GPUs'
                    ELSE 'FPGA+GPU (T1+T2)' END AS design,
               s.system, s.schedule, s.problems, s.latency_s, s.goodput_tok_s, s.j_per_token, s.system_power_w,
               round(b.latency_s / s.latency_s, 3) AS speedup_vs_3gpu,
               round(b.j_per_token / s.j_per_token, 3) AS energy_efficiency_vs_3gpu
        FROM replay_summary s JOIN replay_summary b
          ON b.run = s.run AND b.trace_set = s.trace_set AND b.dataset = s.dataset AND b.profile = s.profile
         AND b.system = 'gpu3' AND b.schedule = 'sequential'
        WHERE (s.system = 'gpu3' AND s.schedule IN ('sequential', 'step_ahead'))
           OR (s.system <> 'gpu3' AND s.schedule = 'hetero')
        ORDER BY s.run, s.trace_set, s.dataset, s.profile, speedup_vs_3gpu"""),
    # the time and energy shares of the paper's designs (the speculating schedules are in replay_methods)
    "replay_time_shares": (("replay_results",), """
        SELECT * FROM replay_summary
        WHERE schedule IN ('sequential', 'step_ahead', 'prefetch_only', 'hetero') ORDER BY ALL"""),
    # step-level against token-level speculation per system (the paper's designs: T2 on the GPUs, T1+T2 with the
    # FPGA draft): the target alone, plain or with token-level speculation, and RSD / BRSD, plain or with
    # token-level speculation in their target writes (replay.token_speculation prices the rounds)
    "replay_methods": (("replay_results",), """
        WITH m AS (
          SELECT *, CASE WHEN trace_set IN ('ours_rsd', 'no_bt') THEN 'RSD' ELSE 'BRSD' END AS step_level
          FROM replay_summary
          WHERE (system = 'gpu3' AND schedule IN ('step_ahead', 'step_ahead_sd', 'target_only', 'target_sd'))
             OR (system <> 'gpu3' AND schedule IN ('hetero', 'hetero_sd', 'target_only', 'target_sd')))
        SELECT m.run, m.trace_set, m.dataset, m.profile, m.system,
               CASE WHEN m.schedule = 'target_only' THEN 'target'
                    WHEN m.schedule = 'target_sd' THEN 'target + token spec.'
                    WHEN m.schedule LIKE '%_sd' THEN m.step_level || ' + token spec.'
                    ELSE m.step_level END AS method,
               m.schedule, m.problems, m.latency_s, m.goodput_tok_s, m.j_per_token,
               round(t.latency_s / m.latency_s, 3) AS speedup_vs_target
        FROM m LEFT JOIN replay_summary t
          ON t.run = m.run AND t.trace_set = m.trace_set AND t.dataset = m.dataset AND t.profile = m.profile
         AND t.system = m.system AND t.schedule = 'target_only'
        ORDER BY ALL"""),
    # the paper's Figure 10: ablation baseline, +T2, +T1, on traces with and without backtracking
    "replay_figure10": (("replay_results",), """
        SELECT run, dataset, profile, trace_set,
               max(backtracks) OVER (PARTITION BY run, trace_set) > 0 AS backtracking,
               CASE WHEN schedule = 'sequential' THEN 'baseline' WHEN schedule = 'step_ahead' THEN '+T2'
                    ELSE '+T1' END AS technique,
               system, latency_s,
               round(first_value(latency_s) OVER (PARTITION BY run, dataset, profile, trace_set
                                                  ORDER BY schedule <> 'sequential') / latency_s, 3) AS speedup
        FROM replay_summary
        WHERE (system = 'gpu3' AND schedule IN ('sequential', 'step_ahead'))
           OR (system <> 'gpu3' AND schedule = 'hetero')
        ORDER BY run, dataset, profile, backtracking DESC, speedup"""),
    # our discrete-event replay next to the artifact's per-step formulas, problem by problem, same traces and constants,
    # under the artifact's own design
    "replay_vs_artifact": (("replay_results", "replay_artifact"), """
        SELECT s.run, s.trace_set, s.dataset, s.profile, s.system, s.schedule, count(*) AS problems,
               round(avg(a.latency_ms) / 1e3, 3) AS artifact_latency_s, round(avg(s.latency_ms) / 1e3, 3) AS des_latency_s,
               round(100 * (avg(s.latency_ms) - avg(a.latency_ms)) / avg(a.latency_ms), 2) AS des_vs_artifact_pct,
               round(100 * max(abs(s.latency_ms - a.latency_ms) / nullif(a.latency_ms, 0)), 3) AS max_problem_error_pct,
               count(*) FILTER (WHERE abs(s.latency_ms - a.latency_ms) > 0.005 * a.latency_ms) AS problems_over_half_pct
        FROM replay_results s JOIN replay_artifact a
          ON a.run = s.run AND a.trace_set = s.trace_set AND a.dataset = s.dataset AND a.profile = s.profile
         AND a.source = s.problem
        WHERE s.schedule = 'hetero' AND s.system = 'hetero_u280'   -- the design the formulas model (FPGA+GPU, T1+T2)
        GROUP BY ALL ORDER BY ALL"""),
    # the validation per trace set and executor (docs/validation.md): the per-problem error against the noise floor
    # (noise), the draft pace (drift), the schedule-only error and the aggregate errors (the model's)
    "replay_validation_summary": (("replay_validation", "replay_validation_aggregate"), """
        SELECT v.*, a.* EXCLUDE (run, trace_set, executor, system)
        FROM (SELECT run, trace_set, executor, system, count(*) AS problems,
                     round(avg(measured_ms), 2) AS measured_ms, round(avg(predicted_ms), 2) AS predicted_ms,
                     round(100 * avg(abs(rel_error)), 2) AS mae_pct,
                     -- signed: positive when the replay predicts too slow
                     round(100 * avg(rel_error), 2) AS mean_bias_pct,
                     -- the spread of the same problems measured twice; NULL without collect.repeats > 1
                     round(100 * avg(repeat_spread), 2) AS noise_floor_pct,
                     -- the job's draft ms per token over all sequential jobs': far from 1, load differed between them
                     round(avg(draft_pace), 2) AS draft_pace,
                     -- every call at its own measured time: the schedule model's error alone
                     round(100 * avg(abs(schedule_only_ms - measured_ms) / measured_ms), 2) AS schedule_only_mae_pct
              FROM replay_validation GROUP BY ALL) v
        LEFT JOIN (SELECT run, trace_set, executor, system,
               """ + ",\n               ".join(_pivot(st, "error low high") for st in ("mean", "p50", "p90")) + """,
                          -- the Harrell-Davis quantiles (replay.quantiles), which the bar judges with the mean
               """ + ",\n               ".join(_pivot(st, "error low high") for st in ("p50_hd", "p90_hd")) + """,
                          bool_and(abs(rel_error) <= 0.05)
                              FILTER (statistic IN ('mean', 'p50_hd', 'p90_hd')) AS aggregates_within_5pct
                   FROM replay_validation_aggregate GROUP BY ALL) a
          ON a.run = v.run AND a.trace_set = v.trace_set AND a.executor = v.executor AND a.system = v.system
        ORDER BY ALL"""),
    # the schedule-only check per problem: the replay with every call at its own measured time, against the measured
    "replay_schedule_only": (("replay_validation",), """
        SELECT run, trace_set, executor, system, count(*) AS problems,
               round(avg(measured_ms), 2) AS measured_ms, round(avg(schedule_only_ms), 2) AS schedule_only_ms,
               round(100 * avg(abs(schedule_only_ms - measured_ms) / measured_ms), 2) AS mae_pct,
               round(100 * avg((schedule_only_ms - measured_ms) / measured_ms), 2) AS mean_bias_pct,
               round(100 * quantile_cont(abs(schedule_only_ms - measured_ms) / measured_ms, 0.9), 2) AS p90_abs_error_pct
        FROM replay_validation WHERE schedule_only_ms IS NOT NULL GROUP BY ALL ORDER BY ALL"""),
    # serving: each served request's outputs against the sequential collect of its problem (the bar: 100 %)
    "serving_identity": (("serving_outputs",), """
        SELECT run, dataset, algorithm, count(*) AS requests, count(DISTINCT problem_id) AS problems,
               count(*) FILTER (identical_answer) AS identical_answers,
               count(*) FILTER (identical_output) AS identical_outputs,
               count(*) FILTER (identical_steps) AS identical_steps,
               count(*) FILTER (identical_verdicts) AS identical_verdicts,
               count(*) FILTER (identical_calls) AS identical_calls,
               count(*) FILTER (identical_kvmu) AS identical_kvmu,
               round(100 * avg((identical_answer AND identical_output AND identical_steps AND identical_verdicts
                                AND identical_calls AND identical_kvmu)::INTEGER), 1) AS identical_pct,
               sum(prm_calls) AS prm_calls, max(max_score_diff) AS max_prm_score_diff
        FROM serving_outputs GROUP BY ALL ORDER BY ALL"""),
    # serving: per load point, the measured P50 / P90 latency and throughput (mean of the repeats) against the load
    # replay's on the same arrivals, the errors (signed, %: positive when the replay is slower or serves more) with
    # their bootstrap intervals, the quantiles by the sample quantile and by Harrell-Davis (hd), the paired
    # per-request error (bias, MAE) beside its noise floor, and the repeats' own spread ((max - min) / mean, %);
    # the bars (docs/serving.md): |Harrell-Davis P50|, |P90| errors <= 10 %, throughput <= 5 %, and the repeats'
    # spread of those quantiles below 5 % (a sample that cannot pin them cannot pass)
    "serving_load": (("serving_validation", "serving_errors"), """
        WITH v AS (
            SELECT run, dataset, algorithm, load_index, any_value(arrivals) AS arrivals,
                   any_value(rate_per_s) AS rate_per_s, any_value(system) AS system,
                   any_value(schedule) AS schedule, any_value(profile) AS profile
            FROM serving_validation GROUP BY run, dataset, algorithm, load_index)
        SELECT v.run, v.dataset, v.algorithm, v.load_index, v.arrivals, any_value(e.load) AS load,
               round(v.rate_per_s, 4) AS rate_per_s, any_value(e.repeats) AS repeats,
               any_value(e.requests) * any_value(e.repeats) AS requests,
               any_value(e.requests) AS requests_per_repeat, v.system, v.schedule, v.profile,
               """ + ",\n               ".join([
                   _pivot("p50", "measured replayed error spread", alias="e."),
                   _pivot("p50_hd", "measured replayed error low high spread", alias="e."),
                   _pivot("p90", "measured replayed error spread", alias="e."),
                   _pivot("p90_hd", "measured replayed error low high spread", alias="e."),
                   _pivot("request_bias", "error:request_bias_pct low:request_bias_low_pct "
                                          "high:request_bias_high_pct", alias="e."),
                   _pivot("request_mae", "error:request_mae_pct low:request_mae_low_pct high:request_mae_high_pct "
                                         "spread:request_noise_floor_pct", alias="e."),
                   _pivot("throughput", "measured:measured_throughput replayed:replayed_throughput error spread",
                          alias="e.")]) + """,
               coalesce(bool_and(CASE WHEN statistic IN ('p50_hd', 'p90_hd')
                                      THEN abs(e.rel_error) <= 0.10 AND coalesce(e.spread < 0.05, false)
                                      WHEN statistic = 'throughput' THEN abs(e.rel_error) <= 0.05 END), false)
                   AS within_bars
        FROM v JOIN serving_errors e USING (run, dataset, algorithm, load_index)
        GROUP BY v.run, v.dataset, v.algorithm, v.load_index, v.arrivals, v.rate_per_s, v.system, v.schedule, v.profile
        ORDER BY v.run, v.dataset, v.algorithm, v.load_index"""),
    # serving: every load-point run in session order, so drift shows: its latency and throughput, queueing per role,
    # the batches the PRM and the target ran, the draft's pace
    "serving_runs": (("serving_requests", "serving_passes"), """
        WITH p AS (
            SELECT run, load_index, repeat,
                   round(sum(end_ns - start_ns) FILTER (role = 'draft' AND phase = 'decode') / 1e6
                         / nullif(sum(forwards) FILTER (role = 'draft' AND phase = 'decode'), 0), 3) AS draft_ms_per_token,
                   round(avg(batch) FILTER (role = 'prm'), 2) AS prm_mean_batch,
                   round(avg(batch) FILTER (role = 'target' AND phase = 'decode'), 2) AS target_mean_batch,
                   max(batch) FILTER (role = 'target') AS target_max_batch
            FROM serving_passes GROUP BY ALL)
        SELECT q.run, q.sequence, q.load_index, q.repeat, any_value(q.arrivals) AS arrivals, any_value(q.load) AS load,
               round(any_value(q.rate_per_s), 4) AS rate_per_s, count(*) AS requests,
               round(median(q.latency_s), 4) AS p50_s, round(quantile_cont(q.latency_s, 0.9), 4) AS p90_s,
               round(count(*) / (max(q.finish_s) - min(q.arrival_s)), 4) AS throughput,
               round(avg(q.draft_queue_s), 4) AS draft_queue_s, round(avg(q.prm_queue_s), 4) AS prm_queue_s,
               round(avg(q.target_queue_s), 4) AS target_queue_s,
               any_value(p.draft_ms_per_token) AS draft_ms_per_token, any_value(p.prm_mean_batch) AS prm_mean_batch,
               any_value(p.target_mean_batch) AS target_mean_batch, any_value(p.target_max_batch) AS target_max_batch
        FROM serving_requests q LEFT JOIN p USING (run, load_index, repeat)
        GROUP BY q.run, q.sequence, q.load_index, q.repeat ORDER BY q.run, q.sequence"""),
    # the paper's Table III: method x dataset x model config (RSD/BRSD answers do not depend on the executor); the
    # token-level baseline target_sd beside the single models; the collect variants (collect.variants) after BRSD
    "table3": (("evaluations", "collect_problems"), """
        SELECT * FROM (
            SELECT run, models, dataset, method, count(*) AS problems,
                   round(100 * avg(correct::INTEGER), 1) AS accuracy
            FROM (SELECT run, models, dataset, method, correct FROM evaluations
                  UNION ALL
                  SELECT run, models, dataset, algorithm AS method, correct FROM collect_problems
                  WHERE executor = 'sequential')
            GROUP BY run, models, dataset, method)
        ORDER BY run, dataset, CASE method WHEN 'draft_only' THEN 0 WHEN 'target_only' THEN 1 WHEN 'target_sd' THEN 2
                                           WHEN 'rsd' THEN 3 WHEN 'brsd' THEN 4 ELSE 5 END, method"""),
    # Table III beside the paper's (the artifact's table3_accuracy_reference.json, when a checkout is configured)
    "table3_vs_paper": (("table3", "paper_table3"), """
        SELECT run, 'ours' AS source, models, dataset, method, problems, accuracy FROM table3
        UNION ALL
        SELECT run, 'paper ' || config AS source, models, dataset, method, NULL AS problems, accuracy FROM paper_table3
        ORDER BY run, source <> 'ours', source, dataset, method"""),
    "collect_summary": (("collect_problems",), """
        SELECT run, models, dataset, algorithm, executor, count(*) AS problems,
               round(100 * avg(correct::INTEGER), 1) AS accuracy,
               round(100 * sum(target_steps) / sum(steps), 1) AS target_step_share,
               round(avg(backtracks), 2) AS mean_backtracks,
               round(sum(draft_processed) / sum(draft_tokens + draft_ingested), 4) AS draft_kv_reuse_ratio,
               round(avg(latency_s), 4) AS mean_latency_s
        FROM collect_problems GROUP BY ALL ORDER BY run, dataset, algorithm, executor"""),
    # token-level speculation in the target's writes, per call: rounds, tokens drafted and accepted, and τ (tokens
    # per verification round: the accepted drafted tokens plus the target's own), the rounds' draft and verify time
    "collect_call_acceptance": (("collect_rounds",), """
        SELECT run, models, dataset, algorithm, executor, problem_id, step_idx, step, attempt, outcome, start_ns,
               any_value(strategy) AS strategy, count(*) AS rounds, sum(nodes) AS verified, sum(drafted) AS drafted,
               sum(accepted) AS accepted, sum(kept) AS kept, round(avg(accepted + 1), 3) AS tau,
               round(sum(draft_ms), 3) AS draft_ms, round(sum(verify_ms), 3) AS verify_ms
        FROM collect_rounds GROUP BY ALL ORDER BY ALL"""),
    # the draft per implementation (collect_calls.impl: float torch, int8 torch (w8a8), the generated kernel): host ms
    # per drafted token, and for the kernel the board's modelled ms per token (hls perf model at the board's clock)
    "draft_speed": (("collect_calls",), """
        SELECT run, models, dataset, algorithm, executor, impl, count(*) AS calls, sum(tokens_out) AS tokens,
               round(sum(end_ns - start_ns) / 1e6 / nullif(sum(tokens_out), 0), 4) AS host_ms_per_token,
               round(sum(modelled_ms) / nullif(sum(tokens_out), 0), 4) AS modelled_ms_per_token
        FROM collect_calls WHERE role = 'draft' AND phase = 'decode' GROUP BY ALL ORDER BY ALL"""),
    # measured speedup of the step-ahead executor over the sequential baseline on the same problems
    "step_ahead_speedup": (("collect_problems",), """
        SELECT s.run, s.dataset, s.algorithm, count(*) AS problems,
               round(sum(s.latency_s) / sum(a.latency_s), 3) AS speedup,
               round(100 * avg((s.output = a.output)::INTEGER), 1) AS identical_outputs_pct
        FROM collect_problems s JOIN collect_problems a
          ON s.run = a.run AND s.dataset = a.dataset AND s.algorithm = a.algorithm
         AND s.problem_id = a.problem_id AND s.executor = 'sequential' AND a.executor = 'step_ahead'
        GROUP BY ALL ORDER BY s.run, s.dataset, s.algorithm"""),
    # a sweep (--config sweep=key=v1,v2,...): each value's run and its collect results
    "sweep": (("sweep_points", "collect_problems"), """
        SELECT p.run, p.parameter, p.value, p.point_run, c.dataset, c.algorithm, c.executor, c.problems,
               c.accuracy, c.target_step_share, c.mean_backtracks, c.mean_latency_s
        FROM sweep_points p JOIN collect_summary c ON c.run = p.point_run
        ORDER BY p.run, c.dataset, c.algorithm, c.executor, try_cast(p.value AS DOUBLE), p.value"""),
    # a sweep's accuracy and target-step share beside the latency of its traces: simulated on the paper's systems
    # (our traces in replay_figure8), and measured on this machine (each collect executor)
    "sweep_systems": (("sweep_points", "collect_problems", "replay_results"), """
        SELECT p.run, p.parameter, p.value, p.point_run, c.dataset, c.algorithm, c.problems, c.accuracy,
               c.target_step_share, f.profile, f.design, f.system, f.schedule, f.latency_s
        FROM sweep_points p
        JOIN collect_summary c ON c.run = p.point_run AND c.executor = 'sequential'
        JOIN replay_figure8 f ON f.run = p.point_run AND f.dataset = c.dataset AND f.trace_set = 'ours_' || c.algorithm
        UNION ALL
        SELECT p.run, p.parameter, p.value, p.point_run, c.dataset, c.algorithm, c.problems, c.accuracy,
               c.target_step_share, 'measured', 'measured: ' || c.executor, 'this machine', c.executor,
               c.mean_latency_s
        FROM sweep_points p JOIN collect_summary c ON c.run = p.point_run"""),
    # the load replay: latency against offered load (Poisson points the system kept up with, and those it did not),
    # with each system x method's SLO beside it
    "load_curve": (("load_points", "load_capacity"), """
        SELECT p.run, p.trace_set, p.profile, p.system, p.method, p.schedule, p.purpose, p.rate_rps, p.offered_rps,
               p.throughput_rps, p.keeps_up, p.latency_mean_s, p.p50_s, p.p90_s, p.p99_s, p.first_step_mean_s,
               p.util_draft, p.util_prm, p.util_target, p.batch_draft, p.batch_prm, p.batch_target,
               p.queue_draft_ms, p.queue_prm_ms, p.queue_target_ms, p.energy_per_request_j,
               c.percentile, c.slo_s, c.capacity_rps
        FROM load_points p JOIN load_capacity c USING (run, trace_set, profile, system, method)
        WHERE p.arrivals = 'poisson' ORDER BY ALL"""),
    # capacity at the SLO per system x method, against the target alone on the same system and the same method on
    # the 3-GPU system; utilisation per device at capacity
    "load_capacity_summary": (("load_capacity",), """
        SELECT c.run, c.trace_set, c.profile, c.system, c.method, c.schedule, c.percentile, c.slo_s, c.unloaded_s,
               c.capacity_rps, c.goodput_tok_s, c.bottleneck, c.util_draft, c.util_prm, c.util_target,
               c.queue_draft_ms, c.queue_prm_ms, c.queue_target_ms,
               round(c.capacity_rps / nullif(t.capacity_rps, 0), 3) AS capacity_vs_target,
               round(c.capacity_rps / nullif(g.capacity_rps, 0), 3) AS capacity_vs_gpu3,
               round(g.unloaded_s / nullif(c.unloaded_s, 0), 3) AS unloaded_speedup_vs_gpu3,
               c.devices
        FROM load_capacity c
        LEFT JOIN load_capacity t ON t.run = c.run AND t.profile = c.profile AND t.system = c.system
                                 AND t.method = 'target'
        LEFT JOIN load_capacity g ON g.run = c.run AND g.profile = c.profile AND g.system = 'gpu3'
                                 AND g.method = c.method
        ORDER BY ALL"""),
    # the FPGA draft's design space: every design point beside the same method on the three-GPU system, its capacity
    # and capacity per kW (and per thousand dollars where every device has a price) as a multiple of that system's
    "load_design_space_summary": (("load_design_space",), """
        SELECT run, trace_set, profile, method, board, kernel, batch, fpgas, system, rows, cols, lanes, dsp, lut,
               dsp_util, lut_util, closes, bound, pass1_ms, passb_ms, slo_s, search_steps, capacity_rps, capacity_lo_rps,
               capacity_hi_rps, reference_rps, round(capacity_rps / nullif(reference_rps, 0), 3) AS capacity_vs_reference,
               reaches, power_w, capacity_per_kw,
               round(capacity_per_kw / nullif(max(capacity_per_kw) FILTER (kernel = 'gpu')
                     OVER (PARTITION BY run, trace_set, method), 0), 3) AS per_kw_vs_reference,
               price_usd, capacity_per_kusd, limit_rps, limit_device, bottleneck, util_draft, util_prm, util_target,
               devices, answer
        FROM load_design_space
        ORDER BY run, trace_set, method, kernel = 'gpu' DESC, board, kernel, fpgas, batch"""),
    # the tau sweep, per system's design: speculating schedules against the plain ones, and the smallest tau at which
    # the target alone with token-level speculation is at least as fast as step-level speculation with it
    "tau_sweep_design": (("tau_sweep",), """
        SELECT run, trace_set, dataset, profile, system,
               CASE WHEN schedule LIKE 'target%' THEN 'target' WHEN trace_set IN ('ours_rsd', 'no_bt') THEN 'RSD'
                    ELSE 'BRSD' END || CASE WHEN tau IS NULL THEN '' ELSE ' + token spec.' END AS method,
               schedule, tau, draft_len, problems, latency_s
        FROM tau_sweep
        WHERE (system = 'gpu3' AND schedule NOT LIKE 'hetero%') OR (system <> 'gpu3' AND schedule NOT LIKE 'step_ahead%')
        ORDER BY ALL"""),
    "tau_breakeven": (("tau_sweep",), """
        SELECT t.run, t.trace_set, t.dataset, t.profile, t.system,
               min(t.tau) FILTER (WHERE t.latency_s <= s.latency_s) AS target_sd_wins_from_tau,
               max(t.tau) AS max_tau_swept
        FROM tau_sweep t JOIN tau_sweep s
          ON s.run = t.run AND s.trace_set = t.trace_set AND s.dataset = t.dataset AND s.profile = t.profile
         AND s.system = t.system AND s.tau = t.tau
         AND s.schedule = CASE WHEN t.system = 'gpu3' THEN 'step_ahead_sd' ELSE 'hetero_sd' END
        WHERE t.schedule = 'target_sd'
        GROUP BY ALL ORDER BY ALL"""),
    # the target alone with token-level speculation against plain greedy decoding, measured on this machine (same
    # problems, same outputs under greedy decoding); speculative rewrites in BRSD: benchmarks/target_writes.py
    "target_sd_speedup": (("evaluations",), """
        SELECT p.run, p.models, p.dataset, p.problems, p.wall_s AS target_only_s, s.wall_s AS target_sd_s,
               round(p.wall_s / s.wall_s, 3) AS speedup,
               (SELECT count(*) FROM evaluations a JOIN evaluations b USING (run, dataset, problem_id)
                WHERE a.run = p.run AND a.dataset = p.dataset AND a.method = 'target_only' AND b.method = 'target_sd'
                  AND a.output = b.output) AS identical_outputs
        FROM accuracy p JOIN accuracy s ON s.run = p.run AND s.dataset = p.dataset AND s.method = 'target_sd'
        WHERE p.method = 'target_only' ORDER BY ALL"""),
    # BRSD / RSD with token-level speculative target writes (the rsd_sd / brsd_sd collect variants, in the run or in the
    # runs benchmarks/speculative_identity.py names <run>-sd-<strategy>) against the plain collects of the same problems
    # under the same executor, measured on this machine: speedup of the mean latency, and identical outputs
    "speculative_rewrites_speedup": (("collect_problems", "collect_rounds"), """
        WITH strategy AS (SELECT run, algorithm, any_value(strategy) AS strategy FROM collect_rounds GROUP BY ALL)
        SELECT p.run, p.dataset, p.algorithm, p.executor, s.run AS sd_run, st.strategy, count(*) AS problems,
               round(avg(p.latency_s), 4) AS plain_s, round(avg(s.latency_s), 4) AS speculative_s,
               round(avg(p.latency_s) / avg(s.latency_s), 3) AS speedup,
               count(*) FILTER (p.output = s.output) AS identical_outputs
        FROM collect_problems p
        JOIN collect_problems s ON s.algorithm = p.algorithm || '_sd' AND s.dataset = p.dataset
         AND s.executor = p.executor AND s.problem_id = p.problem_id
         AND (s.run = p.run OR starts_with(s.run, p.run || '-sd-'))
        LEFT JOIN strategy st ON st.run = s.run AND st.algorithm = s.algorithm
        WHERE p.algorithm IN ('rsd', 'brsd')
        GROUP BY ALL ORDER BY ALL"""),
    # accuracy against latency per method: accuracy from this run (Table III; BRSD with token-level speculation in its
    # rewrites writes BRSD's outputs under greedy decoding, tests/test_speculative_reasoning.py), latency replayed on
    # the paper's systems (our sequential traces) and measured on this machine (evaluate for the target alone; each
    # collect executor for RSD and BRSD; the brsd_sd collect variant for BRSD + token-level speculation)
    "accuracy_latency": (("evaluations", "collect_problems", "replay_results"), """
        WITH lab AS (SELECT * FROM (VALUES ('target_only', 'target', 'ours_brsd'),
                                           ('target_sd', 'target + token spec.', 'ours_brsd'),
                                           ('rsd', 'RSD', 'ours_rsd'), ('brsd', 'BRSD', 'ours_brsd'),
                                           ('brsd', 'BRSD + token spec.', 'ours_brsd')) t(method, label, trace_set))
        SELECT a.run, a.dataset, l.label AS method, a.accuracy, r.system, 'replay, ' || r.profile AS latency_from,
               r.latency_s
        FROM table3 a JOIN lab l USING (method)
        JOIN replay_methods r ON r.run = a.run AND r.dataset = a.dataset AND r.trace_set = l.trace_set
                             AND r.method = l.label
        UNION ALL
        SELECT a.run, a.dataset, l.label, a.accuracy, 'this machine', 'measured: evaluate', e.wall_s / e.problems
        FROM table3 a JOIN lab l USING (method)
        JOIN accuracy e ON e.run = a.run AND e.dataset = a.dataset AND e.method = a.method
        UNION ALL
        SELECT a.run, a.dataset, l.label, a.accuracy, 'this machine', 'measured: ' || c.executor, c.mean_latency_s
        FROM table3 a JOIN lab l USING (method)
        JOIN collect_summary c ON c.run = a.run AND c.dataset = a.dataset AND c.algorithm = a.method
        WHERE l.label IN ('RSD', 'BRSD')
        UNION ALL
        SELECT a.run, a.dataset, 'BRSD + token spec.', a.accuracy, 'this machine', 'measured: ' || c.executor,
               c.mean_latency_s
        FROM table3 a JOIN collect_summary c ON c.run = a.run AND c.dataset = a.dataset AND c.algorithm = a.method
        WHERE a.method = 'brsd_sd'
        ORDER BY ALL"""),
    # DFVG: τ = tokens per verification round (accepted drafted tokens + the target's own), acceptance = accepted /
    # longest path, draft efficiency = accepted / verified nodes
    "dfvg_summary": (("dfvg_rounds",), """
        SELECT run, models, strategy, temperature, count(DISTINCT prompt_id) AS prompts, count(*) AS rounds,
               round(avg(accepted + 1), 3) AS tau,
               round(sum(accepted) / sum(depth), 3) AS acceptance_rate,
               round(sum(accepted) / sum(nodes), 3) AS draft_efficiency,
               round(avg(nodes), 2) AS mean_nodes, round(avg(depth), 2) AS mean_depth,
               round(avg(draft_passes), 2) AS draft_passes,
               round(avg(draft_ms), 3) AS draft_ms, round(avg(verify_ms), 3) AS verify_ms,
               round(100 * avg(guess_hit::INTEGER), 1) AS guess_hit_pct
        FROM dfvg_rounds GROUP BY ALL ORDER BY run, strategy"""),
    # measured CPU wall clock of every method on the same prompts, and whether each reproduced target greedy
    "dfvg_speed": (("dfvg_generations",), """
        SELECT g.run, g.models, g.method, count(*) AS prompts, sum(g.new_tokens) AS tokens,
               round(sum(g.wall_s), 3) AS wall_s, round(sum(g.new_tokens) / sum(g.wall_s), 1) AS tokens_per_s,
               round(b.wall_s / sum(g.wall_s), 3) AS speedup_vs_target_greedy,
               round(h.wall_s / sum(g.wall_s), 3) AS speedup_vs_hf_assisted,
               round(100 * avg(g.identical::INTEGER), 1) AS identical_pct
        FROM dfvg_generations g
        LEFT JOIN (SELECT run, sum(wall_s) AS wall_s FROM dfvg_generations WHERE method = 'target_greedy'
                   GROUP BY run) b ON b.run = g.run
        LEFT JOIN (SELECT run, sum(wall_s) AS wall_s FROM dfvg_generations WHERE method = 'hf_assisted'
                   GROUP BY run) h ON h.run = g.run
        GROUP BY g.run, g.models, g.method, b.wall_s, h.wall_s ORDER BY g.run, tokens_per_s"""),
    # simulated draft-on-FPGA / verify-on-GPU vs GPU-only speculative decoding vs plain decoding
    "dfvg_replay_summary": (("dfvg_replay",), """
    WITH s AS (
        SELECT run, profile, priced_as, strategy, design, count(*) AS prompts,
               sum(tokens) AS tokens, sum(latency_ms) AS latency_ms, sum(energy_j) AS energy_j,
               sum(guess_hits) AS hits, sum(rounds) AS rounds
        FROM dfvg_replay GROUP BY ALL)
    SELECT s.run, s.profile, s.priced_as, s.strategy, s.design, s.prompts,
           round(1e3 * s.tokens / s.latency_ms, 1) AS tokens_per_s,
           round(s.energy_j / s.tokens, 4) AS j_per_token,
           round(p.latency_ms / s.latency_ms, 3) AS speedup_vs_plain,
           round((p.energy_j / p.tokens) / (s.energy_j / s.tokens), 3) AS energy_gain_vs_plain,
           round(g.latency_ms / s.latency_ms, 3) AS speedup_vs_gpu_only,
           round(100 * s.hits / greatest(s.rounds, 1), 1) AS guess_hit_pct
    FROM s JOIN s p ON p.run = s.run AND p.profile = s.profile AND p.design = 'plain'
    LEFT JOIN s g ON g.run = s.run AND g.profile = s.profile AND g.strategy = s.strategy AND g.design = 'gpu_only'
    ORDER BY s.run, s.profile, s.strategy = 'plain' DESC, s.strategy, s.design"""),
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
            found = [p for p in _globs(pattern) if glob.glob(str(Path(root) / p))]
            if found:
                try:
                    con.execute(f"CREATE VIEW {view} AS SELECT * FROM read_parquet({found}, union_by_name = true)")
                except duckdb.Error as e:
                    raise _unreadable(root, found) or UserError(f"view {view}: {_first_line(e)}") from None
                made.append(view)
        for view, (needs, sql) in SUMMARIES.items():
            if all(n in made for n in needs):
                try:
                    con.execute(f"CREATE VIEW {view} AS {sql}")
                except duckdb.Error as e:   # a column the view reads is missing: a file of an older schema
                    files = ", ".join(p for n in needs for p in _globs(TABLES[n]))
                    raise UserError(f"view {view}: {_first_line(e)}; the files it reads ({files}) include one of an "
                                    f"older schema: rerun the stage that wrote it") from None
                made.append(view)
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, db_path)
    return made


def _globs(pattern: str | tuple[str, ...]) -> list[str]:
    return [pattern] if isinstance(pattern, str) else list(pattern)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _unreadable(root: Path, patterns) -> UserError | None:
    """The first Parquet file under these globs whose footer cannot be read, as a one-line error saying how
    to recover; None when every file reads."""
    for pattern in patterns:
        for f in sorted(glob.glob(str(Path(root) / pattern))):
            try:
                pq.read_metadata(f)
            except Exception as e:  # pyarrow raises ArrowInvalid or OSError for truncated and foreign files
                return UserError(f"{f}: not a readable Parquet file, truncated or corrupt ({_first_line(e)}); "
                                 "delete it and rerun `snakemake --cores all` (or the rule that makes it)")
    return None


def connect(db_path: Path, readable: Iterable[Path | str] = ()) -> duckdb.DuckDBPyConnection:
    """A read-only connection whose relative Parquet globs resolve against the project root, sandboxed: files can
    be read only under the results folder (the catalogue's) and the ``readable`` folders (the configured data
    paths); no file can be written, no extension loaded, no database attached, and no setting lifted."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise UserError(f"{db_path}: no results catalogue yet; run `snakemake --cores all` first")
    con = duckdb.connect(str(db_path), read_only=True)
    results = db_path.resolve().parent
    # the views name globs relative to the project root ("results/*/..."); DuckDB checks the path as written,
    # before the search path resolves it, so the relative prefix is allowed beside the absolute folder
    allowed = [f"{results}/", f"{RESULTS_PREFIX}/"] + [f"{Path(d).resolve()}/" for d in readable]
    try:
        con.execute(f"SET file_search_path = {_sql_str(results.parent)}")
        con.execute(f"SET allowed_directories = [{', '.join(_sql_str(d) for d in allowed)}]")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET enable_external_access = false")   # from here on, only the allowed folders
        con.execute("SET lock_configuration = true")        # and no SET can lift it
    except BaseException:
        con.close()
        raise
    return con


RESULTS_PREFIX = "results"
# statements that only read; everything else (COPY, EXPORT, ATTACH, INSTALL/LOAD, SET, CREATE, ...) is refused
# before it runs. EXPLAIN ANALYZE runs its statement, so what it explains is checked too.
READING = {"SELECT", "EXPLAIN", "PRAGMA", "CALL"}


def query(db_path: Path, sql: str, readable: Iterable[Path | str] = ()):
    """Run read-only SQL against the catalogue; returns (column names, rows). A statement that would write,
    attach, load or change a setting, or read a file outside the results and ``readable`` folders, is refused
    with one line."""
    _check_reads_only(sql)
    con = connect(db_path, readable)
    try:
        rel = con.sql(sql)
        if rel is None:
            return [], []
        return rel.columns, rel.fetchall()
    except duckdb.PermissionException as e:
        raise UserError(f"query refused: {_refusal(e, db_path, readable)}") from None
    except duckdb.Error as e:
        if "configuration has been locked" in str(e):
            raise UserError(f"query refused: {_first_line(e).removeprefix('Invalid Input Error: ')} "
                            "(queries run with fixed settings)") from None
        broken = _unreadable(db_path.resolve().parent.parent, [g for p in TABLES.values() for g in _globs(p)]) if "parquet" in str(e).lower() else None
        raise broken or UserError(f"query failed: {_first_line(e)}") from None
    finally:
        con.close()


def _check_reads_only(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise UserError(f"query failed: {_first_line(e)}") from None
    for st in statements:
        kind = st.type.name
        text = " ".join(st.query.split())
        inner = re.match(r"(?i)explain\s+(analy[sz]e\s+)?(.*)", text)
        if kind == "EXPLAIN" and inner and inner.group(2):
            _check_reads_only(inner.group(2))
        elif kind not in READING:
            raise UserError(f"query refused: {text.split()[0].upper() if text else kind} statements are not "
                            f"allowed; queries only read (SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)")


def _refusal(e: BaseException, db_path: Path, readable: Iterable[Path | str]) -> str:
    m = re.search(r'Cannot access (?:file|directory) "([^"]*)"', str(e))
    where = ", ".join([str(Path(db_path).resolve().parent), *(str(Path(d).resolve()) for d in readable)])
    if m:
        return f"{m.group(1)} is outside the folders a query may read ({where})"
    return _first_line(e).removeprefix("Permission Error: ")


def _sql_str(x: object) -> str:
    return "'" + str(x).replace("'", "''") + "'"
