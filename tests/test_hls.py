"""The HLS build of the draft: generated kernel compiled with g++ and simulated bit-exactly against the torch
int8 reference on 20 prompts, KVMU modes through the C model, the performance and resource models, the
vendor-flow skip, and one-line errors for bad input."""
from __future__ import annotations

import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from conftest import run_cmd
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.hls import stage as hls
from heterospec.hls.perf import Arch, check_parallelism, hbm, roofline_ms, token_ms
from heterospec.models.stage import prepare_role
from heterospec.paths import RunPaths
from heterospec.quantize.stage import quantize_draft

CI = ["experiment=ci", "eval_limit=4", "quantize.calibration_prompts=8"]
QWEN = Arch(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, intermediate=4864, vocab=151936)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = compose_config(CI)
    paths = RunPaths(tmp_path_factory.mktemp("hls") / "run")
    prepare_role(cfg, paths, "draft", CI, paths.model_manifest("draft"))
    quantize_draft(cfg, paths, CI, paths.quantized_draft, paths.quantize_quality)
    return cfg, paths


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_csim_is_bit_exact_on_20_prompts_and_kvmu_modes(run):
    cfg, paths = run
    m = hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"), CI)
    src = paths.hls_codegen("u280").parent
    assert {"draft_kernel.cpp", "draft_config.h", "hs_types.h", "weights_i8.bin"} <= {p.name for p in src.iterdir()}
    assert f"constexpr int HIDDEN = {m['arch']['hidden']};" in (src / "draft_config.h").read_text()
    rows = hls.csim(cfg, paths, "u280", paths.hls_codegen("u280"), paths.hls_csim("u280"), CI)
    greedy = [r for r in rows if r["scenario"] == "greedy"]
    assert len(greedy) == 20 and all(r["tokens_match"] for r in greedy)
    assert all(r["taps_match"] == r["taps_compared"] > 0 for r in greedy)      # every accumulator, bit for bit
    kv = {r["scenario"]: r for r in rows if r["scenario"] != "greedy"}
    assert set(kv) == {"kvmu_accept_rollback", "kvmu_reinit"} and all(r["bit_exact"] for r in kv.values())
    assert pq.read_table(paths.hls_csim("u280")).num_rows == 22


def test_model_tables_and_design_point(run):
    cfg, paths = run
    perf, breakdown, res = hls.model_tables(cfg, paths, paths.quantized_draft, CI)
    qwen = {(r["board"], r["clock_mhz"], r["context_len"]): r for r in perf if r["model"] == "Qwen2.5-0.5B-Instruct"}
    point = qwen[("u280", 200.0, 0)]
    assert abs(point["ms_per_token"] - 5.74) / 5.74 < 0.15                       # the paper's measured design point
    assert abs(point["roofline_ms"] - 1.07) < 0.02                              # REFERENCE.md's roofline
    assert qwen[("u280", 300.0, 0)]["ms_per_token"] < point["ms_per_token"]
    assert qwen[("u280", 200.0, 2048)]["ms_per_token"] > point["ms_per_token"]   # attention over the KV cache
    assert all(r["ms_per_token"] >= r["roofline_ms"] for r in perf)
    assert all(r["prefill_ms_per_token"] < r["ms_per_token"] for r in perf)     # prefill skips the LM head
    def parts(ctx):
        return {b["component"]: b["cycles"] for b in breakdown if b["model"] == "Qwen2.5-0.5B-Instruct"
                and b["board"] == "u280" and b["context_len"] == ctx and b["clock_mhz"] == 200.0}
    p0, p2k = parts(0), parts(2048)
    # only attention reads the KV cache: the other components do not change with the context, and attention
    # (q.k, softmax, p.v over context + 1 positions) grows exactly with context + 1
    assert {k: v for k, v in p0.items() if k != "attention"} == {k: v for k, v in p2k.items() if k != "attention"}
    assert p2k["attention"] == pytest.approx(2049 * p0["attention"], rel=1e-9)
    # the 8 x 64 array streams at most 512 int8 weights a cycle: Qwen2.5-0.5B's 494 M weights (per layer QKV
    # 1152 x 896, O 896 x 896, gate/up 2 x 4864 x 896, down 896 x 4864; the 151936 x 896 LM head) take longer
    weights = 24 * (1152 * 896 + 896 * 896 + 2 * 4864 * 896 + 896 * 4864) + 151936 * 896
    assert p0["weights"] >= weights / (8 * 64)
    assert p0["weights"] < 1.2 * weights / (8 * 64)        # ... the array is the bound at 200 MHz, not HBM
    u280 = [r for r in res if r["board"] == "u280" and r["model"] == "Qwen2.5-0.5B-Instruct"][0]
    assert u280["fits"] and 0 < u280["dsp_util"] < 1 and not u280["unchecked"]


