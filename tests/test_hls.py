"""The HLS build of the draft: generated kernel compiled with g++ and simulated bit-exactly against the torch
int8 reference on 20 prompts, KVMU modes through the C model, the batch-B kernel against
batch 1 (sequences joining and leaving its slots), the performance and resource models, the
vendor-flow skip, and one-line errors for bad input."""
from __future__ import annotations

import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from conftest import copy_quantized, run_cmd
from heterospec.config import compose_config
from heterospec.config.hardware import Device, device
from heterospec.errors import UserError
from heterospec.hls import stage as hls
from heterospec.hls.perf import Arch, Design, check_parallelism, hbm, memory, roofline_ms, token_ms
from heterospec.hls.published import flightllm_check
from heterospec.hls.resources import fit_slrs, streams, usage

CI = ["experiment=ci", "eval_limit=4", "quantize.calibration_prompts=8"]
QWEN = Arch(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, intermediate=4864, vocab=151936)


@pytest.fixture(scope="module")
def run(trained_models, ci_quantized):
    """A run of its own holding the session's W8A8 export of the ci draft (the quantize stage's output)."""
    cfg, paths = trained_models.run(CI)
    copy_quantized(ci_quantized, paths)
    return cfg, paths


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_csim_is_bit_exact_on_20_prompts_and_kvmu_modes(run):
    cfg, paths = run
    m = hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    src = paths.hls_codegen("u280").parent
    assert {"draft_kernel.cpp", "draft_config.h", "hs_types.h", "weights_i8.bin"} <= {p.name for p in src.iterdir()}
    header = (src / "draft_config.h").read_text()
    assert f"constexpr int HIDDEN = {m['arch']['hidden']};" in header
    assert "#define HS_PORT_BITS 512" in header and "#define HS_DATAFLOW 1" in header   # the dataflow design point
    rows = hls.csim(cfg, paths, "u280", paths.hls_codegen("u280"), paths.hls_csim("u280"), CI)
    greedy = [r for r in rows if r["scenario"] == "greedy"]
    assert len(greedy) == 20 and all(r["tokens_match"] for r in greedy)
    assert all(r["taps_match"] == r["taps_compared"] > 0 for r in greedy)      # every accumulator, bit for bit
    kv = {r["scenario"]: r for r in rows if r["scenario"].startswith("kvmu")}
    assert set(kv) == {"kvmu_accept_rollback", "kvmu_reinit"} and all(r["bit_exact"] for r in kv.values())
    batch = {r["batch"]: r for r in rows if r["scenario"] == "batch"}
    assert sorted(batch) == [1, 2, 4, 8, 16]
    for b, r in batch.items():          # every row and accumulator of a batch-B pass equals the batch-1 kernel's
        assert r["bit_exact"] and r["weights_once"] and r["taps_match"] == r["taps_compared"] > 0, r
        assert r["max_sequences"] == b and r["sequences"] == 2 * b + 2   # full passes, and joins after leaves
    assert batch[16]["passes"] < batch[16]["tokens_in"] / 8                  # the weights shared by many
    assert pq.read_table(paths.hls_csim("u280")).num_rows == 27


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_a_batch_design_point_adds_its_kernel_and_runs_its_own_batch(run, tmp_path):
    """hls.kernel.batch = 8: the batch-1 sources unchanged, HS_BATCH in the header, the batch-B kernel beside them,
    and the C simulation runs that design's own 8-slot kernel against batch 1."""
    cfg, paths = run
    one = hls.codegen(cfg, paths, "u280", paths.quantized_draft, tmp_path / "b1" / "src" / "kernel.json")
    eight_cfg = cfg.copy()
    eight_cfg.hls.kernel.batch = 8
    eight = hls.codegen(eight_cfg, paths, "u280", paths.quantized_draft, tmp_path / "b8" / "src" / "kernel.json")
    b1, b8 = tmp_path / "b1" / "src", tmp_path / "b8" / "src"
    assert "batch" not in one and not (b1 / "draft_batch.cpp").exists() and "HS_BATCH" not in (b1 / "draft_config.h").read_text()
    assert eight["batch"] == 8 and eight["top"] == "draft::draft_step_batch"
    for name in ("draft_kernel.cpp", "draft_kernel.h", "hs_types.h", "tb.cpp", "weights_i8.bin", "weights_f32.bin"):
        assert (b1 / name).read_bytes() == (b8 / name).read_bytes(), name
    extra = set((b8 / "draft_config.h").read_text().splitlines()) - set((b1 / "draft_config.h").read_text().splitlines())
    assert [ln.split("//")[0].strip() for ln in extra] == ["#define HS_BATCH 8"]
    rows = hls.csim(eight_cfg, paths, "u280", b8 / "kernel.json", tmp_path / "csim.parquet", CI)
    batch = [r for r in rows if r["scenario"] == "batch"]
    assert [(r["batch"], r["max_sequences"], r["bit_exact"]) for r in batch] == [(8, 8, True)]


