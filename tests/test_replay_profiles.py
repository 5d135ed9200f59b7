"""Paper latency profiles: the artifact's constants and closed forms."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from heterospec.errors import UserError
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.profiles.registry import get_profile, profile_names


def test_component_checks():
    v12, v11 = get_profile("paper_v12"), get_profile("paper_v11")
    assert v12.draft_decode(0, 10) == pytest.approx(57.53552, abs=1e-9)
    assert v12.prm_score(1000) == pytest.approx(209.29397, abs=1e-5)
    assert v11.draft_decode(0, 10) == pytest.approx(57.67104, abs=1e-9)
    assert v11.prm_score(1000) == pytest.approx(9.8, abs=1e-12)
    # comm(t) = t * 4 B / 16 GB/s; init(P) = a_pf + b_pf P + P * 12288 B / 16 GB/s (v12 only)
    assert v12.comm(1000) == pytest.approx(1000 * 4 / 16e9 * 1e3)
    assert v12.init(92) == pytest.approx(16.123062162697437 + 0.006210464885094716 * 92 + 92 * 12288 / 16e9 * 1e3)
    assert v12.init(0) == 0.0 and v11.init(500) == 0.0
    assert get_profile("paper_v11_config2").target_decode(0, 1) == pytest.approx(7.1 + 0.000017)


def test_unknown_profile_lists_valid_names():
    with pytest.raises(UserError) as ei:
        get_profile("paper_v13")
    for name in profile_names():
        assert name in str(ei.value)
    assert "paper_v12" in profile_names() and "paper_v11" in profile_names()


@settings(max_examples=60, deadline=None)
@given(kv=st.integers(0, 5000), n=st.integers(0, 300), name=st.sampled_from(["paper_v12", "paper_v11"]))
def test_closed_forms_equal_the_per_token_sums(kv, n, name):
    p = get_profile(name)
    c = p.c
    draft = sum(c.draft_alpha + c.draft_beta * (kv + i) for i in range(1, n + 1))
    target = c.target_pre_beta * kv + sum(c.target_alpha + c.target_gen_beta * (kv + i) for i in range(1, n + 1))
    assert p.draft_decode(kv, n) == pytest.approx(draft, rel=1e-12, abs=1e-9)
    assert p.target(kv, n) == pytest.approx(target, rel=1e-12, abs=1e-9)
    assert p.call("target", "decode", kv, n) + p.target_prefill(kv) == pytest.approx(target, rel=1e-12, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(kv=st.integers(0, 3000), ms=st.floats(0, 5000), cap=st.integers(0, 300), role=st.sampled_from(["draft", "target"]))
def test_tokens_within_is_the_largest_fitting_count(kv, ms, cap, role):
    p = get_profile("paper_v12")
    k = p.tokens_within(role, kv, ms, cap)
    assert k == LatencyProfile.tokens_within(p, role, kv, ms, cap)  # generic bisection agrees
    f = p.draft_decode if role == "draft" else p.target
    assert 0 <= k <= cap
    assert k == 0 or f(kv, k) <= ms
    assert k == cap or f(kv, k + 1) > ms
