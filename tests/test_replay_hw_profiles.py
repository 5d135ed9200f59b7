"""Hardware-derived and fitted latency profiles: roofline, hls, measured; model shapes."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from heterospec.config import compose_config
from heterospec.config.hardware import System
from heterospec.errors import UserError
from heterospec.replay.profiles.measured import MEASURED_FIT_SCHEMA, MeasuredProfile, fit_calls
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.profiles.roofline import Roofline
from heterospec.replay.profiles.role_shapes import PUBLISHED
from heterospec.replay.simulator.steps import MODEL_CALLS_SCHEMA


@pytest.fixture(scope="module")
def systems():
    return {s: compose_config([f"system={s}", "models=config1"]) for s in ("gpu3", "hetero_u280", "hetero_v80")}


def roofline(cfg):
    return get_profile("roofline", system=System.of(cfg.system), models=cfg.models)


def test_published_shapes_have_the_published_sizes():
    assert PUBLISHED["qwen2.5-0.5b"].params == pytest.approx(0.494e9, rel=2e-3)
    assert PUBLISHED["qwen2.5-1.5b"].params == pytest.approx(1.544e9, rel=2e-3)
    assert PUBLISHED["qwen2.5-7b"].params == pytest.approx(7.616e9, rel=2e-3)
    assert PUBLISHED["qwen2.5-0.5b"].kv_bytes_per_token("fp16") == 12288   # the artifact's draft KV bytes/token


def test_roofline_matches_the_reference_decode_bounds(systems):
    # REFERENCE: W8A8 Qwen2.5-0.5B reads ~494 MB/token: ~1.07 ms on U280 HBM, ~0.60 ms on V80
    u280, v80, gpu3 = (roofline(systems[s]) for s in ("hetero_u280", "hetero_v80", "gpu3"))
    assert u280.draft_decode(0, 1) == pytest.approx(1.07, rel=0.03)
    assert v80.draft_decode(0, 1) == pytest.approx(0.60, rel=0.03)
    # gpu3 runs the fp16 draft on a 3090 (936 GB/s): ~988 MB per token
    assert gpu3.draft_decode(0, 1) == pytest.approx(0.988e9 / 936e9 * 1e3 + 0.03, rel=0.02)
    # the same PRM and target on every system; prefill is compute-bound: 2 * 6.54e9 FLOPs/token at 71 TFLOPS
    assert u280.prm_score(1000) == gpu3.prm_score(1000)
    assert gpu3.prm_score(1000) == pytest.approx(2 * 6.538e9 * 1000 / 71e12 * 1e3, rel=0.05)
    # the systems now differ in latency, not only in energy
    assert len({round(p.draft_decode(500, 100), 6) for p in (u280, v80, gpu3)}) == 3


@settings(max_examples=60, deadline=None)
@given(kv=st.integers(0, 20000), n=st.integers(0, 200), w=st.floats(0, 5), k=st.floats(0, 1e-3),
       f=st.floats(0, 5), a=st.floats(0, 1e-3))
def test_decode_closed_form_is_the_sum_of_single_token_passes(kv, n, w, k, f, a):
    r = Roofline(weight_ms=w, kv_ms=k, flop_ms=f, attn_ms=a, overhead_ms=0.01)
    assert r.decode(kv, n) == pytest.approx(sum(r.forward(kv + i, 1) for i in range(n)), rel=1e-9, abs=1e-9)


def test_roofline_needs_the_peak_of_the_models_precision():
    cfg = compose_config(["system=cpu3", "models=config1"])   # fp16 models on a CPU config with fp32/int8 peaks
    with pytest.raises(UserError, match=r"hardware 'cpu' has no peak_tflops.fp16") as ei:
        roofline(cfg)
    assert "\n" not in str(ei.value)
    tiny = compose_config(["system=cpu3"])                     # the tiny trio in fp32 works
    assert roofline(tiny).draft_decode(0, 10) > 0


def _perf(path, rows):
    cols = {k: [r[i] for r in rows] for i, k in enumerate(["board", "clock_mhz", "model", "context_len",
                                                          "ms_per_token", "prefill_ms_per_token"])}
    t = pa.table(cols, schema=pa.schema([("board", pa.string()), ("clock_mhz", pa.float64()), ("model", pa.string()),
                                         ("context_len", pa.int32()), ("ms_per_token", pa.float64()),
                                         ("prefill_ms_per_token", pa.float64())]))
    pq.write_table(t, path)
    return path


def test_hls_profile_reads_the_draft_latency_table(systems, tmp_path):
    m = "Qwen2.5-0.5B-Instruct"
    path = _perf(tmp_path / "perf.parquet", [("u280", 200.0, m, 0, 5.0, 1.0), ("u280", 200.0, m, 1000, 6.0, None),
                                             ("u280", 300.0, m, 0, 3.5, 0.7), ("v80", 200.0, m, 0, 3.0, 0.6)])
    cfg = systems["hetero_u280"]
    p = get_profile("hls", system=System.of(cfg.system), models=cfg.models, perf=path)
    # linear between context 0 and 1000: token at context c costs 5 + c/1000 ms
    assert p.draft_decode(0, 2) == pytest.approx(5.001 + 5.002)
    assert p.draft_decode(999, 3) == pytest.approx(5.0 + 1000e-3 + 5.0 + 1001e-3 + 5.0 + 1002e-3)  # extrapolated
    assert p.draft_prefill(0, 1) == pytest.approx(1.0 + (6.0 - 1.0) * 1 / 1000)  # null prefill -> ms_per_token
    assert p.prm_score(500) == roofline(cfg).prm_score(500)       # everything else is the roofline's
    gpu = systems["gpu3"]                                          # no FPGA draft: the roofline's draft
    assert get_profile("hls", system=System.of(gpu.system), models=gpu.models, perf=path).draft_decode(0, 5) == \
        roofline(gpu).draft_decode(0, 5)
    with pytest.raises(UserError, match="no HLS performance table"):
        get_profile("hls", system=System.of(cfg.system), models=cfg.models, perf=tmp_path / "absent.parquet")
    at_300 = compose_config(["system=hetero_u280", "models=config1", "hardware@system.draft=u280",
                             "system.draft.clock_mhz=250"])
    with pytest.raises(UserError, match=r"no rows for 'u280' at its configured 250.0 MHz"):
        get_profile("hls", system=System.of(at_300.system), models=at_300.models, perf=path)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"board": ["u280"]}), bad)
    with pytest.raises(UserError, match="column 'clock_mhz' missing"):
        get_profile("hls", system=System.of(cfg.system), models=cfg.models, perf=bad)


TRUE = {("draft", "decode"): [0.4, 2.0, 0.001, 2e-5], ("draft", "prefill"): [0.3, 0.05, 0.0002, 1e-6],
        ("prm", "score"): [1.5, 0.02, 4e-6], ("target", "decode"): [0.8, 6.0, 0.002, 5e-5]}


def synthetic_calls(n_problems=60, noise=0.03, seed=0) -> pa.Table:
    """Model calls of a sequential run whose wall times follow TRUE's coefficients, plus multiplicative noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for prob in range(n_problems):
        prompt = int(rng.integers(20, 60))
        k = 0
        rows.append(dict(dataset="synthetic", problem=str(prob), step_idx=-1, call_idx=k, role="draft", phase="prefill",
                         tokens_in=prompt, tokens_out=0, kv_len=0, outcome="accept"))
        kv = prompt
        for step in range(int(rng.integers(3, 8))):
            d = int(rng.integers(5, 40))
            out = rng.choice(["accept", "accept", "rescue"])
            for role, phase, tin, tout, kvl in [("draft", "decode", 0, d, kv), ("prm", "score", kv + d, 0, 0)]:
                k += 1
                rows.append(dict(dataset="synthetic", problem=str(prob), step_idx=step, call_idx=k, role=role,
                                 phase=phase, tokens_in=tin, tokens_out=tout, kv_len=kvl, outcome=out))
            if out == "accept":
                kv += d
                continue
            t = int(rng.integers(5, 40))
            for role, phase, tin, tout, kvl in [("target", "decode", 0, t, kv), ("prm", "score", kv + t, 0, 0),
                                                ("draft", "prefill", t, 0, kv)]:
                k += 1
                rows.append(dict(dataset="synthetic", problem=str(prob), step_idx=step, call_idx=k, role=role,
                                 phase=phase, tokens_in=tin, tokens_out=tout, kv_len=kvl, outcome=out))
            kv += t
    true = MeasuredProfile(TRUE)
    for r in rows:
        ms = true.call(r["role"], r["phase"], r["kv_len"], r["tokens_out"] if r["phase"] == "decode" else r["tokens_in"])
        r["wall_ms"] = ms * float(rng.lognormal(0.0, noise))
    return pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)