def test_design_that_does_not_fit_is_reported(run):
    cfg, paths = run
    big = compose_config([*CI, "hls.design.rows=64", "hls.design.cols=128"])
    _, _, res = hls.model_tables(big, paths, None, CI)
    row = [r for r in res if r["board"] == "u280"][0]
    assert not row["fits"] and row["dsp"] > row["dsp_available"]


def test_vendor_flow_skips_clearly_without_tools(run, monkeypatch):
    cfg, paths = run
    if any(shutil.which(t) for t in cfg.hls.vendor_tools):
        pytest.skip("a vendor toolchain is installed here")
    if not paths.hls_codegen("u280").exists():
        hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"), CI)
    status = hls.vendor(cfg, paths, "u280", paths.hls_codegen("u280"), paths.hls_resources, paths.hls_vendor("u280"))
    assert status["status"] == "skipped" and "vendor toolchain not found, skipped" in status["reason"]
    assert json.loads(paths.hls_vendor("u280").read_text())["status"] == "skipped"


def test_perf_model_approaches_but_never_beats_the_roofline():
    board = compose_config(["hardware@system.draft=v80"]).system.draft
    ideal = {**dict(compose_config([]).hls.pipeline), "weight_ports": 63, "kv_ports": 1, "port_bits": 4096,
             "hbm_efficiency": 1.0, "stage_latency": 0, "token_overhead": 0, "vector_lanes": 1e9,
             "attention_macs": 1e9, "softmax_lanes": 1e9}
    roof = roofline_ms(QWEN, board, 0)
    ms, _ = token_ms(QWEN, 128, 896, board, 200, ideal, 0)      # every channel but the KV one streams weights
    assert roof < ms < roof * 64 / 63 * 1.01
    ms, _ = token_ms(QWEN, 128, 896, board, 200, {**ideal, "hbm_efficiency": 1.5}, 0)   # unphysical: clamped
    assert ms == roof


def test_bad_input_is_one_line():
    with pytest.raises(UserError, match="cols=48 does not divide the qkv engine's input size 896"):
        check_parallelism(QWEN, 8, 48, "hls.design")
    with pytest.raises(UserError, match="rows=3 does not divide"):
        check_parallelism(QWEN, 3, 64, "hls.design")
    with pytest.raises(UserError, match="no HBM figures"):
        hbm({"name": "ddr_board", "fpga": {"dsp": 100}})
    cpu = compose_config(["hardware@system.draft=cpu"]).system.draft
    with pytest.raises(UserError, match="no HBM figures"):
        hbm(cpu)


def test_missing_compiler_is_one_line(run, tmp_path):
    cfg, paths = run
    if not paths.hls_codegen("u280").exists():
        hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"), CI)
    r = run_cmd([sys.executable, "-m", "heterospec.hls", "csim", "--board", "u280", "--kernel",
                 str(paths.hls_codegen("u280")), "--out", str(tmp_path / "c.parquet"), *CI, "hls.cxx=no-such-g++"],
                cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'no-such-g++' not found" in r.stderr


def test_unknown_board_for_codegen_is_one_line(tmp_path):
    r = run_cmd([sys.executable, "-m", "heterospec.hls", "codegen", "--board", "cpu", "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no HBM figures" in r.stderr
