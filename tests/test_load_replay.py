"""The load replay against independent oracles: the single-request replay (one request at a time, batch 1), the
M/D/1 queue's mean wait (Pollaczek-Khinchine), a hand-worked pair of requests batched on the target, and the
bottleneck's service rate at saturation. Batched prices against hand-computed passes and constructed tables."""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from heterospec.arrivals import poisson_times
from heterospec.config import compose_config
from heterospec.config.hardware import system as hw_system
from heterospec.errors import UserError
from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.replay.simulator.des import simulate_problem
from heterospec.replay.artifact.importer import import_traces
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.load import replay_closed, replay_requests, serial_plan
from heterospec.replay.load.batching import Bounds, get_policy
from heterospec.replay.load.devices import DevicePlan, PricingInputs, lanes_fit, plan_devices, settings_of
from heterospec.replay.load.prices import (BatchCurve, fit_batch_prices, measured_curve, published_curve,
                                           roofline_curve)
from heterospec.replay.simulator.problem import TracedProblem, problems_from_steps
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.profiles.roofline import Roofline
from heterospec.replay.schedules import schedule_names
from heterospec.replay.artifact.event_steps import steps_from_events
from heterospec.replay.simulator.system import Ctx, SpeculationParams, SystemParams

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CONFIG1 = SHARED / "heteroreason_ae" / "Hardware" / "inputs" / "Config1"
SPEC = SpeculationParams(3.0, 5)
FLAT = BatchCurve(lambda b, c: 1.0, "flat")

# conf/load/default.yaml's device settings without its published batch curves (every device on the roofline's)
DEFAULT_SETTINGS = replace(settings_of(compose_config([]).load), paper_curves={})


def artifact(trace_set: str, per_dataset: int) -> list[TracedProblem]:
    """The first problems of each dataset of one of the artifact's Config1 trace sets (skip when absent)."""
    root = CONFIG1 / trace_set
    if not root.is_dir():
        pytest.skip(f"{root} absent (shared artifact traces)")
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        probs = problems_from_steps(steps_from_events(import_traces(d).events, trace_set))
        out += probs[:per_dataset]
    return out


def generated(n: int, seed: int = 7) -> list[TracedProblem]:
    """Problems shaped like our collect traces: a prompt, accepted steps, rescues, backtracks with failed rescues."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        p = TracedProblem("synthetic", f"g{k}", rng.randint(10, 80), [], [], [], [], [], [], "ours_brsd", [], [])
        kv = 0
        for _ in range(rng.randint(1, 8)):
            out_ = rng.choice(["accept", "accept", "accept", "rescue", "backtrack"])
            d, t = rng.randint(4, 40), rng.randint(4, 40) if out_ != "accept" else 0
            rb = rng.randint(0, kv) if out_ == "backtrack" else 0
            p.outcome.append(out_); p.draft_tokens.append(d); p.target_tokens.append(t); p.kv_verify.append(kv); p.kv_target.append(kv - rb)
            p.target_scored.append(True); p.rescue_tokens.append(rng.randint(1, 30) if out_ == "backtrack" else 0)
            kv = kv + d if out_ == "accept" else kv - rb + t
            p.path_tokens.append(kv)
        out.append(p)
    return out


def batch1_plan(system, models) -> DevicePlan:
    """The configured policies (lanes on an FPGA, batched prefill, continuous batching) held to batch 1."""
    settings = replace(DEFAULT_SETTINGS, max_batch={"draft": 1, "prm": 1, "target": 1}, draft_lanes=1)
    plan = plan_devices(system, settings, PricingInputs(models=models, kind="roofline", hls=compose_config([]).hls,
                                                        max_context=4096))
    assert {p.policy for p in plan.policies.values()} >= {"continuous", "batched_prefill"}
    return plan


def one_at_a_time(probs, system, schedule, profile, plan) -> list[float]:
    """Every problem once, each arriving long after the one before has finished: latencies in ms."""
    gap = 1e3 + max(simulate_problem(p, schedule, Ctx(profile, SystemParams.of(system), speculation=SPEC))[0]
                    ["latency_ms"] for p in probs) / 1e3
    run = replay_requests([(i * gap, p) for i, p in enumerate(probs)], system, schedule, profile, plan,
                          speculation=SPEC)
    return [r.latency for r in run.requests]


def between_tokens(profile: LatencyProfile) -> LatencyProfile:
    """``profile`` where a cancel lets the target's prefill and then the token in progress finish (as our executors
    do: the measured profile's ``cancel_units``)."""
    def cancel_units(role, kv, n, new=None):
        if n <= 0:
            return 0.0, 0.0
        if role == "target":
            return profile.target_prefill(kv, new), profile.target_decode(kv, n) / n
        return 0.0, profile.draft_decode(kv, n) / n
    profile.cancel_units = cancel_units
    return profile


