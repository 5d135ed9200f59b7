"""The typed hardware model: a new board is one YAML file (plus a system file pairing it), read once into typed
devices; a V70-like DDR board in a temporary config folder runs the HLS model and a replay with no code change."""
from __future__ import annotations

import shutil
import sys

import pyarrow.parquet as pq
import pytest

from conftest import SHARED, heterospec, run_cmd
from heterospec.config import CONF_PATH_ENV, compose_config, group_entry
from heterospec.config.hardware import Device, System, device, system
from heterospec.errors import UserError

TRACES = SHARED / "heteroreason_ae" / "Hardware" / "inputs" / "Config1" / "with_bt" / "gaokao2023en"

# An Alveo V70-like inference card: DDR only, no HBM. From AMD's product brief: 75 W, 16 GB of DDR4. Assumed (not
# checked against a datasheet): the part number, the DSP and fabric totals, two 25.6 GB/s channels, the idle power,
# the 200 MHz kernel clock. It is written only into a temporary folder: never a default.
V70 = """\
name: v70
kind: fpga
clock_mhz: 200
power_active_w: 75
power_idle_w: 20
power_cap_w: 75
fpga:
  part: xcve2302-sfva784-1LP-e-S
  dsp: 464
  dsp_kind: dsp58
  lut: 150272
  ff: 300544
  bram36: 151
  uram: 64
  ddr: {type: ddr4, gb: 16, channels: 2, channel_gbs: 25.6}
  draft_lanes: 1
"""
HETERO_V70 = """\
defaults:
  - /hardware@draft: v70
  - /hardware@prm: rtx3090
  - /hardware@target: rtx3090
  - _self_
name: hetero_v70
link: {name: pcie_gen4_x8, bandwidth_gbs: 16.0, latency_us: 1.0}
"""


@pytest.fixture
def v70_conf(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    (conf / "hardware").mkdir(parents=True)
    (conf / "system").mkdir()
    (conf / "hardware" / "v70.yaml").write_text(V70)
    (conf / "system" / "hetero_v70.yaml").write_text(HETERO_V70)
    monkeypatch.setenv(CONF_PATH_ENV, str(conf))
    return conf


def test_a_ddr_board_is_one_yaml_file(v70_conf):
    v70 = device("v70")
    assert v70.memory.type == "ddr4" and v70.memory.gb == 16 and v70.memory.bandwidth_gbs == pytest.approx(51.2)
    assert v70.fabric.banks.keys() == {"ddr"} and v70.kernel_clocks() == [200.0]
    assert v70.peak_tflops["int8"] == pytest.approx(464 * 2 * 200e6 / 1e12)       # derived from the DSPs
    s = system("hetero_v70")
    assert (s.draft, s.target.name, s.link.name) == (v70, "rtx3090", "pcie_gen4_x8")
    cfg = compose_config(["system=hetero_v70", "system.draft.clock_mhz=250"])   # Hydra sees the folder too
    assert System.of(cfg.system).draft.kernel_clocks() == [250.0]
    assert device("v70", cfg).clock_mhz == 250 and device("v70").clock_mhz == 200  # the run's own carries overrides


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"{TRACES} absent (shared artifact)")
def test_a_ddr_board_runs_the_hls_model_and_a_replay(v70_conf, tmp_path):
    traces = tmp_path / "traces" / "with_bt" / "gaokao2023en"
    traces.mkdir(parents=True)
    for i in range(4):
        shutil.copy(TRACES / f"example_{i}.json", traces)
    env = {CONF_PATH_ENV: str(v70_conf)}
    o = ["experiment=ci", "name=v70", "models=config1", "hls.boards=[v70]", f"replay.traces={tmp_path / 'traces'}",
         "replay.trace_sets=[with_bt]", "replay.systems=[hetero_v70]", "replay.profiles=[hls]",
         "replay.schedules=[hetero]"]
    r = run_cmd([sys.executable, "-m", "heterospec.hls", "model", *o], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    perf = pq.read_table(tmp_path / "results" / "v70" / "hls" / "perf.parquet").to_pylist()
    qwen = [p for p in perf if p["model"] == "Qwen2.5-0.5B-Instruct"]
    assert {p["board"] for p in perf} == {"v70"} and {p["clock_mhz"] for p in qwen} == {200.0}
    # the DDR bounds it: 0.5 B int8 weights over 2 x 25.6 GB/s is ~9.7 ms per token, never beaten
    assert all(p["ms_per_token"] >= p["roofline_ms"] > 9.0 for p in qwen)
    for cmd in ("import", "run"):
        r = heterospec("replay", cmd, *o, *(["--trace-set", "with_bt"] if cmd == "import" else []), cwd=tmp_path,
                       env=env)
        assert r.returncode == 0, r.stderr
    res = pq.read_table(tmp_path / "results" / "v70" / "replay" / "results.parquet").to_pylist()
    assert len(res) == 4 and {(x["system"], x["profile"]) for x in res} == {("hetero_v70", "hls")}
    assert all(x["latency_ms"] > 0 for x in res)


def test_bad_or_missing_fields_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "hardware").mkdir()
    monkeypatch.setenv(CONF_PATH_ENV, str(tmp_path))
    (tmp_path / "hardware" / "x1.yaml").write_text(V70.replace("name: v70", "name: x1").replace("  dsp_kind: dsp58\n", ""))
    with pytest.raises(UserError, match=r"hardware/x1.yaml fpga: dsp_kind is missing"):
        device("x1")
    (tmp_path / "hardware" / "x2.yaml").write_text(V70.replace("name: v70", "name: x2").replace("channels: 2", "chanels: 2"))
    with pytest.raises(UserError, match=r"x2.yaml: .*chanels"):
        group_entry("hardware", "x2")
    (tmp_path / "hardware" / "x3.yaml").write_text(V70.replace("name: v70", "name: x3") + "bandwidth_gbs: 51.2\n")
    with pytest.raises(UserError, match=r"hardware/x3.yaml: bandwidth_gbs restate"):
        device("x3")
    with pytest.raises(UserError, match=r"'nope' is not a hardware config; choose one of \[.*'u280'"):
        device("nope")
    for d in (Device.of(group_entry("hardware", n)) for n in ("u280", "v80")):   # each fact once: derived, not stated
        assert d.memory.bandwidth_gbs == d.fabric.banks["hbm"].channels * d.fabric.banks["hbm"].channel_gbs


def test_kv_bytes_per_element_come_from_one_table():
    from heterospec.hls.perf import Arch, Design
    from heterospec.replay.profiles.role_shapes import PUBLISHED
    qwen = Arch(hidden=896, layers=24, heads=14, kv_heads=2, head_dim=64, intermediate=4864, vocab=151936)
    shape = PUBLISHED["qwen2.5-0.5b"]
    # the W8A8 draft's cache as the kernel stores it: int8 K and V, K's fp32 scale per token and head
    assert shape.kv_bytes_per_token("int8") == qwen.kv_bytes_per_token(Design(kv_bits=8)) == 24 * 2 * (2 * 64 + 4)
    assert shape.kv_bytes_per_token("fp16") == qwen.kv_bytes_per_token(Design(kv_bits=16)) == 12288
