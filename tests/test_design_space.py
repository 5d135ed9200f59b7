"""The FPGA draft's design space under load (heterospec.replay.load.design_space) on the artifact's gsm8k Config1
traces: the design points sized by hand, the paper's kernel at B = 1 against the load stage's own search, the table,
view and figure, and bad input stopped with one line before anything runs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import artifact_run
from heterospec.config import compose_config
from heterospec.config.hardware import device
from heterospec.errors import UserError
from heterospec.replay.load.design_space import run_design_space, size_engine
from heterospec.replay.load.devices import PricingInputs
from heterospec.replay.load.stage import _config1_models, run_stage

SMALL = ["replay.datasets=[gsm8k]", "design_space.requests=30", "design_space.max_requests=60",
         "design_space.search_steps=2", "design_space.boards=[u280]", "design_space.methods=[rsd]",
         "design_space.kernels=[paper,ours]", "design_space.batches=[1,4]", "design_space.fpgas=[1,2]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run with the artifact's gsm8k traces imported (both trace sets), in a scratch folder."""
    return artifact_run(tmp_path_factory, "ds_test", SMALL)


def _inputs(context: int = 600) -> PricingInputs:
    return PricingInputs(models=_config1_models(), kind="paper", hls=compose_config([]).hls, max_context=context)


def test_design_points_sized_by_hand():
    """Qwen2.5-0.5B's engine (hls.design 32 x 128 int8 MACs): on the U280 two packed MACs a DSP48E2, so 64 rows would
    need 64 x 128 / 2 = 4,096 DSPs in SLR0, which leaves the kernel 2,664: the engine stays 32 x 128 at every B. The
    V80's DSP58 take three, 64 rows need 2,731 of its 10,848, so a batch-16 pass (MAC-bound at 32 rows) takes the
    bigger engine; B = 1 (weight-bound) keeps hls.design."""
    u280, v80 = device("u280"), device("v80")
    for b in (1, 4, 16):
        e = size_engine(u280, b, _inputs(), "sized")
        assert (e.rows, e.cols, e.lanes) == (32, 128, 1)
        assert e.dsp >= 32 * 128 // 2
    assert size_engine(v80, 1, _inputs(), "sized").rows == 32
    big = size_engine(v80, 16, _inputs(), "sized")
    assert big.rows >= 64 and big.dsp >= 64 * 128 // 3
    assert size_engine(v80, 16, _inputs(), "fixed").rows == 32


def test_a_batch_whose_kv_does_not_fit_is_one_line():
    """Two KV pseudo-channels of the U280 hold 2 x 8 GB / 32 = 0.5 GB; Qwen2.5-0.5B's int8 KV is 24 layers x 2 heads
    x (64 + 4-byte scale for K, 64 for V) = 6,336 bytes a token, so 16 sequences of 8,192 tokens need 0.83 GB."""
    with pytest.raises(UserError) as e:
        size_engine(device("u280"), 16, _inputs(8192), "fixed")
    assert "design_space.batches" in str(e.value) and "\n" not in str(e.value)
    size_engine(device("u280"), 8, _inputs(8192), "fixed")   # 0.42 GB: fits