def test_batch_schedule_joins_and_leaves_by_hand():
    """Lengths 3, 1, 2 on two slots, the second opening a pass later: sequence 1 leaves after one command and
    sequence 2 joins its slot at the next pass while sequence 0 runs on."""
    from heterospec.hls.csim import batch_schedule
    seqs = [[("a",)] * 3, [("b",)], [("c",)] * 2]
    assert batch_schedule(seqs, 2, stagger=1) == [
        ("reset", 0), [(0, 0, 0)], ("reset", 1), [(0, 0, 1), (1, 1, 0)], ("reset", 1), [(0, 0, 2), (1, 2, 0)],
        [(1, 2, 1)]]


def test_weight_words_of_a_pass_by_hand():
    """8-byte words: qkv 4 x 8 = 32 B (4 words), o 16 B (2), gate/up 64 B (8), down 32 B (4) per layer; an LM head
    of 11 x 4 = 44 B takes 6 words, its tail padded."""
    from heterospec.hls.csim import weight_words
    a = dict(hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=11, layers=2)
    assert weight_words(a, 64) == 2 * (4 + 2 + 8 + 4) + 6


QWEN_WEIGHTS = 24 * (1152 * 896 + 896 * 896 + 2 * 4864 * 896 + 896 * 4864) + 151936 * 896


def _qwen(perf):
    return {(r["board"], r["clock_mhz"], r["context_len"]): r for r in perf if r["model"] == "Qwen2.5-0.5B-Instruct"}


def test_dataflow_design_point_uses_the_hbm_and_fits_every_slr(run):
    cfg, paths = run
    perf, breakdown, res = hls.model_tables(cfg, paths.quantized_draft)
    q = _qwen(perf)
    assert q[("u280", 200.0, 0)]["bandwidth_fraction"] >= 0.75 and q[("u280", 200.0, 512)]["bandwidth_fraction"] >= 0.65
    assert q[("u280", 200.0, 0)]["closes"] and q[("u280", 200.0, 0)]["design"] == "default"
    assert q[("u280", 200.0, 4096)]["bandwidth_fraction"] < 0.6     # long attention outruns the prefetch FIFOs
    assert abs(q[("u280", 200.0, 0)]["roofline_ms"] - 1.07) < 0.02                  # REFERENCE.md's roofline
    assert all(r["ms_per_token"] >= r["roofline_ms"] for r in perf)
    assert all(r["prefill_ms_per_token"] < r["ms_per_token"] for r in perf)     # prefill skips the LM head
    rows = [r for r in res if r["board"] == "u280" and r["model"] == "Qwen2.5-0.5B-Instruct"]
    assert [r["slr"] for r in rows] == ["device", "slr0", "slr1", "slr2"] and rows[0]["fits"]
    for r in rows[1:]:
        assert all(r[f"{k}_util"] < 0.8 for k in ("dsp", "lut", "ff", "bram36", "uram")), r
    assert rows[1]["uram"] > 0 and rows[2]["uram"] == 0                          # prefetch FIFOs beside the HBM ports
    assert "200 MHz: closes" in rows[0]["timing"]
    # the weight stream, counted by hand: Qwen2.5-0.5B's int8 weights (per layer QKV 1152 x 896, O 896 x 896,
    # gate/up 2 x 4864 x 896, down 896 x 4864; the 151936 x 896 LM head) over 30 ports of 64 bytes a cycle
    stream = {b["context_len"]: b["cycles"] for b in breakdown if b["model"] == "Qwen2.5-0.5B-Instruct"
              and b["board"] == "u280" and b["clock_mhz"] == 200.0 and b["component"] == "weights"}
    assert QWEN_WEIGHTS / (30 * 64) <= stream[0] < 1.05 * QWEN_WEIGHTS / (30 * 64) and stream[0] == stream[2048]


