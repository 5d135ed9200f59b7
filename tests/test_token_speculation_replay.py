"""The replay's token-level speculation (a target write in draft/verify rounds) against timelines worked out by
hand on a profile with round numbers, the draft device as one resource shared with the draft's own steps, and the
two engines agreeing on every schedule that speculates."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings

from heterospec.errors import UserError
from heterospec.replay.simulator.des import simulate_problem
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.simulator.system import Ctx, SystemParams, SpeculationParams
from test_replay_des import problems, system

SPEC = SpeculationParams(tau=2.5, draft_len=4)


class Round(LatencyProfile):
    """Round numbers: the draft 1 ms a token (0.5 to ingest), the PRM 2 ms a call, the target 10 ms a token and
    10 ms a verification pass (the default: one decode step), no context reads."""
    name = "round"

    def draft_decode(self, kv, n):
        return 1.0 * n

    def draft_prefill(self, kv, n):
        return 0.5 * n

    def prm_score(self, n, new=None):
        return 2.0

    def target_prefill(self, kv, new=None):
        return 0.0

    def target_decode(self, kv, g):
        return 10.0 * g


FREE_LINK = SystemParams("s", {"draft": 1.0, "prm": 1.0, "target": 1.0}, {"draft": 0.0, "prm": 0.0, "target": 0.0},
                         {"draft": "fpga", "prm": "gpu", "target": "gpu"}, math.inf, 0.0)


def rescue_then_accept() -> TracedProblem:
    """Step 0: the draft writes 5 tokens, rejected; the target writes 6. Step 1: the draft writes 3, accepted."""
    return TracedProblem("d", "p", 0, ["rescue", "accept"], [5, 3], [6, 0], [0, 6], [0, 6], [6, 9])


def test_a_rescue_in_rounds_by_hand():
    """Sequential: draft 0-5, PRM 5-7; the rescue, 6 tokens at tau 2.5 = 3 rounds of 4 drafted tokens: the draft
    device drafts 3 x 4 ms (7-19), the target verifies 3 x 10 ms (19-49); PRM on the rescue 49-51, then (nothing
    overlaps) the draft ingests its 6 tokens 51-54, drafts step 1 54-57, PRM 57-59. Plain decoding: the rescue 7-67,
    so 18 ms later: 77 ms."""
    prob = rescue_then_accept()
    plain, _ = simulate_problem(prob, "sequential", Ctx(Round(), FREE_LINK, speculation=SPEC))
    sd, ops = simulate_problem(prob, "sequential_sd", Ctx(Round(), FREE_LINK, speculation=SPEC))
    assert plain["latency_ms"] == pytest.approx(77.0)
    assert sd["latency_ms"] == pytest.approx(59.0)
    spans = {(o.kind, o.res): (o.start, o.end) for o in ops if o.kind in ("sd_draft", "rewrite")}
    assert spans == {("sd_draft", "draft"): (7.0, 19.0), ("rewrite", "target"): (19.0, 49.0)}
    assert sd["busy_draft_ms"] == pytest.approx(5 + 12 + 3 + 3)     # its steps, the rounds' drafts, the ingest


def test_the_target_alone_in_rounds_by_hand():
    """9 tokens: plain 90 ms; at tau 2.5, 4 rounds of 4 drafted tokens: 16 ms drafting + 40 ms verifying."""
    prob = rescue_then_accept()
    ctx = Ctx(Round(), FREE_LINK, speculation=SPEC)
    assert simulate_problem(prob, "target_only", ctx)[0]["latency_ms"] == pytest.approx(90.0)
    assert simulate_problem(prob, "target_sd", ctx)[0]["latency_ms"] == pytest.approx(56.0)
    # a draft that guesses nothing (tau 1: only the target's own token per round) makes speculation a loss
    slow = Ctx(Round(), FREE_LINK, speculation=SpeculationParams(tau=1.0, draft_len=4))
    assert simulate_problem(prob, "target_sd", slow)[0]["latency_ms"] == pytest.approx(9 * (4 + 10))


STEP_AHEAD_SD = {"name": "x", "prefetch": True, "partial_cache": True, "draft_pipeline": True, "token_speculation": True}


def test_drafting_for_the_target_waits_for_the_draft_device():
    """The artifact's v12 window: the target works on a rejected step from the start of its draft. Plainly it runs
    beside the draft's own step; speculated from the start (speculative_prefetch), its drafting needs the draft
    device, busy with that very step, and queues behind it. By default the window decodes plainly until the verdict
    and speculates the rest after it."""
    prob = rescue_then_accept()
    ctx = Ctx(get_profile("paper_v12"), system(), recorded=True, speculation=SPEC)
    _, plain_ops = simulate_problem(prob, "step_ahead", ctx)
    _, eager_ops = simulate_problem(prob, {**STEP_AHEAD_SD, "speculative_prefetch": True}, ctx)
    _, lazy_ops = simulate_problem(prob, STEP_AHEAD_SD, ctx)
    draft0 = next(o for o in eager_ops if o.kind == "draft")
    window = next(o for o in plain_ops if o.kind == "prefetch" and o.res == "target")
    assert window.start == pytest.approx(draft0.start)           # plain: beside the draft's own step
    eager = next(o for o in eager_ops if o.kind == "sd_draft")
    assert eager.start >= draft0.end - 1e-9                      # speculated: after it, on the same device
    lazy_window = next(o for o in lazy_ops if o.kind == "prefetch" and o.res == "target")
    verdict = next(o for o in lazy_ops if o.kind == "verify")
    lazy = next(o for o in lazy_ops if o.kind == "sd_draft")
    assert lazy_window.start == pytest.approx(draft0.start) and lazy_window.end <= verdict.end + 1e-9
    assert lazy.start >= verdict.end - 1e-9


def test_speculating_schedules_need_the_numbers():
    with pytest.raises(UserError, match="replay.token_speculation"):
        simulate_problem(rescue_then_accept(), "hetero_sd", Ctx(Round(), FREE_LINK))
    with pytest.raises(UserError, match="tau=0.5, expected >= 1"):
        SpeculationParams(tau=0.5, draft_len=4)


CTX = Ctx(get_profile("paper_v12"), system(), speculation=SPEC)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prob=problems())
def test_engines_agree_and_speculation_only_changes_target_writes(prob):
    for s in ("sequential_sd", "step_ahead_sd", "hetero_sd", "target_sd", "target_only"):
        fast, ops_f = simulate_problem(prob, s, CTX, "fast")
        slow, ops_s = simulate_problem(prob, s, CTX, "simpy")
        assert fast["latency_ms"] == pytest.approx(slow["latency_ms"], rel=1e-9, abs=1e-9), s
        assert fast["latency_ms"] >= fast["lower_bound_ms"] - 1e-9
    # with nothing rejected there is no target write to speculate
    if all(o == "accept" for o in prob.outcome):
        for s in ("sequential", "step_ahead", "hetero"):
            assert simulate_problem(prob, f"{s}_sd", CTX)[0]["latency_ms"] == \
                pytest.approx(simulate_problem(prob, s, CTX)[0]["latency_ms"])
