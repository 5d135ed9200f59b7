"""Price DFVG's measured rounds on modelled hardware: draft-on-FPGA / verify-on-GPU (overlapped), GPU-only
speculative decoding, and plain target decoding (:mod:`heterospec.replay.schedules.dfvg`).

What the rounds carry over from the real run: how many nodes each tree had, how deep and wide, how many were
accepted, whether the draft guessed the target's token, and the KV lengths. What the profile supplies: the time
of each call for the models ``dfvg.replay.models`` names (by default Qwen2.5-0.5B drafting for Qwen2.5-7B), on
the ``dfvg.replay.fpga`` and ``dfvg.replay.gpu`` datasheets. Energy: each device's active power while busy, idle
power otherwise, over the generation (the GPU-only and plain designs have no FPGA).
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from heterospec.config import compose_config
from heterospec.config.hardware import System, device, link_of
from heterospec.dfvg.schemas import DFVG_REPLAY_SCHEMA
from heterospec.errors import UserError
from heterospec.replay.simulator.engines import FastEngine
from heterospec.replay.simulator.system import SystemParams
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.schedules.dfvg import DESIGNS, Costs, Round, dfvg


def systems(rcfg: Any) -> dict[str, System]:
    """The two speculative designs (the PRM slot holds the GPU; nothing runs there)."""
    fpga, gpu = device(rcfg.fpga), device(rcfg.gpu)
    if fpga.kind != "fpga":
        raise UserError(f"dfvg.replay.fpga='{rcfg.fpga}' is a {fpga.kind}, not an FPGA")
    link = link_of(rcfg.link, "dfvg.replay.link")
    return {"fpga_gpu": System.pair(f"{fpga.name}+{gpu.name}", fpga, gpu, link),
            "gpu_only": System.pair(gpu.name, gpu, gpu, link)}


def _rounds(table: pa.Table) -> dict[tuple[str, str], list[Round]]:
    cols = ["strategy", "prompt_id", "nodes", "width", "accepted", "draft_passes", "catch_up", "guess_hit",
            "kv_target", "kv_draft"]
    out: dict[tuple[str, str], list[Round]] = {}
    for row in table.select(cols).to_pylist():
        key = (row.pop("strategy"), row.pop("prompt_id"))
        out.setdefault(key, []).append(Round(**row))
    return out


def replay(rounds: pa.Table, generations: pa.Table, cfg: Any, run: str = "", perf: Any = None) -> pa.Table:
    """Every strategy x prompt on both speculative designs, plus plain decoding of the same prompts, per profile.

    ``rounds``: the strategies' round traces; ``generations``: rows with prompt_id, prompt_tokens, new_tokens
    (the tokens each generation produced, the same for every lossless method)."""
    rcfg = cfg.dfvg.replay
    models = compose_config([f"models={rcfg.models}"]).models
    gens = {r["prompt_id"]: r for r in generations.select(["prompt_id", "prompt_tokens", "new_tokens"]).to_pylist()}
    by_key = _rounds(rounds)
    missing = sorted({p for _, p in by_key} - set(gens))
    if missing:
        raise UserError(f"dfvg replay: prompt '{missing[0]}' has rounds but no generation row")
    rows = []
    for profile_name in rcfg.profiles:
        for design, system in systems(rcfg).items():
            sysp = SystemParams.of(system)
            prof = get_profile(profile_name, system=system, models=models, perf=perf,
                               overheads=dict(cfg.replay.call_overhead_ms))
            costs = Costs(prof)
            for (strategy, pid), rs in by_key.items():
                eng = FastEngine()
                extra = dfvg(gens[pid]["prompt_tokens"], rs, costs, sysp.link_ms, eng, design, rcfg.align_bytes_per_token)
                rows.append(_row(run, strategy, design, profile_name, rcfg.models, pid, len(rs),
                                 gens[pid]["new_tokens"], eng.tally, sysp, design == "fpga_gpu", extra))
            if design == "gpu_only":    # plain decoding: the target alone on the same GPU
                for pid, g in gens.items():
                    eng = FastEngine()
                    pre = eng.run("target", costs.prompt_target(g["prompt_tokens"]), kind="init")
                    eng.run("target", costs.decode(g["prompt_tokens"], g["new_tokens"]), [pre], kind="decode")
                    rows.append(_row(run, "plain", "plain", profile_name, rcfg.models, pid, 0, g["new_tokens"],
                                     eng.tally, sysp, False, dict(discarded_draft_ms=0.0, guess_hits=0)))
    return pa.Table.from_pylist(rows, schema=DFVG_REPLAY_SCHEMA)


def _row(run, strategy, design, profile, priced_as, pid, n_rounds, tokens, tally, sysp, has_fpga, extra) -> dict:
    lat = tally.latency
    busy_f = tally.busy["draft"] if has_fpga else 0.0
    busy_g = tally.busy["target"]
    e_f = (sysp.power_active_w["draft"] * busy_f + sysp.power_idle_w["draft"] * (lat - busy_f)) / 1e3 if has_fpga else 0.0
    e_g = (sysp.power_active_w["target"] * busy_g + sysp.power_idle_w["target"] * (lat - busy_g)) / 1e3
    return dict(run=run, strategy=strategy, design=design, profile=profile, priced_as=priced_as, prompt_id=pid,
                rounds=n_rounds, tokens=tokens, latency_ms=lat, busy_fpga_ms=busy_f, busy_gpu_ms=busy_g,
                link_ms=tally.busy["link"], energy_fpga_j=e_f, energy_gpu_j=e_g, energy_j=e_f + e_g, **extra)


def summary(table: pa.Table) -> list[dict]:
    """Per strategy x design x profile: tokens/s, J/token, and speedup / energy gain over plain decoding."""
    import duckdb
    con = duckdb.connect()
    from heterospec.store.catalog import SUMMARIES
    con.register("dfvg_replay", table)
    rows = con.sql(SUMMARIES["dfvg_replay_summary"][1]).fetchall()
    cols = ["run", "profile", "priced_as", "strategy", "design", "prompts", "tokens_per_s", "j_per_token",
            "speedup_vs_plain", "energy_gain_vs_plain", "speedup_vs_gpu_only", "guess_hit_pct"]
    return [dict(zip(cols, r)) for r in rows]


__all__ = ["DESIGNS", "replay", "summary", "systems"]