def test_serial_design_point_stays_available(run):
    cfg, paths = run
    old = compose_config([*CI, "hls=serial_u280"])
    perf, breakdown, res = hls.model_tables(old, None)
    q = _qwen(perf)
    point = q[("u280", 200.0, 0)]
    assert abs(point["ms_per_token"] - 5.74) / 5.74 < 0.15 and point["design"] == "serial_u280"   # the paper's point
    assert point["bandwidth_fraction"] < 0.25
    assert q[("u280", 300.0, 0)]["ms_per_token"] < point["ms_per_token"]
    assert q[("u280", 200.0, 2048)]["ms_per_token"] > point["ms_per_token"]   # attention over the KV cache
    new = _qwen(hls.model_tables(cfg, None)[0])
    assert new[("u280", 200.0, 512)]["ms_per_token"] < point["ms_per_token"] / 3

    def parts(ctx):
        return {b["component"]: b["cycles"] for b in breakdown if b["model"] == "Qwen2.5-0.5B-Instruct"
                and b["board"] == "u280" and b["context_len"] == ctx and b["clock_mhz"] == 200.0}
    p0, p2k = parts(0), parts(2048)
    # only attention reads the KV cache: the other components do not change with the context, and attention
    # (q.k, softmax, p.v over context + 1 positions) grows exactly with context + 1
    assert {k: v for k, v in p0.items() if k != "attention"} == {k: v for k, v in p2k.items() if k != "attention"}
    assert p2k["attention"] == pytest.approx(2049 * p0["attention"], rel=1e-9)
    # the serial point's 8 x 64 array takes at most 512 int8 weights a cycle: the array is the bound, not HBM
    assert QWEN_WEIGHTS / (8 * 64) <= p0["weights"] < 1.2 * QWEN_WEIGHTS / (8 * 64)


def test_design_that_does_not_fit_is_reported(run):
    cfg, paths = run
    big = compose_config([*CI, "hls.design.rows=64", "hls.design.cols=128"])
    _, _, res = hls.model_tables(big, None)
    rows = {r["slr"]: r for r in res if r["board"] == "u280"}
    assert not rows["device"]["fits"] and rows["slr0"]["dsp"] > rows["slr0"]["dsp_available"]
    assert rows["slr1"]["fits"]


def test_vendor_flow_skips_clearly_without_tools(run, monkeypatch):
    cfg, paths = run
    if any(shutil.which(t) for t in cfg.hls.vendor_tools):
        pytest.skip("a vendor toolchain is installed here")
    if not paths.hls_codegen("u280").exists():
        hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    status = hls.vendor(cfg, paths, "u280", paths.hls_codegen("u280"), paths.hls_resources, paths.hls_vendor("u280"))
    assert status["status"] == "skipped" and "vendor toolchain not found, skipped" in status["reason"]
    assert json.loads(paths.hls_vendor("u280").read_text())["status"] == "skipped"


