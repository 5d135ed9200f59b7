"""The tau sweep: per system, how fast the target alone with token-level speculation (``target_sd``) and step-level
speculation with token-level speculation in its rewrites (``step_ahead_sd`` on the GPUs, ``hetero_sd`` with the
FPGA draft) get as the draft's acceptance grows, against their plain counterparts (``target_only``; ``step_ahead`` /
``hetero``), so a reader sees at which tau step-level speculation stops paying against the token-level baseline.

``results/<run>/report/tau_sweep.parquet``: one row per trace set x dataset x profile x system x schedule x tau (tau
null for the plain schedules), the mean latency per problem. The traces are our sequential collect traces (like
``replay_ours``) and, when the run imported them, the artifact's; the profiles are the report's (``measured`` left
out). Tokens drafted per round stay ``replay.token_speculation.draft_len`` (raised to tau - 1 where tau needs it).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store.parquet import versioned, write_parquet

log = logging.getLogger("heterospec.replay")

TAUS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)
PLAIN = ("target_only", "step_ahead", "hetero")
SPECULATIVE = ("target_sd", "step_ahead_sd", "hetero_sd")

TAU_SWEEP_SCHEMA = versioned("tau_sweep", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),     # ours_rsd, ours_brsd, or the artifact's with_bt / no_bt
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("tau", pa.float64()),                          # tokens per verification round; null: plain decoding
    pa.field("draft_len", pa.int32()),                      # tokens drafted per round; null: plain decoding
    pa.field("problems", pa.int32(), nullable=False),
    pa.field("latency_s", pa.float64(), nullable=False),    # mean per problem
])


def sweep_path(paths: RunPaths) -> Path:
    return paths.root / "report" / "tau_sweep.parquet"


def sweeps_ours(cfg: Any) -> bool:
    """Whether the sweep reads traces of our own: the run collects an algorithm config (not a collect variant) with
    the sequential executor on some dataset. An experiment without collect (``artifact_replay``) sweeps only the
    artifact's imported traces."""
    from heterospec.config.collect_variants import timed_collects

    return bool(cfg.datasets) and any(e == "sequential" for _, e in timed_collects(cfg))


def _trace_sets(cfg: Any, paths: RunPaths) -> dict[str, list]:
    """Trace set -> problems: our sequential collect traces (when the run collects them) and the artifact's imported
    traces, where present."""
    from heterospec.replay.traces.problems import ours_problems, run_problems
    out = ours_problems(cfg, paths) if sweeps_ours(cfg) else {}
    return {**out, **run_problems(cfg, paths, [ts for ts in cfg.replay.trace_sets if paths.replay_events(ts).exists()])}


def tau_sweep(cfg: Any, paths: RunPaths, overrides: list[str]) -> pa.Table:
    """Replay every trace set on ``replay.systems`` with the plain and the speculating schedules at each tau."""
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.grid.stage import prefetch_outcome, profile_factory, system_configs, token_speculation
    from heterospec.replay.simulator.system import SpeculationParams
    from heterospec.replay.grid.entries import compose_schedule
    from heterospec.replay.grid.ours import ours_profiles

    sets = _trace_sets(cfg, paths)
    if not sets:
        raise UserError(f"{paths.root}: no sequential collect traces and no imported artifact traces "
                        f"(replay.trace_sets {list(cfg.replay.trace_sets)}) to sweep tau over")
    base = token_speculation(cfg)
    systems = system_configs(cfg)
    plain = [compose_schedule(cfg, overrides, s, "the tau sweep") for s in PLAIN]
    speculative = [compose_schedule(cfg, overrides, s, "the tau sweep") for s in SPECULATIVE]
    rows = []
    for name in ours_profiles(cfg):
        factory = profile_factory(name, cfg, paths)
        for ts, probs in sets.items():
            log.info("tau sweep: %s, %d problems, %d systems, %d values of tau, profile %s", ts, len(probs),
                     len(systems), len(TAUS), name)
            grids = [(None, simulate(probs, systems, plain, factory, cfg.replay.engine, run=cfg.name,
                                     recorded=prefetch_outcome(cfg)))]
            for tau in TAUS:
                spec = SpeculationParams(tau, max(base.draft_len, math.ceil(tau - 1)), base.strategy, base.source)
                grids.append((spec, simulate(probs, systems, speculative, factory, cfg.replay.engine, run=cfg.name,
                                             recorded=prefetch_outcome(cfg), speculation=spec)))
            for spec, table in grids:
                acc: dict[tuple, list] = {}
                for r in table.select(["dataset", "system", "schedule", "latency_ms"]).to_pylist():
                    a = acc.setdefault((r["dataset"], r["system"], r["schedule"]), [0, 0.0])
                    a[0] += 1
                    a[1] += r["latency_ms"]
                rows += [dict(run=cfg.name, trace_set=ts, dataset=ds, profile=name, system=system, schedule=sched,
                              tau=spec.tau if spec else None, draft_len=spec.draft_len if spec else None,
                              problems=n, latency_s=total / n / 1e3)
                         for (ds, system, sched), (n, total) in sorted(acc.items())]
    table = pa.Table.from_pylist(rows, schema=TAU_SWEEP_SCHEMA)
    write_parquet(table, sweep_path(paths), TAU_SWEEP_SCHEMA)
    log.info("tau sweep: %d rows -> %s", table.num_rows, sweep_path(paths))
    return table
