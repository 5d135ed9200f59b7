"""Load-aware speculation (heterospec.reasoning.speculation_policy, heterospec.replay.load.admission): the policies'
decisions worked by hand, an admission in the load simulator against hand-counted queues, the static policy equal to
the speculative schedule request by request, and one-line errors for a bad policy setting."""
from __future__ import annotations

import pytest

from heterospec.arrivals import poisson_times
from heterospec.config.hardware import system as hw_system
from heterospec.errors import UserError
from heterospec.reasoning.speculation_policy import (SPECULATE, TARGET, Branch, DeviceView, Goodput, SystemView,
                                                     Threshold, make_policy)
from heterospec.replay.load import replay_requests, serial_plan
from heterospec.replay.load.admission import admission
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.schedules import get_schedule
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx, SystemParams

ONE_STEP = TracedProblem("synthetic", "one", 0, ["accept"], [20], [0], [0], [0], [20])
BRANCHES = {SPECULATE: Branch(100.0, {"draft": 10.0, "prm": 10.0, "target": 1.0}),
            TARGET: Branch(150.0, {"draft": 0.0, "prm": 0.0, "target": 1.0})}


def view(**waits) -> SystemView:
    return SystemView({d: DeviceView(*waits.get(d, (0, 0.0))) for d in ("draft", "prm", "target")})


def test_threshold_speculates_until_a_device_holds_more_than_its_limit():
    policy = Threshold({"draft": 3})
    assert policy.admit(view(draft=(3, 0.0)), BRANCHES) == SPECULATE
    assert policy.admit(view(draft=(4, 0.0)), BRANCHES) == TARGET
    assert policy.admit(view(target=(99, 0.0)), BRANCHES) == SPECULATE     # a device without a limit never counts


def test_goodput_takes_the_branch_with_the_least_expected_completion():
    """Speculating costs 100 ms + 10 draft and 10 PRM operations each waiting the devices' waits, + the target's;
    the target alone 150 ms + its one write's wait. Draft wait 4 ms: 140 < 150, speculate; 6 ms: 160 > 150, the
    target alone; a tie speculates; a long target queue costs both branches alike."""
    g = Goodput()
    assert g.admit(view(draft=(0, 4.0)), BRANCHES) == SPECULATE
    assert g.admit(view(draft=(0, 6.0)), BRANCHES) == TARGET
    assert g.admit(view(draft=(0, 2.5), prm=(0, 2.5)), BRANCHES) == SPECULATE      # 150 = 150
    assert g.admit(view(target=(0, 1000.0), draft=(0, 4.0)), BRANCHES) == SPECULATE


@pytest.mark.parametrize("name,limits,match", [
    ("fastest", None, r"load.speculation_policy.name: 'fastest'; expected one of \['static', 'threshold', 'goodput'\]"),
    ("threshold", {}, r"load.speculation_policy.limits: empty"),
    ("threshold", {"draft": 0}, r"load.speculation_policy.limits.draft: 0; expected a number of waiting operations > 0"),
    ("threshold", {"fpga": 2}, r"load.speculation_policy.limits.fpga: not a device"),
])
def test_a_bad_policy_setting_is_one_line(name, limits, match):
    with pytest.raises(UserError, match=match) as e:
        make_policy(name, limits)
    assert "\n" not in str(e.value)


def _admission(policy, profile, system):
    ctx = Ctx(profile, SystemParams.of(system))
    return admission(policy, get_schedule("sequential"), get_schedule("target_only"), [ONE_STEP], ctx)


def test_an_admission_sees_the_draft_queue_as_requests_arrive():
    """Six requests at once on one serial draft: each arrival adds its draft operation to the draft's queue before
    the next arrives (the devices start work only after every arrival of the instant). With a limit of 1 the first
    two see 0 and 1 waiting and speculate; the third sees 2 and goes to the target; so do the rest (the draft queue
    stays at 2, the target's writes queue elsewhere)."""
    system, profile = hw_system("hetero_u280"), get_profile("paper_v12")
    adm = _admission(make_policy("threshold", {"draft": 1}), profile, system)
    run = replay_requests([(0.0, ONE_STEP)] * 6, system, adm, profile, serial_plan())
    assert [r.branch for r in run.requests] == [SPECULATE] * 2 + [TARGET] * 4
    assert run.point["speculated_share"] == pytest.approx(2 / 6)
    rows = run.table(method="brsd_threshold").to_pylist()
    assert [r["branch"] for r in rows] == [SPECULATE] * 2 + [TARGET] * 4


def test_the_static_policy_is_the_speculative_schedule_request_by_request():
    system, profile = hw_system("hetero_u280"), get_profile("paper_v12")
    reqs = [(t, ONE_STEP) for t in poisson_times(20.0, 200, seed=3)]
    adm = _admission(make_policy("static"), profile, system)
    got = replay_requests(reqs, system, adm, profile, serial_plan())
    want = replay_requests(reqs, system, "sequential", profile, serial_plan())
    assert [r.latency for r in got.requests] == [r.latency for r in want.requests]
    assert {r.branch for r in got.requests} == {SPECULATE} and want.point["speculated_share"] is None


def test_goodput_leaves_the_draft_as_its_queue_grows():
    """Far below the draft's rate every request speculates; far above it most go to the target alone."""
    system, profile = hw_system("hetero_u280"), get_profile("paper_v12")
    adm = _admission(make_policy("goodput"), profile, system)
    draft_ms = profile.draft_decode(0, 20)   # the one step's draft write
    shares = []
    for rate in (0.05 * 1e3 / draft_ms, 5 * 1e3 / draft_ms):
        reqs = [(t, ONE_STEP) for t in poisson_times(rate, 400, seed=1)]
        shares.append(replay_requests(reqs, system, adm, profile, serial_plan(), warmup=100).point["speculated_share"])
    assert shares[0] == 1.0 and shares[1] < 0.5, shares
