"""The resource model reads the U280's published per-SLR capacities and SLL budgets (what the shell leaves the
kernel), and they agree with AMD's published user budget; the V80 is slower than the U280 only with a design
sized for the U280."""
from __future__ import annotations

from dataclasses import replace

import pytest

from heterospec.config import compose_config
from heterospec.config.hardware import Device, device
from heterospec.errors import UserError
from heterospec.hls.perf import Arch, Design, port_rate, token_ms
from heterospec.hls.published import platform_check
from heterospec.hls.resources import FPGA_RESOURCES, fit, fit_slrs, usage

QWEN = Arch(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, intermediate=4864, vocab=151936)


@pytest.fixture(scope="module")
def cfg():
    return compose_config(["hardware@system.draft=u280"])


@pytest.fixture(scope="module")
def u280():
    return device("u280")


def test_each_slr_offers_what_the_platform_leaves(cfg, u280):
    unit, d = dict(cfg.hls.resources), Design.of(dict(cfg.hls.pipeline))
    u = usage(QWEN, 32, 128, d, unit, "dsp48e2", 4096, u280)
    rows = fit_slrs(u, u280)
    # SLR1 of the published platform: 364,800 LUT and 2,784 DSPs (an equal third would be 434,560 and 3,008)
    assert rows[1]["lut_available"] == 364800 and rows[1]["dsp_available"] == 2784
    assert rows[0]["dsp_util"] == pytest.approx(2048 / 2664)          # the shared 32x128 engine beside the HBM
    device = fit(u["total"], u280, dict(cfg.hls.shell_margin))
    for r in FPGA_RESOURCES:                                               # the device row is the sum of the SLRs
        assert device[f"{r}_available"] == sum(row[f"{r}_available"] for row in rows)
        assert all(row[f"{r}_available"] <= float(u280.fabric.total(r)) / 3 for row in rows)


def test_the_slr_figures_agree_with_amds_user_budget(u280):
    rows = {r["resource"]: r for r in platform_check(u280)}
    for r in ("lut", "ff", "bram36"):                                 # two publications, two platform versions
        assert abs(rows[r]["model"] / rows[r]["user_budget"] - 1) < 0.06, rows[r]
    # the pblocks leave out whole clock regions' DSP columns that Vivado's budget still counts
    assert rows["dsp"]["model"] < rows["dsp"]["user_budget"] < rows["dsp"]["device"]
    assert all(r["model"] < r["device"] or r["resource"] == "uram" for r in rows.values())


def test_slls_are_priced_against_what_the_shell_leaves(cfg, u280):
    unit = dict(cfg.hls.resources)
    far = replace(Design.of(dict(cfg.hls.pipeline)), slr_mv=1)            # weights cross SLR0 -> SLR1
    rows = fit_slrs(usage(QWEN, 32, 128, far, unit, "dsp48e2", 4096, u280), u280)
    assert rows[0]["sll_util"] == pytest.approx(rows[0]["sll"] / 16797)
    assert rows[1]["sll_util"] == 0 and rows[2]["sll_util"] is None


def test_a_short_slr_list_is_one_line(cfg):
    node = cfg.system.draft
    short = {**dict(node), "fpga": {**dict(node.fpga), "slr_available": list(node.fpga.slr_available)[:2]}}
    with pytest.raises(UserError, match="slr_available has 2 entries; expected one per SLR"):
        Device.of(short)


def test_the_v80_needs_its_own_design_point(cfg, u280):
    v80 = device("v80")
    d = Design.of(dict(cfg.hls.pipeline))
    # one V80 port (820 GB/s over 64) carries less than a U280 pseudo-channel: the U280 point streams slower there
    assert port_rate(d, v80, 200) < port_rate(d, u280, 200) == 64
    on_u280, _ = token_ms(QWEN, 32, 128, u280, 200, d, 0)
    on_v80, _ = token_ms(QWEN, 32, 128, v80, 200, d, 0)
    assert on_v80 > on_u280
    sized = replace(d, weight_ports=60, kv_ports=4, attention_macs=1024, softmax_lanes=64, vector_lanes=128)
    v80_sized, _ = token_ms(QWEN, 64, 128, v80, 200, sized, 0)
    assert v80_sized < 0.6 * on_u280
