"""The replay stage: import the artifact's traces, replay them on modelled systems, validate against real runs.

    python -m heterospec.replay import --trace-set with_bt [overrides]   artifact JSON -> events table
    python -m heterospec.replay run [overrides]                           every trace set x system x schedule x profile
    python -m heterospec.replay validate [overrides]                      the simulator against our own collect traces

(``heterospec replay ...`` is the same.) Paths come from :class:`heterospec.paths.RunPaths`; parameters from the
``replay`` config group.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.artifact.replays import ARTIFACT_REPLAY_SCHEMA, replay_for_profiles
from heterospec.replay.grid.simulate import simulate
from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
from heterospec.replay.simulator.system import PREFETCH_OUTCOMES, SpeculationParams
from heterospec.replay.artifact.importer import FORMATS, import_traces, read_events
from heterospec.replay.profiles.registry import get_profile, profile_names
from heterospec.replay.schedules import get_schedule
from heterospec.replay.grid.entries import schedule_configs, system_configs
from heterospec.store.parquet import write_parquet

HARDWARE_PROFILES = ("roofline", "hls")


def trace_root(cfg: Any, trace_set: str) -> Path:
    """``<replay.traces>/<trace_set>``, which must exist."""
    root = Path(cfg.replay.traces) / trace_set
    if not root.is_dir():
        raise UserError(f"{root}: trace folder not found; point paths.heteroreason_ae (or HETEROSPEC_ARTIFACT) at a "
                        f"checkout of the HeteroReason artifact, or replay.traces at a folder of trace sets")
    return root


def import_stage(cfg: Any, paths: RunPaths, trace_set: str) -> pa.Table:
    """Read one trace set (every dataset folder, or ``replay.datasets``) into the events tables."""
    fmt = None if cfg.replay.format == "auto" else cfg.replay.format
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"replay.format '{fmt}': choose one of {list(FORMATS)} or auto")
    root = trace_root(cfg, trace_set)
    dirs = [root / d for d in cfg.replay.datasets] or [root]
    parts = [import_traces(d, fmt) for d in dirs]
    events = pa.concat_tables([p.events for p in parts])
    targets = pa.concat_tables([p.target_events for p in parts])
    from heterospec.replay.artifact.importer import ImportedTraces
    ImportedTraces(events, targets).write(paths.replay_events(trace_set), paths.replay_target_events(trace_set))
    n = len(set(events.column("source").to_pylist()))
    ds = sorted(set(events.column("dataset").to_pylist()))
    print(f"[replay import] {trace_set}: {n} problems, {events.num_rows} events ({', '.join(ds)}) "
          f"-> {paths.replay_events(trace_set)}")
    return events


def profile_factory(name: str, cfg: Any, paths: RunPaths):
    """A function system -> latency profile for profile ``name`` (paper profiles ignore the system)."""
    if name not in profile_names():
        raise UserError(f"unknown latency profile '{name}'; choose one of {profile_names()}")
    if name == "measured":
        from heterospec.replay.traces.fit import measured_profile
        prof = measured_profile(cfg, paths)
        return lambda system: prof
    if name not in HARDWARE_PROFILES:   # the paper profiles: the draft device's price (paper.draft_price)
        return lambda system: get_profile(name, system=system)
    checkpoints = {r: paths.model_checkpoint(r) for r in ("draft", "prm", "target")}
    kw = dict(models=cfg.models, overheads=dict(cfg.replay.call_overhead_ms), checkpoints=checkpoints,
              prefix_cache=bool(cfg.replay.prefix_cache))
    if name == "hls":
        kw["perf"] = paths.hls_perf
    return lambda system: get_profile(name, system=system, **kw)


def traced_sets(cfg: Any, paths: RunPaths) -> list:
    """Every imported trace set of ``replay.trace_sets`` as problems, in that order."""
    from heterospec.replay.traces.problems import run_problems
    if not cfg.replay.trace_sets:
        raise UserError("replay.trace_sets is empty: nothing to replay")
    return [p for probs in run_problems(cfg, paths, cfg.replay.trace_sets).values() for p in probs]


def prefetch_outcome(cfg: Any) -> bool | None:
    """``replay.prefetch_outcome``: None (auto: the profile says), True (recorded) or False (simulated)."""
    v = cfg.replay.prefetch_outcome
    if v not in PREFETCH_OUTCOMES:
        raise UserError(f"replay.prefetch_outcome '{v}': choose one of {list(PREFETCH_OUTCOMES)}")
    return None if v == "auto" else v == "recorded"


def token_speculation(cfg: Any, strategy: str | None = None, tau: float | None = None) -> SpeculationParams:
    """The run's token-speculation numbers (replay.token_speculation) for ``strategy`` (default: the configured
    one), ``tau`` overriding the configured value (the tau sweep)."""
    ts = cfg.replay.token_speculation
    name = strategy or str(ts.strategy)
    t = tau if tau is not None else ts.tau.get(name)
    if t is None:
        raise UserError(f"replay.token_speculation.tau.{name}: no value (no published measurement of a comparable "
                        f"pair is configured); set one, e.g. replay.token_speculation.tau.{name}=3.0")
    if name not in ts.draft_len:
        raise UserError(f"replay.token_speculation.draft_len.{name}: no value; expected tokens drafted per round")
    return SpeculationParams(float(t), int(ts.draft_len[name]), name, str(ts.source))


def needs_speculation(scheds) -> bool:
    return any("token_speculation" in s.mechanisms for s in scheds)


def run_stage(cfg: Any, paths: RunPaths, overrides: list[str]) -> pa.Table:
    """Replay every imported trace set on every system x schedule x profile; also the artifact's own formulas."""
    scheds = [get_schedule(s) for s in schedule_configs(cfg, overrides)]
    factories = {p: profile_factory(p, cfg, paths) for p in cfg.replay.profiles}
    systems = system_configs(cfg)
    for s in systems:       # build every profile once up front: a missing hardware field fails before any work
        for f in factories.values():
            f(s)
    probs = traced_sets(cfg, paths)
    recorded = prefetch_outcome(cfg)
    spec = token_speculation(cfg) if needs_speculation(scheds) else None
    parts = [simulate(probs, systems, scheds, f, cfg.replay.engine, cfg.replay.workers, run=cfg.name,
                      recorded=recorded, speculation=spec) for f in factories.values()]
    results = pa.concat_tables(parts)
    write_parquet(results, paths.replay_results, REPLAY_RESULTS_SCHEMA)
    artifact = pa.concat_tables([replay_for_profiles(read_events(paths.replay_events(ts)), list(cfg.replay.profiles),
                                                     trace_set=ts, run=cfg.name) for ts in cfg.replay.trace_sets])
    write_parquet(artifact, paths.replay_artifact, ARTIFACT_REPLAY_SCHEMA)
    print_summary(results, artifact)
    print(f"[replay run] {results.num_rows} problem-replays -> {paths.replay_results}; "
          f"artifact formulas -> {paths.replay_artifact}")
    return results


