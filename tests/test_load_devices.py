"""The load replay's device plan for an FPGA draft and the PRM's batch curve (issue 51): lanes from every resource
and the memory channels, each lane's share of the board's bandwidth and its pace, the fpga_batch rule, the tokens a
PRM score reads and the published curve past its last point. Oracles are worked by hand from the datasheets
(conf/hardware/*.yaml) and constructed boards and problems."""
from __future__ import annotations

from dataclasses import replace

import pytest

from heterospec.config import compose_config
from heterospec.config.hardware import system as hw_system
from heterospec.errors import UserError
from heterospec.hls.resources import FPGA_RESOURCES, usage
from heterospec.replay.load.devices import (PricingInputs, hls_point, lane_share, lanes_fit, plan_devices,
                                            settings_of)
from heterospec.replay.load.prices import published_curve
from heterospec.replay.load.stage import prm_reads, prm_rescores, step_tokens
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.simulator.problem import TracedProblem

NO_MARGIN = [f"hls.shell_margin.{r}=0.0" for r in FPGA_RESOURCES]


@pytest.fixture(scope="module")
def cfg():
    return compose_config([])


@pytest.fixture(scope="module")
def config1():
    return compose_config(["models=config1"]).models


def _inputs(cfg, models, kind="paper", max_context=2048):
    return PricingInputs(models=models, kind=kind, hls=cfg.hls, max_context=max_context)


def _draft_plan(cfg, models, name, kind="paper", **settings):
    return plan_devices(hw_system(name), replace(settings_of(cfg.load), **settings), _inputs(cfg, models, kind))


def test_the_v80_has_two_lanes_at_pace_two_and_the_u280_one_at_pace_one(cfg, config1):
    """Default design point: 30 weight + 2 KV ports = 32 channels a lane. U280: 32 HBM channels -> 1 lane of
    32 x 14.375 = 460 GB/s, the whole board (pace 1). V80: 64 channels -> 2 lanes of 32 x 12.8125 = 410 GB/s each,
    half the board's 820 GB/s, so a lane's batch-1 pass takes 820 / 410 = 2 of the profile's batch-1 price."""
    v80 = _draft_plan(cfg, config1, "hetero_v80")
    assert (v80.bounds["draft"].lanes, v80.bounds["draft"].pace) == (2, 2.0)
    assert "lanes x2 at 410 GB/s each" in v80.notes["draft"] and "pace 2.00" in v80.notes["draft"]
    u280 = _draft_plan(cfg, config1, "hetero_u280")
    assert (u280.bounds["draft"].lanes, u280.bounds["draft"].pace) == (1, 1.0)
    assert "lanes x1 at 460 GB/s each" in u280.notes["draft"]
    assert v80.bounds["prm"].pace == u280.bounds["target"].pace == 1.0   # GPU roles run as the profile prices them


def test_under_the_hls_profile_a_v80_lane_keeps_its_pace(cfg, config1):
    """The HLS perf model already streams the V80's design point through its 32 ports, each at most one channel's
    12.8125 GB/s, whether the board has 64 channels or the lane's 32: the lane's pass is the board's (pace 1)."""
    share = lane_share(hw_system("hetero_v80").draft, _inputs(cfg, config1, "hls"))
    assert (share.channels, share.board_channels, share.gbs) == (32, 64, 410.0)
    assert share.pace == pytest.approx(1.0)


@pytest.mark.parametrize("resource", FPGA_RESOURCES)
def test_a_board_missing_a_resource_is_refused_in_one_line(cfg, config1, resource):
    v80 = hw_system("hetero_v80").draft
    board = replace(v80, fabric=replace(v80.fabric, **{resource: None}))
    with pytest.raises(UserError) as err:
        lanes_fit(board, _inputs(cfg, config1))
    msg = str(err.value)
    assert f"fpga.{resource} missing" in msg and "v80.yaml" in msg and "\n" not in msg


def _board(cfg, config1, channels: int, times: dict):
    """The V80 with ``channels`` HBM channels and each resource's total ``times[r]`` x the design point's use
    (10 x where not named); no shell margin, so a resource holds exactly floor(total / use) copies."""
    hw = hw_system("hetero_v80").draft
    inputs = _inputs(compose_config(NO_MARGIN), config1)
    arch, rows, cols, design = hls_point(hw, inputs)
    used = usage(arch, rows, cols, design, dict(cfg.hls.resources), hw.fabric.dsp_kind, 2048, hw)["total"]
    totals = {r: int(times.get(r, 10) * used[r]) for r in FPGA_RESOURCES}
    hbm = replace(hw.fabric.banks["hbm"], channels=channels)
    return replace(hw, fabric=replace(hw.fabric, banks={**hw.fabric.banks, "hbm": hbm}, **totals)), inputs