@pytest.mark.parametrize("system_name", ["gpu3", "hetero_u280", "cpu3"])
@pytest.mark.parametrize("profile_name", ["paper_v12", "roofline", "roofline_between_tokens"])
def test_one_request_at_a_time_at_batch_1_is_the_single_request_replay(system_name, profile_name):
    system = hw_system(system_name)
    models = compose_config(["models=config1" if system_name != "cpu3" else "models=tiny"]).models
    profile = get_profile(profile_name.removesuffix("_between_tokens"), system=system, models=models)
    if profile_name.endswith("_between_tokens"):
        profile = between_tokens(profile)
    probs = artifact("with_bt", 3) + artifact("no_bt", 2) + generated(10)
    plan = batch1_plan(system, models)
    for schedule in schedule_names():
        ctx = Ctx(profile, SystemParams.of(system), speculation=SPEC)
        want = [simulate_problem(p, schedule, ctx)[0]["latency_ms"] for p in probs]
        for got in (one_at_a_time(probs, system, schedule, profile, plan),
                    one_at_a_time(probs, system, schedule, profile, serial_plan())):
            bad = [(p.trace_set, p.problem, g, w) for p, g, w in zip(probs, got, want) if abs(g - w) > 1e-9 * w]
            assert not bad, f"{schedule}: {bad[:3]}"


