"""Our collect traces replayed on the paper's systems, for the report's Figure 8 / 10 views.

``results/<run>/report/replay_ours.parquet``: each algorithm's sequential collect traces (trace set
``ours_<algorithm>``) replayed like the artifact's: ``replay.systems`` x ``replay.schedules`` x ``replay.profiles``
(``measured`` left out: it prices this CPU, not the paper's systems). Same schema as the replay stage's results, so
the views show the artifact's traces and ours side by side. ``python -m heterospec.replay ours``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store.parquet import write_parquet

log = logging.getLogger("heterospec.replay")


def ours_path(paths: RunPaths) -> Path:
    return paths.root / "report" / "replay_ours.parquet"


def ours_profiles(cfg: Any) -> list[str]:
    """The latency profiles our traces are priced with on the paper's systems."""
    return [p for p in cfg.replay.profiles if p != "measured"]


def replay_ours(cfg: Any, paths: RunPaths, overrides: list[str]) -> pa.Table:
    """Replay each algorithm's sequential collect traces on ``replay.systems`` x ``replay.schedules`` x profiles."""
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
    from heterospec.replay.schedules import get_schedule
    from heterospec.replay.grid.stage import (needs_speculation, prefetch_outcome, profile_factory, schedule_configs,
                                         system_configs, token_speculation)
    from heterospec.replay.traces.problems import ours_problems

    profiles = ours_profiles(cfg)
    if not profiles:
        raise UserError(f"replay.profiles {list(cfg.replay.profiles)}: our traces need a profile other than "
                        "'measured' to be priced on the paper's systems")
    systems = system_configs(cfg)
    scheds = [get_schedule(s) for s in schedule_configs(cfg, overrides)]
    parts = []
    for trace_set, probs in ours_problems(cfg, paths).items():
        for name in profiles:
            log.info("%s: %d problems on %d systems x %d schedules, profile %s", trace_set, len(probs),
                     len(systems), len(scheds), name)
            parts.append(simulate(probs, systems, scheds, profile_factory(name, cfg, paths), cfg.replay.engine,
                                  cfg.replay.workers, run=cfg.name, recorded=prefetch_outcome(cfg),
                                  speculation=token_speculation(cfg) if needs_speculation(scheds) else None))
    if not parts:
        raise UserError(f"{paths.collect_root}: no sequential collect traces to replay")
    results = pa.concat_tables(parts)
    write_parquet(results, ours_path(paths), REPLAY_RESULTS_SCHEMA)
    log.info("%d problem-replays of our traces -> %s", results.num_rows, ours_path(paths))
    return results