def test_perf_model_approaches_but_never_beats_the_roofline():
    board = device("v80")
    ideal = {**dict(compose_config([]).hls.pipeline), "weight_ports": 63, "kv_ports": 1, "port_bits": 4096,
             "memory_efficiency": 1.0, "stage_latency": 0, "token_overhead": 0, "vector_lanes": 1e9,
             "attention_macs": 1e9, "softmax_lanes": 1e9, "crossing_cycles": 0}
    roof = roofline_ms(QWEN, board, 0)
    for dataflow in (True, False):
        ms, _ = token_ms(QWEN, 128, 896, board, 200, {**ideal, "dataflow": dataflow}, 0)   # all but one channel
        assert roof < ms < roof * 64 / 63 * 1.01
    ms, _ = token_ms(QWEN, 128, 896, board, 200, {**ideal, "memory_efficiency": 1.5}, 0)   # unphysical: clamped
    assert ms == roof


def test_precision_mlp_ports_and_memory_change_what_is_streamed():
    int8, int4 = Design(), Design(weight_bits=4, group_size=128, scale_bytes=2)
    assert QWEN.weight_bytes(int4) < 0.53 * QWEN.weight_bytes(int8)               # half the bytes plus group scales
    assert QWEN.kv_bytes_per_token(Design(kv_bits=16)) == 24 * 2 * 4 * 64           # fp16 K and V, no scales
    gelu = Arch(**{**QWEN.__dict__, "mlp": "gelu"})
    assert "up" in gelu.engines() and "gate_up" not in gelu.engines()
    assert gelu.weight_bytes() < QWEN.weight_bytes()
    u280 = device("u280")
    df = Design.of(dict(compose_config([]).hls.pipeline))
    serial = Design(**{**df.__dict__, "dataflow": False})
    for ctx in (0, 512, 4096):
        assert token_ms(QWEN, 32, 128, u280, 200, df, ctx)[0] < token_ms(QWEN, 32, 128, u280, 200, serial, ctx)[0]
    shared = Design(**{**df.__dict__, "ports": "shared", "weight_ports": 32, "kv_ports": 0})
    assert token_ms(QWEN, 32, 128, u280, 200, shared, 0)[0] < token_ms(QWEN, 32, 128, u280, 200, df, 0)[0]
    ddr = Design(**{**serial.__dict__, "memory": "ddr", "weight_ports": 1, "kv_ports": 1})
    assert memory(u280, "ddr") == (2, 19.2)
    ms, _ = token_ms(QWEN, 32, 128, u280, 200, ddr, 0)
    assert ms > QWEN.weight_bytes() / 19.2e9 * 1e3 > roofline_ms(QWEN, u280, 0, ddr) / 2


def test_flightllm_u280_figure_within_15_percent():
    check = flightllm_check(dict(compose_config([]).hls.pipeline), device("u280"))
    assert abs(check["measured_ms"] - 18.18) < 0.01 and check["clock_mhz"] == 225
    assert check["worst_error"] < 0.15
    assert all(p["roofline_ms"] < check["measured_ms"] for p in check["points"])


def test_flightllm_check_runs_under_the_serial_design():
    """The serial design point (no dataflow, no weight FIFO) is checked as a dataflow design with the default's FIFO
    depth, not refused ("dataflow: true needs prefetch_words >= 1")."""
    check = flightllm_check(dict(compose_config(["hls=serial_u280"]).hls.pipeline), device("u280"))
    assert [p["context_len"] for p in check["points"]] == [0, 512] and check["worst_error"] > 0


def test_slr_placement_prices_the_crossing():
    cfg = compose_config([])
    unit, u280 = dict(cfg.hls.resources), device("u280")
    near = Design.of(dict(cfg.hls.pipeline))
    far = Design(**{**near.__dict__, "slr_mv": 1})
    a, b = usage(QWEN, 32, 128, near, unit, "dsp48e2", 4096, u280), usage(QWEN, 32, 128, far, unit, "dsp48e2", 4096, u280)
    assert b["sll"][0] - a["sll"][0] == 30 * 512 - 8 * 128 - 32 * 32       # the weights cross, engine I/O no longer
    assert b["slrs"][0]["ff"] > a["slrs"][0]["ff"] - 81920                   # crossing registers stay in SLR0
    assert {s[0] for s in streams(32, 128, near, 0)} >= {"weights", "kv_read", "activations", "accumulators"}
    wide = Design(**{**near.__dict__, "port_bits": 256})
    w = usage(QWEN, 32, 128, wide, unit, "dsp48e2", 4096, u280)
    assert w["total"]["lut"] < a["total"]["lut"] and w["total"]["bram36"] < a["total"]["bram36"]   # width costs
    assert fit_slrs(usage(QWEN, 32, 128, near, unit, "dsp58", 4096, device("v80")), device("v80")) == []