@pytest.mark.parametrize("channels, times, lanes", [
    (128, {}, 4),                      # 128 // 32 channels; every resource holds 10
    (96, {}, 3),
    (16, {}, 1),                       # more ports than channels: one lane sharing them
    (128, {"uram": 2.5}, 2),           # floor(2.5)
    (128, {"lut": 3.99, "dsp": 3}, 3),
    (64, {"bram36": 1}, 1),
    (128, {"ff": 0.5}, 0),             # not even one copy
])
def test_the_lane_count_is_the_fewest_over_resources_and_channels(cfg, config1, channels, times, lanes):
    board, inputs = _board(cfg, config1, channels, times)
    assert lanes_fit(board, inputs) == lanes


def test_fpga_batch_needs_the_hls_profile(cfg, config1):
    """A batch-B pass is the HLS design's pass(B) / pass(1): refused where the draft's batch-1 price is another
    design's (the paper's kernel, the roofline, the measured fit); under hls the curve is that ratio."""
    from heterospec.hls.perf import token_ms
    for kind in ("paper", "roofline", "measured"):
        with pytest.raises(UserError, match=r"load\.fpga_batch: 8 needs .*load\.profile=hls"):
            _draft_plan(cfg, config1, "hetero_u280", kind, fpga_batch=8)
    plan = _draft_plan(cfg, config1, "hetero_u280", "hls", fpga_batch=8)
    hw = hw_system("hetero_u280").draft
    arch, rows, cols, design = hls_point(hw, _inputs(cfg, config1, "hls"))
    one, eight = (token_ms(arch, rows, cols, hw, 200.0, design, 512, batch=b)[0] for b in (1, 8))
    assert plan.curves["draft"](8, 512) == pytest.approx(eight / one)
    assert "8 per pass" in plan.notes["draft"]


def _problem() -> TracedProblem:
    """Prompt 100; step 0 accepted (10 tokens from 0); step 1 rejected (20 drafted from 10, the target writes 25
    from 10, scored); step 2 accepted (30 from 35)."""
    return TracedProblem(dataset="t", problem="p", prompt_tokens=100, outcome=["accept", "backtrack", "accept"],
                         draft_tokens=[10, 20, 30], target_tokens=[0, 25, 0], kv_verify=[0, 10, 35],
                         kv_target=[0, 10, 35], path_tokens=[10, 35, 65])


def test_prm_tokens_are_what_a_score_reads():
    """Four scores: the three draft steps and the target's rewrite. Whole context: 10, 30, 35, 65 (mean 35), with
    the prompt 135; through a prefix cache only the new tokens: 10, 20, 25, 30 (mean 21.25)."""
    p = _problem()
    assert prm_reads(p, True, False) == [10, 30, 35, 65]
    assert step_tokens([p], whole_context=True) == 35.0
    assert step_tokens([p], whole_context=True, with_prompt=True) == 135.0
    assert step_tokens([p]) == 21.25
    unscored = replace(p, target_scored=[True, False, True])
    assert step_tokens([unscored], whole_context=True) == pytest.approx((10 + 30 + 65) / 3)


def test_which_profiles_rescore_the_whole_context(cfg):
    """The paper formulas re-read the whole context (prm(n) = a + b n of the context); roofline and hls read the
    new tokens through a prefix cache; the measured fit is by context."""
    assert prm_rescores(get_profile("paper_v12"), "paper")
    assert not prm_rescores(get_profile("roofline", system=hw_system("gpu3"), models=cfg.models), "roofline")
    assert prm_rescores(None, "paper") and prm_rescores(None, "measured")
    assert not prm_rescores(None, "roofline") and not prm_rescores(None, "hls")


def test_published_curve_past_its_last_point():
    """Points (1, 10 ms), (2, 12 ms): the last slope is 2 ms a token. Four sequences of one token: 12 + 2 x 5 = 22 ms
    at a compute cost of 5 ms a token (22 / 10), 12 + 2 x 2 = 16 ms when the slope is the larger (16 / 10); within
    the points, two sequences 12 / 10."""
    steep = published_curve([1, 2], [10.0, 12.0], 1.0, 0.0, 1.0, compute_ms_per_token=5.0)
    assert steep(4, 0.0) == pytest.approx(2.2)
    assert steep(2, 0.0) == pytest.approx(1.2)
    flat = published_curve([1, 2], [10.0, 12.0], 1.0, 0.0, 1.0, compute_ms_per_token=0.5)
    assert flat(4, 0.0) == pytest.approx(1.6)
    scaled = published_curve([1, 2], [10.0, 12.0], 0.5, 0.0, 1.0, compute_ms_per_token=0.5)
    assert scaled(4, 0.0) == pytest.approx((6.0 + 2 * 1.0) / 5.0)   # the scaled slope 1 ms beats 0.5
