"""The report's own inputs: our collect traces replayed on the paper's systems, and the paper's Table III.

* ``results/<run>/report/replay_ours.parquet``: each algorithm's sequential collect traces (trace set
  ``ours_<algorithm>``) replayed like the artifact's: ``replay.systems`` x ``replay.schedules`` x ``replay.profiles``
  (``measured`` left out: it prices this CPU, not the paper's systems). Same schema as the replay stage's results,
  so the Figure 8 / 10 views show the artifact's traces and ours side by side.
* ``results/<run>/report/paper_table3.parquet``: the artifact's Table III (``table3_accuracy_reference.json`` under
  ``paths.heteroreason_ae``), one row per config x method x dataset; empty when no artifact checkout is configured.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store.parquet import versioned, write_parquet

log = logging.getLogger("heterospec.report")

PAPER_TABLE3 = Path("AE_alg") / "Algorithm" / "reference_results" / "table3_accuracy_reference.json"
PAPER_METHODS = {"RSD (baseline)": "rsd", "BRSD": "brsd", "BRSD + optimizations": "brsd_opt"}

PAPER_TABLE3_SCHEMA = versioned("paper_table3", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("config", pa.string(), nullable=False),        # the paper's model configuration: Config1, Config2
    pa.field("models", pa.string(), nullable=False),        # what it names, e.g. "0.5B draft - 7B PRM - 7B target"
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),        # rsd, brsd, brsd_opt
    pa.field("accuracy", pa.float64(), nullable=False),     # %
    pa.field("source", pa.string(), nullable=False),        # the reference file, relative to the artifact checkout
])


def ours_path(paths: RunPaths) -> Path:
    return paths.root / "report" / "replay_ours.parquet"


def paper_table3_path(paths: RunPaths) -> Path:
    return paths.root / "report" / "paper_table3.parquet"


def ours_profiles(cfg: Any) -> list[str]:
    """The latency profiles our traces are priced with on the paper's systems."""
    return [p for p in cfg.replay.profiles if p != "measured"]


def replay_ours(cfg: Any, paths: RunPaths, overrides: list[str]) -> pa.Table:
    """Replay each algorithm's sequential collect traces on ``replay.systems`` x ``replay.schedules`` x profiles."""
    from heterospec.replay.grid.simulate import simulate
    from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
    from heterospec.replay.simulator.problem import problems_from_steps
    from heterospec.replay.schedules import get_schedule
    from heterospec.replay.grid.stage import (needs_speculation, prefetch_outcome, profile_factory, schedule_configs,
                                         system_configs, token_speculation)
    from heterospec.replay.simulator.steps import steps_from_calls
    from heterospec.replay.traces.reader import find_traces, plain_traces

    profiles = ours_profiles(cfg)
    if not profiles:
        raise UserError(f"replay.profiles {list(cfg.replay.profiles)}: our traces need a profile other than "
                        "'measured' to be priced on the paper's systems")
    calls, _ = plain_traces(cfg, *find_traces(paths.collect_root, list(cfg.collect.executors)))
    systems = system_configs(cfg)
    scheds = [get_schedule(s) for s in schedule_configs(cfg, overrides)]
    parts = []
    for (algorithm, executor), table in sorted(calls.items()):
        if executor != "sequential":
            continue   # every executor reasons identically (greedy); the sequential one's calls are the steps
        probs = problems_from_steps(steps_from_calls(table, f"ours_{algorithm}"))
        for name in profiles:
            log.info("ours_%s: %d problems on %d systems x %d schedules, profile %s", algorithm, len(probs),
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


def paper_table3(cfg: Any, paths: RunPaths) -> list[dict]:
    """The artifact's Table III as rows (none without an artifact checkout); a malformed file is one line."""
    root = Path(str(cfg.paths.heteroreason_ae))
    ref = root / PAPER_TABLE3
    rows = []
    if ref.is_file():
        try:
            doc = json.loads(ref.read_text())
            for config, c in doc["configurations"].items():
                for method, m in c["methods"].items():
                    if method not in PAPER_METHODS:
                        raise UserError(f"{ref}: method '{method}' unknown; expected one of {list(PAPER_METHODS)}")
                    rows += [dict(run=cfg.name, config=config, models=c["models"], dataset=d,
                                  method=PAPER_METHODS[method], accuracy=float(acc), source=str(PAPER_TABLE3))
                             for d, acc in m["datasets"].items()]
            if not rows:
                raise KeyError("no accuracy values")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{ref}: expected the artifact's Table III reference "
                            f"(configurations.<config>.methods.<method>.datasets.<dataset>: accuracy), {e!r}") from None
        log.info("paper Table III: %d values from %s", len(rows), ref)
    else:
        log.info("paper Table III: %s not found (no artifact checkout configured); table3 shows ours only", ref)
    write_parquet(rows, paper_table3_path(paths), PAPER_TABLE3_SCHEMA)
    return rows