def print_summary(results: pa.Table, artifact: pa.Table) -> None:
    """Mean latency (s/problem), goodput and J/token per trace set x dataset x profile x system x schedule."""
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0, 0.0])
    for r in results.select(["trace_set", "dataset", "profile", "system", "schedule", "latency_ms",
                             "accepted_tokens", "energy_j"]).to_pylist():
        a = acc[(r["trace_set"], r["dataset"], r["profile"], r["system"], r["schedule"])]
        a[0] += 1
        a[1] += r["latency_ms"]
        a[2] += r["accepted_tokens"]
        a[3] += r["energy_j"]
    art: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
    for r in artifact.select(["trace_set", "dataset", "profile", "latency_ms"]).to_pylist():
        a = art[(r["trace_set"], r["dataset"], r["profile"])]
        a[0] += 1
        a[1] += r["latency_ms"]
    from heterospec.text_table import format_table
    rows = [(*k, n, lat / n / 1e3, tok / lat * 1e3, e / tok if tok else None) for k, (n, lat, tok, e) in sorted(acc.items())]
    rows += [(ts, ds, prof, "(artifact formula)", "", n, lat / n / 1e3, None, None)
             for (ts, ds, prof), (n, lat) in sorted(art.items())]
    print(format_table(["traces", "dataset", "profile", "system", "schedule", "problems", "latency_s",
                        "goodput_tok_s", "j_per_token"], rows))