# ----------------------------------------------------------------------------- queueing oracles
ONE_STEP = TracedProblem("synthetic", "one", 0, ["accept"], [20], [0], [0], [0], [20])


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_poisson_arrivals_to_one_constant_server_wait_as_m_d_1(rho):
    """Each request is one draft step (its first operation: it joins the draft's queue as it arrives), a PRM score
    and a transfer: the draft is an M/D/1 queue, and its mean wait is rho D / (2 (1 - rho))."""
    profile, system = get_profile("paper_v12"), hw_system("gpu3")
    D = profile.draft_decode(0, 20)
    n, warm = 8000, 500
    run = replay_requests([(t, ONE_STEP) for t in poisson_times(rho / D * 1e3, n + warm, seed=3)], system,
                          "sequential", profile, warmup=warm)
    waits = [r.queued["draft"] for r in run.requests[warm:]]
    batches = [statistics.fmean(waits[i::40]) for i in range(40)]   # interleaved: nearly independent batch means
    means = [statistics.fmean(waits[i * (n // 40):(i + 1) * (n // 40)]) for i in range(40)]
    se = statistics.stdev(means) / math.sqrt(len(means))
    want = rho * D / (2 * (1 - rho))
    assert abs(statistics.fmean(waits) - want) < 4 * se, (statistics.fmean(waits), want, se, batches[:3])
    assert run.point["util_draft"] == pytest.approx(rho, rel=0.05)


class TokenMs(LatencyProfile):
    """The target writes a token per millisecond; nothing else costs anything (a hand-workable price)."""
    name = "token_ms"

    def draft_decode(self, kv, n):
        return 0.0

    def draft_prefill(self, kv, n):
        return 0.0

    def prm_score(self, n, new=None):
        return 0.0

    def target_prefill(self, kv, new=None):
        return 0.0

    def target_decode(self, kv, g):
        return float(g)


def target_plan(max_batch: int, curve: BatchCurve) -> DevicePlan:
    serial = get_policy("serial")
    policies = {r: serial for r in ("draft", "prm", "link")} | {"target": get_policy("continuous")}
    bounds = {r: Bounds() for r in ("draft", "prm", "link")} | {"target": Bounds(max_batch=max_batch)}
    return DevicePlan(policies, bounds, {r: curve for r in policies}, dict.fromkeys(policies, ""))


def writes(tokens: int) -> TracedProblem:
    return TracedProblem("synthetic", f"w{tokens}", 0, ["accept"], [tokens], [0], [0], [0], [tokens])


def test_two_requests_batched_on_the_target_by_hand():
    """Request A writes 100 tokens from t=0, B 60 from t=20 ms; two in a batch cost 1.25x one. A alone does 20;
    together each advances 0.8 ms of work per ms: B's 60 take 75 ms (ends at 95, latency 75), by then A has done
    20 + 60 = 80 and finishes its last 20 alone (ends at 115). At batch 1 B waits for A: 100 + 60 = 160, latency 140."""
    curve = BatchCurve(lambda b, c: 1.0 + 0.25 * (b - 1), "hand")
    reqs = [(0.0, writes(100)), (0.020, writes(60))]
    run = replay_requests(reqs, hw_system("gpu3"), "target_only", TokenMs(), target_plan(2, curve))
    assert [r.latency for r in run.requests] == pytest.approx([115.0, 75.0], abs=1e-9)
    one = replay_requests(reqs, hw_system("gpu3"), "target_only", TokenMs(), target_plan(1, curve))
    assert [r.latency for r in one.requests] == pytest.approx([100.0, 140.0], abs=1e-9)
    assert one.requests[1].queued["target"] == pytest.approx(80.0)


def test_saturated_throughput_is_the_bottleneck_service_rate():
    profile = get_profile("paper_v12")
    D = profile.draft_decode(0, 20)
    reqs = [(t, ONE_STEP) for t in poisson_times(3e3 / D, 1500, seed=1)]
    for lanes in (1, 2):   # the FPGA draft's lanes, each a batch-1 server of D ms: lanes / D per ms
        sysm = hw_system("hetero_u280")
        plan = serial_plan()
        plan = replace(plan, policies={**plan.policies, "draft": get_policy("lanes")},
                       bounds={**plan.bounds, "draft": Bounds(lanes=lanes)})
        run = replay_requests(reqs, sysm, "sequential", profile, plan, warmup=300)
        assert run.point["throughput_rps"] == pytest.approx(lanes * 1e3 / D, rel=0.03)
        assert not run.point["keeps_up"]
    # continuous batching of 4, a batch of 4 costing 1.75x one: 4 / (1.75 x 100 ms) per ms
    curve = BatchCurve(lambda b, c: 1.0 + 0.25 * (b - 1), "hand")
    reqs = [(t, writes(100)) for t in poisson_times(100.0, 1500, seed=2)]
    run = replay_requests(reqs, hw_system("gpu3"), "target_only", TokenMs(), target_plan(4, curve), warmup=300)
    assert run.point["throughput_rps"] == pytest.approx(4 / (1.75 * 0.1), rel=0.03)
    assert run.point["batch_target"] == pytest.approx(4.0, rel=0.01)
    # a closed loop of one client never queues: every request takes its own time
    closed = replay_closed([ONE_STEP] * 20, 1, 0.0, hw_system("gpu3"), "sequential", profile)
    alone = simulate_problem(ONE_STEP, "sequential", Ctx(profile, SystemParams.of(hw_system("gpu3"))))[0]
    assert [r.latency for r in closed.requests] == pytest.approx([alone["latency_ms"]] * 20)


# ----------------------------------------------------------------------------- batched prices
def test_batch_1_prices_are_the_profiles_own():
    rf = Roofline(weight_ms=10.0, kv_ms=0.001, flop_ms=0.01, attn_ms=1e-6, overhead_ms=0.03)
    for kv, n in [(0, 1), (999, 1), (500, 37)]:
        assert rf.batch_forward(1, kv, n) == rf.forward(kv, n)
    curves = [roofline_curve(rf), roofline_curve(rf, 40.0), published_curve([1, 32, 64], [9.0, 9.5, 11.0], 0.7, 1e-4),
              measured_curve(np.array([2.0, 0.5, 0.05, 0.001]))]
    assert all(c(1, ctx) == 1.0 for c in curves for ctx in (0, 100, 4000))


def test_roofline_batch_by_hand():
    """Memory-bound: weights once (10 ms) + each sequence's KV (1 us per context token); compute-bound: 4 x 5 ms."""
    mem = Roofline(weight_ms=10.0, kv_ms=0.001, flop_ms=0.01, attn_ms=0.0, overhead_ms=0.0)
    assert roofline_curve(mem)(4, 999) == pytest.approx((10 + 4 * 1.0) / (10 + 1.0))
    comp = Roofline(weight_ms=10.0, kv_ms=0.001, flop_ms=5.0, attn_ms=0.0, overhead_ms=0.0)
    assert roofline_curve(comp)(4, 999) == pytest.approx(20.0 / 11.0)


def test_measured_curve_fits_a_constructed_table():
    """ms = 2 + 0.5 b + 0.05 b n + 0.001 b c on a grid: the fit recovers it; a batch of 8 at context 100, one token
    each, costs 7.2 ms against 2.65 at batch 1."""
    rows = [dict(run="", device="cpu", device_name="test", role="target", phase="decode", batch=b, context=c,
                 tokens=n, ms=2 + 0.5 * b + 0.05 * b * n + 0.001 * b * c, ms_min=0.0, ms_max=0.0, repeats=3,
                 dtype="float32")
            for b in (1, 2, 4, 8, 16) for c in (0, 64, 256) for n in (1, 4)]
    fit = fit_batch_prices(pa.Table.from_pylist(rows, schema=BATCH_PRICES_SCHEMA))
    assert fit[("target", "decode")] == pytest.approx([2.0, 0.5, 0.05, 0.001], abs=1e-6)
    assert measured_curve(fit[("target", "decode")])(8, 100) == pytest.approx(7.2 / 2.65)
    one = pa.Table.from_pylist([r for r in rows if r["batch"] == 1], schema=BATCH_PRICES_SCHEMA)
    with pytest.raises(UserError, match="one batch size"):
        fit_batch_prices(one)


def test_published_curve_by_hand():
    c = published_curve([1, 32, 64], [10.0, 12.0, 16.0], 1.0, 0.0)
    assert c(16, 0) == pytest.approx((10 + 15 * 2 / 31) / 10)
    assert c(128, 0) == pytest.approx((16 + 64 * 4 / 32) / 10)   # past the last point: its slope


def test_fpga_draft_lanes_and_batch_passes():
    """The default design point fills the U280's memory channels: one lane; a batch-B pass streams the weights
    once, so it costs more than one sequence's pass and less than B of them."""
    from heterospec.hls.perf import Arch, Design, token_ms
    cfg = compose_config([])
    inputs = PricingInputs(models=compose_config(["models=config1"]).models, kind="paper", hls=cfg.hls,
                           max_context=2048)
    assert lanes_fit(hw_system("hetero_u280").draft, inputs) == 1
    arch, d = Arch.published("Qwen2.5-0.5B-Instruct"), Design.of(dict(cfg.hls.pipeline))
    board = hw_system("hetero_u280").draft
    one = token_ms(arch, 32, 128, board, 200.0, d, 512)[0]
    for b in (2, 4, 8):
        many = token_ms(arch, 32, 128, board, 200.0, d, 512, batch=b)[0]
        assert one < many < b * one


def test_measured_prices_batch_on_the_cpu_trio():
    """The serving executor's case: system cpu3 (the target yields to the PRM's core), the measured profile, batch
    prices measured as a pass costing 4 ms + 1 ms per sequence: a saturated target batches and serves more than
    batch 1 would; requests named by problem id."""
    from heterospec.replay.profiles.measured import MeasuredProfile
    profile = MeasuredProfile({("draft", "decode"): [0.5, 0.2, 0.0], ("prm", "score"): [1.0, 0.01, 0.0],
                               ("target", "decode"): [2.0, 5.0, 0.0]})
    rows = [dict(run="", device="cpu", device_name="test", role=role, phase=phase, batch=b, context=c, tokens=n,
                 ms=4.0 + 1.0 * b, ms_min=0.0, ms_max=0.0, repeats=1, dtype="float32")
            for role, phase in (("draft", "decode"), ("prm", "score"), ("target", "decode"))
            for b in (1, 2, 4, 8) for c in (32, 96) for n in (1, 8)]
    system = hw_system("cpu3")
    plan = plan_devices(system, DEFAULT_SETTINGS, PricingInputs(models=compose_config([]).models, kind="measured",
                                                              hls=compose_config([]).hls, batch_fit=fit_batch_prices(
                                                                  pa.Table.from_pylist(rows, schema=BATCH_PRICES_SCHEMA)),
                                                              max_context=200))
    probs = generated(20, seed=3)
    alone = [simulate_problem(p, "sequential", Ctx(profile, SystemParams.of(system)))[0] for p in probs]
    busiest = max(sum(m[f"busy_{d}_ms"] for m in alone) for d in ("draft", "prm", "target")) / len(probs)
    reqs = [(t, probs[i % len(probs)].problem) for i, t in enumerate(poisson_times(5e3 / busiest, 400, seed=5))]
    run = replay_requests(reqs, system, "sequential", profile, plan, problems=probs, warmup=100)
    assert run.point["batch_target"] > 1.5 or run.point["batch_prm"] > 1.5
    assert run.point["throughput_rps"] > 1.2e3 / busiest
    with pytest.raises(UserError, match="not in the steps"):
        replay_requests([(0.0, "nope")], system, "sequential", profile, plan, problems=probs)