def test_sweep_writes_every_point_and_the_paper_kernel_matches_the_load_stage(run, monkeypatch, tmp_path):
    root, paths, over = run
    table = run_design_space(compose_config(over), paths, over)
    rows = table.to_pylist()
    ref = [r for r in rows if r["kernel"] == "gpu"]
    pts = [r for r in rows if r["kernel"] != "gpu"]
    assert [r["method"] for r in ref] == ["rsd"] and len(pts) == 2 * 2 * 2   # kernels x B x FPGAs
    for r in pts:
        assert r["power_w"] == r["fpgas"] * 60 + 2 * 349                     # conf/hardware: U280 60 W, 3090 349 W
        assert r["price_usd"] is None and r["capacity_per_kusd"] is None     # the U280 has no sourced list price
        assert r["capacity_rps"] <= r["limit_rps"]
        assert math.isclose(r["capacity_per_kw"], r["capacity_rps"] / r["power_w"] * 1e3)
        assert r["reference_rps"] == next(x["capacity_rps"] for x in ref if x["method"] == "rsd")
        # two bisections resolve a capacity to 2^(1/4) = 1.189: within that of the reference is reaching it
        assert r["reaches"] == (r["capacity_rps"] * 2 ** 0.25 >= r["reference_rps"] > 0)
    by = {(r["kernel"], r["batch"], r["fpgas"]): r for r in pts}
    # the paper's kernel at B = 1 on one FPGA is the load stage's hetero_u280 (same traces, SLO, search, seed)
    load = ["load.systems=[gpu3,hetero_u280]", "load.methods=[target,rsd]", "load.requests=30",
            "load.max_requests=60", "load.search_steps=2", "load.seeds=1", "load.curve=[]"]
    cap = {(c["system"], c["method"]): c for c in run_stage(compose_config([*over, *load]), paths,
                                                            [*over, *load]).to_pylist()}
    assert by["paper", 1, 1]["capacity_rps"] == cap["hetero_u280", "rsd"]["capacity_rps"]
    assert by["paper", 1, 1]["limit_rps"] == pytest.approx(cap["hetero_u280", "rsd"]["limit_rps"])
    assert next(x for x in ref if x["method"] == "rsd")["capacity_rps"] == cap["gpu3", "rsd"]["capacity_rps"]
    # a second FPGA doubles the draft's lanes, so a draft-bound hard limit doubles
    for kernel, b in (("paper", 1), ("ours", 1), ("paper", 4), ("ours", 4)):
        one, two = by[kernel, b, 1], by[kernel, b, 2]
        if one["limit_device"] == "draft" == two["limit_device"]:
            assert two["limit_rps"] == pytest.approx(2 * one["limit_rps"])
        assert two["limit_rps"] >= one["limit_rps"] * (1 - 1e-9)
    # the paper's kernel at B = 1: paper_v12's 5.74 ms a token + 0.002464 ms per context token (at half the longest
    # context: a whole number of tokens); ours the HLS model's, several times faster
    context = (by["paper", 1, 1]["pass1_ms"] - 5.74) / 0.002464
    assert context == pytest.approx(round(context), abs=1e-6) and 0 < context < 4096
    assert by["ours", 1, 1]["pass1_ms"] < 2.0 and by["ours", 4, 1]["passb_ms"] > by["ours", 4, 1]["pass1_ms"]
    assert by["paper", 4, 1]["passb_ms"] / by["paper", 4, 1]["pass1_ms"] == \
        pytest.approx(by["ours", 4, 1]["passb_ms"] / by["ours", 4, 1]["pass1_ms"])
    lines = list(dict.fromkeys(r["answer"] for r in rows if r["answer"]))
    assert [x.split(":")[0] for x in lines] == ["no_bt, RSD on u280, paper kernel", "no_bt, RSD on u280, ours kernel"]
    assert all(r["answer"] is None for r in ref) and all(r["answer"].startswith(f"no_bt, RSD on u280, {r['kernel']}")
                                                          for r in pts)
    from heterospec.report.__main__ import draw
    from heterospec.store.catalog import build
    monkeypatch.chdir(root)
    db = Path("results") / "heterospec.duckdb"
    assert "load_design_space_summary" in set(build(db, Path(".")))
    draw("load_design_space", "ds_test", tmp_path, db)
    assert (tmp_path / "load_design_space.png").stat().st_size > 10_000


@pytest.mark.parametrize("override, key", [
    ("design_space.batches=[0]", "design_space.batches"),
    ("design_space.batches=[4096]", "design_space.batches"),
    ("design_space.kernels=[tpu]", "design_space.kernels"),
    ("design_space.metrics=[capacity,per_dollar]", "price_usd"),
    ("design_space.boards=[rtx3090]", "design_space.boards"),
    ("design_space.engine=huge", "design_space.engine"),
    ("load.profile=roofline", "load.profile"),
])
def test_bad_design_space_settings_are_one_line_before_anything_runs(run, override, key):
    root, paths, over = run
    paths.load_design_space.unlink(missing_ok=True)
    with pytest.raises(UserError) as e:
        run_design_space(compose_config([*over, override]), paths, [*over, override])
    assert "\n" not in str(e.value) and key in str(e.value), str(e.value)
    assert not paths.load_design_space.exists()


def test_a_price_on_every_device_gives_capacity_per_dollar(run):
    """With a quoted price for the U280 (design_space.prices_usd), every point has capacity per thousand dollars:
    the U280's and two RTX 3090s' at their launch list price (conf/hardware/rtx3090.yaml)."""
    root, paths, over = run
    more = [*over, "design_space.metrics=[capacity,per_watt,per_dollar]", "design_space.kernels=[ours]",
            "design_space.batches=[1]", "design_space.fpgas=[1,2]", "+design_space.prices_usd.u280=7000"]
    rows = run_design_space(compose_config(more), paths, more).to_pylist()
    by = {r["fpgas"]: r for r in rows}
    assert by[0]["price_usd"] == 3 * 1499
    assert by[1]["price_usd"] == 7000 + 2 * 1499 and by[2]["price_usd"] == 2 * 7000 + 2 * 1499
    for r in rows:
        assert r["capacity_per_kusd"] == pytest.approx(r["capacity_rps"] / r["price_usd"] * 1e3)
