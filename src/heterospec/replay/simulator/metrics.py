"""A problem's metrics from its operation log (``REPLAY_RESULTS_SCHEMA``; definitions in :mod:`heterospec.replay.simulator.des`)."""
from __future__ import annotations

import math

import pyarrow as pa

from heterospec.replay.simulator.engines import DEVICES, Tally
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx
from heterospec.store.parquet import versioned

REPLAY_RESULTS_SCHEMA = versioned("replay_results", 2, [
    pa.field("run", pa.string(), nullable=False),           # results/<run>/ ("" outside a run)
    pa.field("trace_set", pa.string(), nullable=False),     # the traces' set (with_bt, no_bt, collect, ...)
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
    pa.field("steps", pa.int32(), nullable=False),
    pa.field("backtracks", pa.int32(), nullable=False),     # backtrack steps in the trace
    pa.field("latency_ms", pa.float64(), nullable=False),
    pa.field("accepted_tokens", pa.int64(), nullable=False),
    pa.field("goodput_tok_s", pa.float64(), nullable=False),
    pa.field("busy_draft_ms", pa.float64(), nullable=False),
    pa.field("busy_prm_ms", pa.float64(), nullable=False),
    pa.field("busy_target_ms", pa.float64(), nullable=False),
    pa.field("energy_draft_j", pa.float64(), nullable=False),
    pa.field("energy_prm_j", pa.float64(), nullable=False),
    pa.field("energy_target_j", pa.float64(), nullable=False),
    pa.field("energy_j", pa.float64(), nullable=False),
    pa.field("j_per_token", pa.float64(), nullable=False),
    pa.field("stall_ms", pa.float64(), nullable=False),
    pa.field("comm_ms", pa.float64(), nullable=False),
    pa.field("comm_share", pa.float64(), nullable=False),
    pa.field("discarded_draft_tokens", pa.int64(), nullable=False),
    pa.field("discarded_target_tokens", pa.int64(), nullable=False),
    pa.field("discarded_energy_j", pa.float64(), nullable=False),   # marginal energy of all discarded work
    pa.field("speculation_waste_j", pa.float64(), nullable=False),  # ... of cancelled speculative drafts + prefetches
    pa.field("lower_bound_ms", pa.float64(), nullable=False),
    pa.field("efficiency", pa.float64(), nullable=False),
])


def metrics(tally: Tally, prob: TracedProblem, ctx: Ctx) -> dict:
    busy, latency, stall, longest = tally.busy, tally.latency, tally.stall, tally.longest
    disc_tok = {"draft": 0, "target": 0}
    disc_e = spec_e = 0.0
    pa_w = ctx.system.power_active_w
    extra_w = {r: pa_w[r] - ctx.system.power_idle_w[r] for r in DEVICES}
    for op in tally.discarded:
        ln = op.work
        disc = op.disc() if callable(op.disc) else op.disc
        if disc and op.res in extra_w:
            e = extra_w[op.res] * ln / 1e3
            disc_e += e
            if op.kind == "prefetch" or op.kind == "spec_draft":
                spec_e += e
            if op.cap:
                if op.until is None or ln >= op.dur * (1 - 1e-12):   # ran to completion (up to rounding)
                    disc_tok[op.role] += op.cap
                else:
                    disc_tok[op.role] += ctx.profile.tokens_within(op.role, op.kv, ln, op.cap, op.new)
    energy = {r: (pa_w[r] * busy[r] + ctx.system.power_idle_w[r] * (latency - busy[r])) / 1e3 for r in DEVICES}
    total_e = sum(energy.values())
    acc = prob.accepted_tokens
    bound = max(longest, *busy.values())
    return dict(steps=len(prob.draft_tokens), backtracks=prob.backtracks, latency_ms=latency, accepted_tokens=acc,
                goodput_tok_s=acc / latency * 1e3 if latency > 0 else 0.0,
                busy_draft_ms=busy["draft"], busy_prm_ms=busy["prm"], busy_target_ms=busy["target"],
                energy_draft_j=energy["draft"], energy_prm_j=energy["prm"], energy_target_j=energy["target"],
                energy_j=total_e, j_per_token=total_e / acc if acc > 0 else math.inf, stall_ms=stall,
                comm_ms=busy["link"], comm_share=busy["link"] / latency if latency > 0 else 0.0,
                discarded_draft_tokens=disc_tok["draft"], discarded_target_tokens=disc_tok["target"],
                discarded_energy_j=disc_e, speculation_waste_j=spec_e, lower_bound_ms=bound,
                efficiency=bound / latency if latency > 0 else 1.0)
