"""The artifact's v12 and v11 replays: published mean and hand-worked per-problem values."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from heterospec.errors import UserError
from heterospec.replay.artifact.replays import ARTIFACT_REPLAY_SCHEMA, replay_table
from heterospec.replay.artifact.importer import import_traces

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
AE = SHARED / "heteroreason_ae" / "Hardware"
needs_shared = pytest.mark.skipif(not AE.is_dir(), reason=f"{AE} absent (shared artifact traces)")


# Independent arithmetic: the artifact's per-token sums written out, with the REFERENCE constants.
def d11(kv, n):
    return sum(5.74 + 0.004928 * (kv + i) for i in range(1, n + 1))


def p11(n):
    return 8.0 + 0.0018 * n


def t11(kv, g):
    return 0.0018 * kv + sum(23.16 + 0.000084 * (kv + i) for i in range(1, g + 1))


def c(t):
    return t * 4 / 16e9 * 1e3


A_D, B_D = 5.74, 0.002464
A_P, B_P = 14.415957692625284, 0.1948780118493466
B_PRE, A_T, B_T = 0.24499333805234357, 19.442100036975807, 0.0004155445761835332
A_PF, B_PF = 16.123062162697437, 0.006210464885094716


def d12(kv, n):
    return sum(A_D + B_D * (kv + i) for i in range(1, n + 1))


def p12(n):
    return A_P + B_P * n


def t12(kv, g):
    return B_PRE * kv + sum(A_T + B_T * (kv + i) for i in range(1, g + 1))


def lat_of(table, source_suffix):
    rows = [r for r in table.to_pylist() if r["source"].endswith(source_suffix)]
    assert len(rows) == 1
    return rows[0]["latency_ms"]


@needs_shared
def test_v12_gaokao_mean_matches_simulator_reference():
    ref = json.loads((AE / "reference_results" / "simulator_reference.json").read_text())
    want = ref["cases"]["Config1"]["with_bt"]["datasets"]["gaokao2023en"]["average_latency_ms"]
    assert want == pytest.approx(11512.70, abs=0.01)
    events = import_traces(AE / "inputs" / "Config1" / "with_bt" / "gaokao2023en").events
    t = replay_table(events, semantics="v12", profile="paper_v12")
    lat = t.column("latency_ms").to_pylist()
    assert len(lat) == 385
    mean = sum(lat) / len(lat)
    assert mean == pytest.approx(want, rel=1e-3)      # the brief's 0.1 %
    assert mean == pytest.approx(want, rel=1e-9)      # in fact exact up to rounding
    assert t.schema.equals(ARTIFACT_REPLAY_SCHEMA, check_metadata=True)


@needs_shared
def test_v11_hand_worked_gsm8k_example_4():
    # no_bt/gsm8k/example_4: d = 25 acc, 80 rescue (T 83, prefetched_complete, critical 0),
    # 95 rescue (T 95, critical 0), 88 acc, 26 acc.  Critical 0 with a recorded mode: no target time.
    lat = d11(0, 25)                                   # dkv = 25, kv = 0
    lat += max(p11(25) + c(25), d11(25, 80))           # accept; kv = 25, dkv = 50
    lat += p11(25 + 80) + c(80) + d11(50, 95)          # rescue; kv = 25 + 83 = 108, dkv stays 50
    lat += p11(108 + 95) + c(95) + d11(50, 88)         # rescue; kv = 108 + 95 = 203
    lat += max(p11(203 + 88) + c(88), d11(50, 26))     # accept; kv = 291, dkv = 138
    lat += p11(291 + 26) + c(26)                       # last accept
    ev = import_traces(AE / "inputs" / "Config1" / "no_bt" / "gsm8k").events
    got = lat_of(replay_table(ev, semantics="v11"), "example_4.json")
    assert got == pytest.approx(lat, rel=1e-12)
    assert got == pytest.approx(1949.9064, abs=1e-3)   # ~145.1 + 485.0 + 599.4 + 554.5 + 157.4 + 8.6 by hand


@needs_shared
def test_v11_hand_worked_math500_example_0():
    # no_bt/math500/example_0: d = 35 acc, 113 acc, 152 rescue (T 75, critical 0), 33 acc.
    lat = d11(0, 35)
    lat += max(p11(35) + c(35), d11(35, 113))          # kv 35, dkv 70
    lat += max(p11(35 + 113) + c(113), d11(70, 152))   # kv 148, dkv 183
    lat += p11(148 + 152) + c(152) + d11(183, 33)      # rescue: kv 148 + 75 = 223
    lat += p11(223 + 33) + c(33)
    ev = import_traces(AE / "inputs" / "Config1" / "no_bt" / "math500").events
    assert lat_of(replay_table(ev, semantics="v11"), "example_0.json") == pytest.approx(lat, rel=1e-12)


def _write(tmp_path, doc):
    p = tmp_path / "ds" / "example_0.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc))
    return tmp_path


def _v11_event(i, status, d, t=0, mode="none", crit=0, **kw):
    return dict(event_idx=i, logical_step=i, status=status, final_model="x", draft_tokens_spent=d,
                target_tokens_spent=t, target_mode=mode, target_cached_tokens=0, target_continuation_tokens=0,
                target_critical_gen_tokens=crit, latency=0, **kw)


def test_v11_hand_worked_synthetic_all_branches(tmp_path):
    ev = [_v11_event(0, "accept_pure_draft", 10),
          _v11_event(1, "target_rescue", 20, 30, "partial_resume", 12),    # traced: total 30, critical 12
          _v11_event(2, "accept_via_prefetch", 5),                          # no mode: (1, 1)
          _v11_event(3, "BACKTRACK_EVENT", 7, to_step=1, from_step=3),     # matched entry: (40, 25)
          _v11_event(4, "target_rescue", 9, 0),                             # no mode, 0 spent: (1, 1)
          _v11_event(5, "BACKTRACK_EVENT", 6, to_step=0, from_step=5)]     # no entry: (d, d) = (6, 6)
    tte = [dict(event_idx=0, logical_step=1, phase="backtrack_target_intervention", target_mode="direct_generation",
                target_tokens=40, target_cached_tokens=15, target_continuation_tokens=25,
                target_critical_gen_tokens=25)]
    doc = dict(idx=0, summary=dict(is_correct=True, backtrack_count=2, total_tokens_breakdown=[57, 71, 0]),
               execution_trace=ev, target_trace_events=tte)
    lat = d11(0, 10)                                            # dkv 10
    lat += max(p11(10) + c(10), d11(10, 20))                    # kv 10, dkv 20
    lat += p11(10 + 20) + c(20) + t11(10, 12) + d11(20, 5)      # kv 40
    lat += p11(40 + 5) + c(5) + t11(40, 1) + d11(20, 7)         # kv 41
    lat += p11(41 + 7) + c(7) + t11(41, 25) + d11(20, 9)        # kv 81
    lat += p11(81 + 9) + c(9) + t11(81, 1) + d11(20, 6)         # kv 82
    lat += p11(82 + 6) + c(6) + t11(82, 6)                      # last
    t = replay_table(import_traces(_write(tmp_path, doc)).events)
    assert t.column("semantics").to_pylist() == ["v11"]
    assert t.column("latency_ms")[0].as_py() == pytest.approx(lat, rel=1e-12)
    assert t.column("target_tokens")[0].as_py() == 30 + 1 + 40 + 1 + 6


def test_v12_hand_worked_synthetic_with_backtrack(tmp_path):
    def e(i, step, status, d, total, **kw):
        return dict(event_idx=i, logical_step=step, status=status, final_model="x", draft_tokens_spent=d,
                    target_tokens_spent=0, target_total_tokens=total, latency=0.0, **kw)
    ev = [e(0, 1, "accept_pure_draft", 40, 0),
          e(1, 2, "target_rescue", 30, 50),
          e(2, 3, "accept_pure_draft", 20, 0),
          e(3, 4, "BACKTRACK_EVENT", 25, 0, from_step=4, to_step=2, steps_dropped=2,
            rollback_draft_tokens=20, rollback_target_tokens=20),        # T = 0 -> d = 25
          e(4, 3, "accept_pure_draft", 15, 0)]
    doc = dict(idx=3, prompt_tokens=100, summary=dict(is_correct=False, backtrack_count=1,
               total_tokens_breakdown=[130, 50, 0], prompt_tokens=100, trace_semantics="v12_x"),
               execution_trace=ev)
    init = A_PF + B_PF * 100 + 100 * 12288 / 16e9 * 1e3
    lat = init + d12(0, 40)
    w = d12(0, 40)                                   # dkv 40, kv 0
    # e0 accept: kv 40, stack [(1,40)]
    s = max(p12(40) + c(40), d12(40, 30)); lat += s; w = s          # dkv 70
    # e1 rescue T=50 at kv 40
    verify = p12(40 + 30) + c(30)
    wait = max(0.0, t12(40, 50) - (w + verify))
    tv = p12(40 + 50) + c(50)                        # kv 90, stack [(1,40),(2,50)]
    s = max(tv, d12(90, 20)); lat += verify + wait + s; w = s        # dkv 110
    # e2 accept d 20: kv 110, stack + (3,20)
    s = max(p12(90 + 20) + c(20), d12(110, 25)); lat += s; w = s    # dkv 135
    # e3 backtrack to step 2: pop (3,20): kv 90, dkv 115; T = 25
    verify = p12(110 + 25) + c(25)
    wait = max(0.0, t12(90, 25) - (w + verify))
    tv = p12(90 + 25) + c(25)
    lat += verify + wait                             # kv 115, dkv 140, stack + (2,25)
    s = max(tv, d12(140, 15)); lat += s              # dkv 155
    # e4 accept d 15, last
    lat += p12(115 + 15) + c(15)
    t = replay_table(import_traces(_write(tmp_path, doc)).events)
    assert t.column("semantics").to_pylist() == ["v12"]
    assert t.column("latency_ms")[0].as_py() == pytest.approx(lat, rel=1e-12)


def test_unknown_semantics(tmp_path):
    with pytest.raises(UserError, match="unknown replay semantics"):
        replay_table(ARTIFACT_REPLAY_SCHEMA.empty_table(), semantics="v10")