def test_bad_input_is_one_line():
    with pytest.raises(UserError, match="cols=48 does not divide the qkv engine's input size 896"):
        check_parallelism(QWEN, 8, 48, "hls.design")
    with pytest.raises(UserError, match="rows=3 does not divide"):
        check_parallelism(QWEN, 3, 64, "hls.design")
    with pytest.raises(UserError, match="no HBM figures"):
        hbm(Device.of(dict(name="ddr_board", kind="fpga", power_active_w=1, power_idle_w=1, fpga=dict(
            dsp=100, dsp_kind="dsp58", ddr=dict(type="ddr4", gb=4, channels=1, channel_gbs=19.2)))))
    cpu = device("cpu")
    with pytest.raises(UserError, match="is a cpu, not an FPGA board"):
        hbm(cpu)
    with pytest.raises(UserError, match="unknown key"):
        Design.of({"port_width": 512})
    with pytest.raises(UserError, match="needs group_size"):
        Design.of({"weight_bits": 4})
    with pytest.raises(UserError, match="mlp='relu'"):
        Arch.of({**QWEN.__dict__, "mlp": "relu"})
    with pytest.raises(UserError, match="hls.kernel.batch"):
        compose_config(["experiment=ci", "hls.kernel.batch=0"])


def test_missing_compiler_is_one_line(run, tmp_path):
    cfg, paths = run
    if not paths.hls_codegen("u280").exists():
        hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    r = run_cmd([sys.executable, "-m", "heterospec.hls", "csim", "--board", "u280", "--kernel",
                 str(paths.hls_codegen("u280")), "--out", str(tmp_path / "c.parquet"), *CI, "hls.cxx=no-such-g++"],
                cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'no-such-g++' not found" in r.stderr


def test_unknown_board_for_codegen_is_one_line(tmp_path):
    r = run_cmd([sys.executable, "-m", "heterospec.hls", "codegen", "--board", "cpu", "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not an FPGA board" in r.stderr


def test_buys_prices_each_design_point_from_its_own_table():
    from heterospec.dfvg.faster_draft import _shift, perf_table
    new, old = perf_table(["experiment=ci"], "default"), perf_table(["experiment=ci"], "serial_u280")
    assert set(new["design"].to_pylist()) == {"default"} and set(old["design"].to_pylist()) == {"serial_u280"}
    assert sum(new["ms_per_token"].to_pylist()) < sum(old["ms_per_token"].to_pylist()) / 3
    import pyarrow as pa
    t = _shift(pa.table({"kv_draft": pa.array([3, 5], pa.int32())}), ["kv_draft"], 512)
    assert t["kv_draft"].to_pylist() == [515, 517] and t.schema.field("kv_draft").type == pa.int32()


def test_hls_and_replay_read_one_published_shape():
    """The HLS model's reference shape is the replay's published shape (heterospec.shapes), not a second copy."""
    from heterospec.replay.profiles.role_shapes import model_shape
    arch = Arch.published("Qwen2.5-0.5B-Instruct")
    hub = model_shape("draft", compose_config(["models=config1"]).models.draft)    # the paper's draft by its hub id
    assert (arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.intermediate, arch.vocab) == \
        (hub.hidden, hub.layers, hub.heads, hub.kv_heads, hub.intermediate, hub.vocab) == (896, 24, 14, 2, 4864, 151936)
    assert arch.head_dim == hub.head_dim == 64
    with pytest.raises(UserError, match="'LLaMA-9B' has no published shape"):
        Arch.published("LLaMA-9B")