def test_measured_fit_recovers_known_coefficients():
    fit = {(r["role"], r["phase"]): r for r in fit_calls(synthetic_calls()).to_pylist()}
    assert set(fit) == set(TRUE)
    for key, r in fit.items():
        assert r["r2"] > 0.97, key
        assert r["mape"] < 0.05, key
    prof = MeasuredProfile.from_fit(fit_calls(synthetic_calls()))
    true = MeasuredProfile(TRUE)
    for kv, n in [(30, 10), (80, 20), (200, 30)]:   # inside the traces' range
        assert prof.draft_decode(kv, n) == pytest.approx(true.draft_decode(kv, n), rel=0.05)
        assert prof.target_decode(kv, n) == pytest.approx(true.target_decode(kv, n), rel=0.05)
        assert prof.prm_score(kv + n) == pytest.approx(true.prm_score(kv + n), rel=0.05)


def test_measured_fit_errors_are_one_line():
    calls = synthetic_calls(5)
    with pytest.raises(UserError, match="no model calls with a measured wall_ms"):
        fit_calls(calls.set_column(calls.schema.get_field_index("wall_ms"), "wall_ms",
                                   pa.nulls(calls.num_rows, pa.float64())))
    # a draft whose calls get *faster* with more tokens: the fit cannot follow (no negative coefficient), so it
    # cannot predict a negative latency for longer calls either
    rows = calls.to_pylist()
    for r in rows:
        if (r["role"], r["phase"]) == ("draft", "decode"):
            r["wall_ms"] = 50.0 - 2.0 * r["tokens_out"]
    fit = {(r["role"], r["phase"]): r for r in fit_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)).to_pylist()}
    assert min(fit[("draft", "decode")]["coefficients"]) >= 0
    assert MeasuredProfile.from_fit(pa.Table.from_pylist(list(fit.values()), schema=MEASURED_FIT_SCHEMA)).draft_decode(900, 500) > 0
    # a fit file edited by hand: one line when a call would cost less than nothing
    prof = MeasuredProfile({**TRUE, ("target", "decode"): [-5.0, 1.0, 0.0, 0.0]})
    with pytest.raises(UserError, match="negative"):
        prof.target_decode(0, 1)
