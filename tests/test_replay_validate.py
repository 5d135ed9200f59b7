"""Replay of our own executors: shared-core yielding, RSD/BRSD step details, the measured profile's robust fit
and controller overheads."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from heterospec.errors import UserError
from heterospec.replay.simulator.des import simulate_problem
from heterospec.replay.simulator.engines import FastEngine, SimpyEngine
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx, SystemParams
from heterospec.replay.profiles.measured import MeasuredProfile, features, fit_calls, fit_overheads, lad
from heterospec.replay.profiles.registry import get_profile
from heterospec.replay.simulator.steps import MODEL_CALLS_SCHEMA, steps_from_calls


def cpu3(yields=None):
    w = {"draft": 15.0, "prm": 15.0, "target": 15.0}
    return SystemParams("cpu3", w, {k: 5.0 for k in w}, {k: "cpu" for k in w}, 20.0, 0.1,
                        {"target": "prm"} if yields is None else yields)


@pytest.mark.parametrize("Engine", [FastEngine, SimpyEngine])
def test_target_progresses_only_while_the_prm_is_idle(Engine):
    eng = Engine({"target": "prm"})
    # the policies issue the PRM's operations before the target's that overlap them (the fast engine's contract)
    V = eng.run("prm", 3.0, [eng.run("draft", 2.0)])                 # PRM busy [2, 5]
    V2 = eng.run("prm", 4.0, [V])                                     # PRM busy [5, 9]
    T = eng.run("target", 10.0)                                       # 10 ms of work from 0: 0-2, 9-17
    C = eng.run("target", 10.0, [T], until=V2)                        # its verdict came before it could start
    eng.finish()
    assert (T.start, T.end, T.work) == pytest.approx((0.0, 17.0, 10.0))
    assert (C.start, C.end, C.work) == pytest.approx((17.0, 17.0, 0.0))
    eng2 = Engine({"target": "prm"})
    V2 = eng2.run("prm", 3.0, [eng2.run("draft", 2.0)])
    P = eng2.run("target", 10.0, until=V2)                            # a prefetch stopped by the verdict at 5
    eng2.finish()
    assert (P.end, P.work) == pytest.approx((5.0, 2.0))


@pytest.mark.parametrize("Engine", [FastEngine, SimpyEngine])
def test_a_cancel_lets_the_token_in_progress_finish(Engine):
    """Worked by hand: a write of 11 ms, 2 ms that no cancel cuts (dispatch, feed) then three tokens of 3 ms, cancelled
    by an op that ends at ``at``: it stops at the end of the token in progress (of the feed, if that is where it is)."""
    def cut(at, grain=3.0, yields=None, prm_after=None):
        eng = Engine(yields or {})
        V = eng.run("draft", at)
        if prm_after is not None:                                 # the PRM busy [at + prm_after, at + prm_after + 2.5]
            eng.run("prm", 2.5, [eng.run("draft", prm_after, [V])])
        W = eng.run("target", 11.0, until=V, atomic=2.0, grain=grain)
        eng.finish()
        return W.end, W.work
    assert cut(6.0) == pytest.approx((8.0, 8.0))        # 4 ms into the tokens: the second one finishes
    assert cut(5.0) == pytest.approx((5.0, 5.0))        # at a token's end: nothing more
    assert cut(1.0) == pytest.approx((2.0, 2.0))        # in the feed: it finishes, no token starts
    assert cut(10.5) == pytest.approx((11.0, 11.0))     # in the last token: the write completes
    assert cut(6.0, grain=0.0) == pytest.approx((6.0, 6.0))   # the artifact's rule: stopped where it is
    # on a core it yields to the PRM (busy 6.5-9): 2 ms of work left at the cancel, 0.5 before the PRM, 1.5 after
    assert cut(6.0, yields={"target": "prm"}, prm_after=0.5) == pytest.approx((10.5, 8.0))


def test_step_ahead_ends_when_the_cancelled_prefetch_ends_its_token():
    """One accepted step under step_ahead, a measured profile (ms): the draft writes 4 tokens at 1 a token and the PRM
    scores in 2.5, so the verdict comes at 6.5; the target's prefetch (prefill 1, then 2 a token) is in its third
    token then, which ends at 7, and the problem with it, as our executor's ``finish`` waits for cancelled work (cut at
    once: 6.5). Where the target yields to the PRM (busy 4-6.5) it has done 4 ms at the verdict, in its second token,
    which ends at 7.5."""
    prof = MeasuredProfile({("draft", "decode"): [0.0, 1.0, 0.0], ("prm", "score"): [2.5, 0.0, 0.0],
                            ("target", "prefill"): [1.0, 0.0, 0.0], ("target", "decode"): [0.0, 2.0, 0.0]})
    assert prof.cancel_units("target", 10, 4) == (1.0, 2.0) and prof.cancel_units("draft", 10, 4) == (0.0, 1.0)
    prob = TracedProblem("s", "p", 0, ["accept"], [4], [0], [10], [10], [14])
    for yields, end in (({}, 7.0), ({"target": "prm"}, 7.5)):
        system = replace(cpu3(yields), link_bandwidth_gbs=float("inf"), link_latency_us=0.0)
        for engine in ("fast", "simpy"):
            m, ops = simulate_problem(prob, "step_ahead", Ctx(prof, system), engine)
            pf = next(o for o in ops if o.kind == "prefetch")
            assert (pf.end, m["latency_ms"]) == pytest.approx((end, end)), (yields, engine)


def test_bad_yields_to():
    from heterospec.config.hardware import System
    cpu = dict(name="c", kind="cpu", memory_type="ddr4", memory_gb=1, bandwidth_gbs=1, power_active_w=1, power_idle_w=1)
    base = {"name": "x", "draft": cpu, "prm": cpu, "target": cpu}
    with pytest.raises(UserError, match="yields_to"):
        System.of({**base, "yields_to": {"target": "gpu"}})
    with pytest.raises(UserError, match="chains"):
        System.of({**base, "yields_to": {"target": "prm", "prm": "draft"}})
    assert SystemParams.of(System.of({**base, "yields_to": {"target": "prm"}})).yields_to == {"target": "prm"}


@st.composite
def problems(draw):
    n, kv = draw(st.integers(1, 8)), 0
    p = TracedProblem("s", "p", draw(st.integers(0, 50)), [], [], [], [], [], [], target_scored=[], rescue_tokens=[])
    for _ in range(n):
        out = draw(st.sampled_from(["accept", "accept", "rescue", "backtrack"]))
        d = draw(st.integers(1, 20))
        t = draw(st.integers(1, 20)) if out != "accept" else 0
        rb = draw(st.integers(0, kv)) if out == "backtrack" else 0
        p.outcome.append(out); p.draft_tokens.append(d); p.target_tokens.append(t); p.kv_verify.append(kv); p.kv_target.append(kv - rb)
        p.target_scored.append(draw(st.booleans()) or out == "backtrack")
        p.rescue_tokens.append(draw(st.integers(0, 20)) if out == "backtrack" else 0)
        kv = kv + d if out == "accept" else kv - rb + t
        p.path_tokens.append(kv)
    return p


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prob=problems())
def test_engines_agree_with_yielding(prob):
    ctx = Ctx(get_profile("paper_v12"), cpu3())
    for sched in ("sequential", "step_ahead"):
        a, ops_a = simulate_problem(prob, sched, ctx, "fast")
        b, ops_b = simulate_problem(prob, sched, ctx, "simpy")
        flat = lambda ops: [t for o in ops for t in (o.start, o.end, o.work)]   # pytest.approx takes flat lists only
        assert len(ops_a) == len(ops_b) and flat(ops_a) == pytest.approx(flat(ops_b), abs=1e-9)
        assert a["latency_ms"] >= a["lower_bound_ms"] - 1e-9
    # yielding never makes anything faster
    free = simulate_problem(prob, "step_ahead", Ctx(get_profile("paper_v12"), cpu3({})))[0]
    assert simulate_problem(prob, "step_ahead", ctx)[0]["latency_ms"] >= free["latency_ms"] - 1e-9


def test_rsd_rescue_unscored_and_brsd_failed_rescue_paid():
    p12 = get_profile("paper_v12")
    ctx = Ctx(p12, cpu3({}))
    base = TracedProblem("s", "p", 0, ["accept", "rescue"], [10, 10], [0, 12], [0, 10], [0, 10], [10, 22])
    scored = simulate_problem(base, "sequential", ctx)[0]["latency_ms"]
    rsd = simulate_problem(replace(base, target_scored=[True, False]), "sequential", ctx)[0]["latency_ms"]
    assert scored - rsd == pytest.approx(p12.prm_score(22) + ctx.comm(12) - ctx.comm(12), rel=1e-9)
    bt = TracedProblem("s", "p", 0, ["accept", "backtrack"], [10, 10], [0, 12], [0, 10], [0, 0], [10, 12])
    plain = simulate_problem(bt, "sequential", ctx)[0]["latency_ms"]
    failed = simulate_problem(replace(bt, rescue_tokens=[0, 7]), "sequential", ctx)[0]["latency_ms"]
    assert failed - plain == pytest.approx(p12.target(10, 7) + ctx.comm(7) + p12.prm_score(17), rel=1e-9)
    # step_ahead: the backtrack's rewrite at the anchor resumes the anchor's stopped prefetch
    sa = simulate_problem(replace(bt, rescue_tokens=[0, 7]), "step_ahead", ctx)[1]
    rewrite = [o for o in sa if o.kind == "rewrite"][-1]
    assert rewrite.work < p12.target(0, 12)


def test_steps_from_calls_brsd_backtrack():
    def c(i, step, role, phase, tin, tout, kv, out):
        return dict(dataset="d", problem="p", step_idx=step, call_idx=i, role=role, phase=phase, tokens_in=tin,
                    tokens_out=tout, kv_len=kv, outcome=out, wall_ms=1.0)
    rows = [c(0, -1, "draft", "prefill", 20, 0, 0, "accept"),
            c(1, 0, "draft", "decode", 0, 12, 20, "accept"), c(2, 0, "prm", "score", 32, 0, 0, "accept"),
            c(3, 1, "draft", "decode", 0, 9, 32, "backtrack"), c(4, 1, "prm", "score", 9, 0, 32, "backtrack"),
            c(5, 1, "target", "decode", 0, 11, 32, "backtrack"),       # the rescue the PRM rejects
            c(6, 1, "prm", "score", 11, 0, 32, "backtrack"),
            c(7, 1, "target", "decode", 0, 14, 20, "backtrack"),       # rewrite at the anchor (step 0)
            c(8, 1, "prm", "score", 14, 0, 20, "backtrack"),
            c(9, 2, "draft", "decode", 0, 8, 34, "rescue"), c(10, 2, "prm", "score", 8, 0, 34, "rescue"),
            c(11, 2, "target", "decode", 0, 10, 34, "rescue")]         # RSD-style: not scored
    s = steps_from_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)).to_pylist()
    assert [(r["outcome"], r["rescue_tokens"], r["kv_target"], r["target_tokens"], r["rollback_tokens"],
             r["target_scored"]) for r in s] == [("accept", 0, 0, 0, 0, True), ("backtrack", 11, 0, 14, 12, True),
                                                  ("rescue", 0, 14, 10, 0, False)]


def test_lad_ignores_a_tail_of_slow_calls():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 14, 400).astype(float)
    y = 1.0 + 0.9 * n + rng.normal(0, 0.05, 400)
    y[::10] *= 4                                   # every tenth call stalled by another process
    X = np.stack([np.ones_like(n), n], axis=-1)
    assert lad(X, y) == pytest.approx([1.0, 0.9], abs=0.05)
    assert np.linalg.lstsq(X, y, rcond=None)[0][1] > 1.1   # least squares follows the tail


def test_lad_keeps_coefficients_non_negative():
    rng = np.random.default_rng(2)
    n = rng.integers(1, 6, 30).astype(float)       # a few short calls whose time falls with n: noise
    y = 4.0 - 0.3 * n + rng.normal(0, 0.05, 30)
    X = np.stack([np.ones_like(n), n, n * n], axis=-1)
    c = lad(X, y)
    assert (c >= 0).all() and c[1] == 0.0 and c[2] == 0.0
    assert c[0] == pytest.approx(np.median(y), abs=0.1)            # the best constant: the median
    assert (features("decode", np.arange(0, 500), np.full(500, 1000)) @ lad(X, y) >= 0).all()


def test_overheads_and_whole_writes():
    rows = []
    for pid in ("a", "b"):   # prefill+decode (draft), score (prm): gaps 0.4 before the PRM, 0.3 before the draft
        t = 0.2
        for role, phase, dur in [("draft", "prefill", 1.0), ("draft", "decode", 10.0), ("prm", "score", 2.0),
                                 ("draft", "prefill", 1.0), ("draft", "decode", 10.0), ("prm", "score", 2.0)]:
            t += {"prm": 0.4, "draft": 0.3 if phase == "prefill" else 0.0}[role] if (role, pid, t) != (
                "draft", pid, 0.2) else 0.0
            rows.append(dict(problem_id=pid, role=role, phase=phase, start_ns=round(t * 1e6),
                             end_ns=round((t + dur) * 1e6)))
            t += dur
    end = rows[-1]["end_ns"] / 1e6
    oh = {(r["role"], r["phase"]): r["coefficients"][0]
          for r in fit_overheads(rows, {"a": end + 1.0, "b": end + 1.0}).to_pylist()}
    assert oh[("prm", "dispatch")] == pytest.approx(0.4) and oh[("draft", "dispatch")] == pytest.approx(0.3)
    assert oh[("controller", "problem")] == pytest.approx(0.2 + 1.0)
    coef = {("draft", "decode"): [0.0, 1.0, 0.0], ("draft", "prefill"): [1.0, 0.1, 0.0],
            ("prm", "score"): [2.0, 0.0, 0.0], ("target", "decode"): [0.0, 1.5, 0.0], **{k: [v] for k, v in oh.items()}}
    prof = MeasuredProfile(coef)
    assert prof.draft_decode(40, 12) == pytest.approx(0.3 + 1.1 + 12.0)    # dispatch + 1-token feed + decode
    assert prof.draft_prefill(40, 5) == pytest.approx(0.5)                  # the extra feed, merged into a write
    assert prof.prm_score(50) == pytest.approx(0.4 + 2.0)
    prob = TracedProblem("s", "p", 0, ["accept"], [12], [0], [0], [0], [12])
    m = simulate_problem(prob, "sequential", Ctx(prof, cpu3({})))[0]
    assert m["latency_ms"] == pytest.approx(prof.draft_decode(0, 12) + Ctx(prof, cpu3({})).comm(12) +
                                            prof.prm_score(12) + 1.2)
    with pytest.raises(UserError, match="negative"):
        MeasuredProfile({**coef, ("prm", "dispatch"): [-1.0]})


def test_fit_calls_is_robust_and_positive():
    rows = []
    rng = np.random.default_rng(1)
    for i in range(300):
        n, kv = int(rng.integers(8, 14)), int(rng.integers(30, 120))
        slow = 3.0 if i % 15 == 0 else 1.0
        for role, phase, tin, tout, w in [("draft", "decode", 0, n, 0.9 * n), ("prm", "score", n, 0, 2.0 + 0.01 * kv),
                                          ("target", "decode", 0, n, 1.3 * n)]:
            rows.append(dict(dataset="d", problem=str(i), step_idx=0, call_idx=len(rows), role=role, phase=phase,
                             tokens_in=tin, tokens_out=tout, kv_len=kv, outcome="accept", wall_ms=w * slow))
    fit = {(r["role"], r["phase"]): r for r in fit_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)).to_pylist()}
    assert fit[("draft", "decode")]["coefficients"][1] == pytest.approx(0.9, rel=0.05)
    assert fit[("target", "decode")]["mape"] < 0.2
    t = pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA).to_pydict()   # mean-unbiased: predicted sums = measured
    prof = MeasuredProfile.from_fit(fit_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)))
    drafts = [(n, kv, w) for r, n, kv, w in zip(t["role"], t["tokens_out"], t["kv_len"], t["wall_ms"]) if r == "draft"]
    assert sum(prof._ms("draft", "decode", n, kv) for n, kv, _ in drafts) == pytest.approx(
        sum(w for *_, w in drafts), rel=1e-6)


def test_mae_interval_is_the_bootstrap_spread_of_the_mean():
    import math
    import random
    from heterospec.replay.validation.noise import mae_interval
    rng = random.Random(5)
    errs = [rng.uniform(-0.2, 0.2) for _ in range(400)]
    mae = sum(abs(e) for e in errs) / len(errs)
    lo, hi = mae_interval(errs)
    assert lo < mae < hi
    # the normal approximation: 2 x 1.96 x sd(|e|) / sqrt(n), sd of U(0, 0.2) = 0.2 / sqrt(12)
    assert 0.8 < (hi - lo) / (2 * 1.96 * 0.2 / 12 ** 0.5 / 20) < 1.2
    assert all(math.isclose(x, 0.05) for x in mae_interval([0.05] * 30))   # no spread, no interval
    lo10, hi10 = mae_interval(errs[:10])
    assert hi10 - lo10 > 3 * (hi - lo)                   # fewer problems, a wider interval


def _rep(problem, repeat, calls, latency_ms):
    """Repeats-table rows of one repeat: calls as (role, phase, tokens_in, tokens_out, kv_len, start_ms, end_ms)."""
    run = dict(algorithm="brsd", executor="sequential", dataset="d", problem_id=problem, repeat=repeat)
    rows = [dict(run, step_idx=0, role=ro, phase=ph, tokens_in=i, tokens_out=o, kv_len=kv, start_ns=round(s * 1e6),
                 end_ns=round(e * 1e6)) for ro, ph, i, o, kv, s, e in calls]
    return rows + [dict(run, step_idx=-1, role="controller", phase="problem", tokens_in=0, tokens_out=0, kv_len=0,
                        start_ns=0, end_ns=round(latency_ms * 1e6))]


def test_validation_with_repeats_takes_each_problems_fastest_repeat(tmp_path):
    from heterospec.replay.traces.reader import fastest_calls, min_latency
    from heterospec.replay.traces.fit import fit_table
    D, T = ("draft", "decode", 1, 4, 10), ("target", "decode", 0, 3, 14)
    P10, P14 = ("prm", "score", 4, 0, 10), ("prm", "score", 4, 0, 14)
    rows = (_rep("a", 0, [(*D, 0, 6), (*P10, 7, 9), (*T, 9, 9.8)], 10)
            + _rep("a", 1, [(*D, 0, 5), (*P10, 6, 9), (*T, 9, 9.6)], 12)
            + _rep("b", 0, [(*D, 0, 8), (*P14, 8, 10), (*T, 10, 10.7)], 11)
            + _rep("b", 1, [(*D, 0, 7), (*P14, 7, 8.5), (*T, 8.5, 8.9)], 9))
    # worked by hand: a's fastest repeat is its first (10 ms), b's its second (9 ms); their calls, whole
    calls = fastest_calls(rows).to_pylist()
    assert [(r["problem"], r["role"]) for r in calls] == [(p, r) for p in "ab" for r in ("draft", "prm", "target")]
    assert [r["wall_ms"] for r in calls] == pytest.approx([6.0, 2.0, 0.8, 7.0, 1.5, 0.4])
    reps = {("brsd", "sequential"): rows}
    lat = min_latency({("brsd", "sequential", "d", "a"): 10.0, ("brsd", "sequential", "d", "b"): 11.0}, reps)
    assert lat == pytest.approx({("brsd", "sequential", "d", "a"): 10.0, ("brsd", "sequential", "d", "b"): 9.0})
    (tmp_path / "collect").mkdir()
    fit = {(r["role"], r["phase"]): r for r in fit_table({("brsd", "sequential"): MODEL_CALLS_SCHEMA.empty_table()},
                                                         root=tmp_path / "collect", latency=lat,
                                                         repeats=reps).to_pylist()}
    assert (fit["draft", "decode"]["calls"], fit["draft", "decode"]["wall_ms_mean"]) == (2, pytest.approx(6.5))
    assert (fit["prm", "score"]["calls"], fit["prm", "score"]["wall_ms_mean"]) == (2, pytest.approx(1.75))
    assert (fit["target", "decode"]["calls"], fit["target", "decode"]["wall_ms_mean"]) == (2, pytest.approx(0.6))
    # overheads from the same repeats: the PRM's gaps 1 and 0 ms, the problems' edges 10 - 9.8 and 9 - 8.9 ms
    assert fit["prm", "dispatch"]["coefficients"] == pytest.approx([0.5])
    assert fit["controller", "problem"]["coefficients"] == pytest.approx([0.15])


def test_noise_floor_is_the_spread_of_repeats_and_the_view_reports_it_with_the_bias(tmp_path):
    """repeat_spread worked by hand; replay_validation_summary's mean_bias_pct (signed), noise_floor_pct,
    schedule_only_mae_pct and the aggregate errors beside them; replay_schedule_only per executor."""
    import duckdb
    from heterospec.replay.validation.against_collect import REPLAY_VALIDATION_AGGREGATE_SCHEMA, REPLAY_VALIDATION_SCHEMA, aggregates
    from heterospec.replay.validation.noise import repeat_spread
    from heterospec.store import write_parquet
    from heterospec.store.catalog import build
    rows = (_rep("a", 0, [], 10) + _rep("a", 1, [], 12)
            + _rep("b", 0, [], 9) + _rep("b", 1, [], 11) + _rep("b", 2, [], 10) + _rep("c", 0, [], 7))
    spread = repeat_spread(rows)
    # a: |10 - 12| / 11; b: the mean of its three pairs 2 / 10, 1 / 9.5, 1 / 10.5; c ran once: no spread
    assert spread == pytest.approx({("d", "a"): 2 / 11, ("d", "b"): (2 / 10 + 1 / 9.5 + 1 / 10.5) / 3})
    base = dict(run="r", trace_set="brsd", dataset="d", executor="sequential", system="cpu3")
    val = [dict(base, problem="a", measured_ms=10.0, predicted_ms=11.0, rel_error=0.1, repeat_spread=0.2,
                draft_pace=0.8, schedule_only_ms=10.5),
           dict(base, problem="b", measured_ms=10.0, predicted_ms=7.0, rel_error=-0.3, repeat_spread=0.1,
                draft_pace=0.8, schedule_only_ms=9.5),
           dict(base, executor="step_ahead", problem="a", measured_ms=8.0, predicted_ms=8.4, rel_error=0.05,
                repeat_spread=None, draft_pace=None, schedule_only_ms=None)]
    write_parquet(val, tmp_path / "results" / "r" / "replay" / "validation.parquet", REPLAY_VALIDATION_SCHEMA)
    agg = aggregates(val)
    write_parquet(agg, tmp_path / "results" / "r" / "replay" / "validation_aggregate.parquet", REPLAY_VALIDATION_AGGREGATE_SCHEMA)
    build(tmp_path / "cat.duckdb", tmp_path)
    con = duckdb.connect(str(tmp_path / "cat.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{tmp_path}'")
    got = con.execute("SELECT executor, mae_pct, mean_bias_pct, noise_floor_pct, draft_pace, schedule_only_mae_pct, "
                      "mean_error_pct, p50_error_pct, p90_error_pct "
                      "FROM replay_validation_summary ORDER BY executor").fetchall()
    # MAE (10 + 30) / 2 = 20 %, bias (10 - 30) / 2 = -10 %, noise (20 + 10) / 2 = 15 %, schedule-only 5 %;
    # means 9 / 10, P50 the same, P90 (7 + 0.9 x 4) / (10) = 10.6 / 10; no repeats: NULL
    assert got == [("sequential", 20.0, -10.0, 15.0, 0.8, 5.0, -10.0, -10.0, 6.0),
                   ("step_ahead", 5.0, 5.0, None, None, None, 5.0, 5.0, 5.0)]
    # Harrell-Davis P50 of two values is their mean (a = b = 1.5): 9 vs 10 and 8.4 vs 8; the bar judges the mean and
    # the Harrell-Davis quantiles: -10 % misses it
    hd = con.execute("SELECT executor, p50_hd_error_pct, aggregates_within_5pct FROM replay_validation_summary "
                     "ORDER BY executor").fetchall()
    assert hd[0] == ("sequential", -10.0, False) and hd[1][:2] == ("step_ahead", 5.0)
    alone = con.execute("SELECT trace_set, executor, problems, mae_pct, mean_bias_pct FROM replay_schedule_only").fetchall()
    assert alone == [("brsd", "sequential", 2, 5.0, 0.0)]


def _round(problem, start, kept, drafted=4, nodes=4, kv=40, draft_ms=1.0, verify_ms=1.0, accepted=None):
    return dict(algorithm="brsd_sd", executor="sequential", dataset="d", problem_id=problem, step_idx=0,
                start_ns=start, strategy="chain", kept=kept, accepted=kept - 1 if accepted is None else accepted,
                drafted=drafted, nodes=nodes, kv_target=kv, draft_ms=draft_ms, verify_ms=verify_ms)


def test_tau_from_the_trace_gives_the_recorded_number_of_rounds():
    """Worked by hand: writes of 3 + 3 + 1 = 7 and 4 + 2 = 6 tokens in 5 recorded rounds. ceil(7 / tau) +
    ceil(6 / tau) <= 5 first holds at tau = 3 (3 + 2); below it, 3 + 3. Neither the mean of accepted + 1 (4) nor
    tokens per round (13 / 5 = 2.6) gives the recorded rounds."""
    from heterospec.replay.traces.fit import trace_speculation
    rows = [_round("a", 1, 3, accepted=3), _round("a", 1, 3, accepted=3), _round("a", 1, 1, accepted=3),
            _round("b", 2, 4, accepted=3), _round("b", 2, 2, accepted=3)]
    spec = trace_speculation(rows, "brsd_sd")
    assert (spec.tau, spec.draft_len, spec.strategy) == (pytest.approx(3.0, abs=1e-9), 4, "chain")
    every = trace_speculation([_round("a", 1, 5)] * 3, "x")        # every round keeps all 4 drafted + 1
    assert every.tau == pytest.approx(5.0)


def test_rounds_fit_prices_rounds_and_keeps_speculative_calls_out_of_the_plain_fit():
    """Noise-free rounds: draft_ms = 0.5 + 0.2 drafted, verify_ms = 1 + 0.1 (nodes + 1); the calls took 0.3 ms per
    round beyond them, which the verify pass carries. A speculative set's target decodes (here 100 ms each) do not
    reach the plain target decode fit."""
    from heterospec.replay.schedules.mechanisms.token_speculation import rounds_ms
    from heterospec.replay.simulator.system import Ctx, SystemParams, SpeculationParams
    from heterospec.replay.traces.fit import fit_table
    rounds = [_round("a", k, 1, drafted=d, nodes=d, kv=kv, draft_ms=0.5 + 0.2 * d, verify_ms=1 + 0.1 * (d + 1))
              for k, (d, kv) in enumerate((d, kv) for d in (2, 3, 4, 5) for kv in (10, 30, 60))]
    call_ms = sum(r["draft_ms"] + r["verify_ms"] for r in rounds) + 0.3 * len(rounds)

    def calls(target_ms):
        rows = []
        for i in range(6):
            rows += [dict(role="draft", phase="decode", tokens_in=1, tokens_out=4 + i % 3, kv_len=10 * i, wall_ms=5.0),
                     dict(role="prm", phase="score", tokens_in=20, tokens_out=0, kv_len=0, wall_ms=2.0),
                     dict(role="target", phase="decode", tokens_in=1, tokens_out=4 + i % 2, kv_len=10 * i,
                          wall_ms=target_ms)]
        return pa.Table.from_pylist([dict(r, dataset="d", problem="p", step_idx=0, call_idx=k, outcome="rescue")
                                     for k, r in enumerate(rows)], schema=MODEL_CALLS_SCHEMA)
    fit = {(r["role"], r["phase"]): r for r in fit_table(
        {("brsd", "sequential"): calls(8.0), ("brsd_sd", "sequential"): calls(100.0)},
        rounds={("brsd_sd", "sequential"): (rounds, call_ms)}).to_pylist()}
    assert fit["target", "decode"]["wall_ms_mean"] == pytest.approx(8.0)
    assert fit["draft", "round"]["coefficients"] == pytest.approx([0.5, 0.2, 0.0], abs=1e-6)
    assert fit["target", "verify"]["coefficients"] == pytest.approx([1.3, 0.1, 0.0], abs=1e-6)
    prof = MeasuredProfile.from_fit(pa.Table.from_pylist(list(fit.values())))
    assert (prof.draft_round(50, 4), prof.target_verify(50, 5)) == pytest.approx((1.3, 1.8))
    # a write of 7 tokens at tau 3: 3 rounds, each drafting 4 (1.3 ms) and verifying 5 (1.8 ms), no link cost
    ctx = Ctx(prof, SystemParams("s", {}, {}, {}, float("inf"), 0.0))
    assert rounds_ms(prof, ctx, SpeculationParams(3.0, 4), 50, 7) == pytest.approx((3 * 1.3, 3 * 1.8))


def test_a_validation_file_of_the_older_schema_is_one_line_naming_it(tmp_path):
    """A results tree validated before replay_validation/v3 (no repeat_spread, no schedule_only_ms): the catalogue
    says which files to rebuild instead of failing in DuckDB's binder."""
    import pyarrow.parquet as pq
    from heterospec.replay.validation.against_collect import REPLAY_VALIDATION_SCHEMA
    from heterospec.store.catalog import build
    v1 = pa.schema([f for f in REPLAY_VALIDATION_SCHEMA if f.name not in ("repeat_spread", "schedule_only_ms")],
                   metadata={b"heterospec.schema": b"replay_validation/v1"})
    path = tmp_path / "results" / "r" / "replay" / "validation.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([dict(run="r", trace_set="brsd", dataset="d", problem="a", executor="s",
                                              system="cpu3", measured_ms=1.0, predicted_ms=1.1, rel_error=0.1)],
                                        schema=v1), path)
    with pytest.raises(UserError, match=r"view replay_schedule_only: .*schedule_only_ms.*results/\*/replay/"
                                        r"validation.parquet\) include one of an older schema"):
        build(tmp_path / "cat.duckdb", tmp_path)
    assert not (tmp_path / "cat.duckdb").exists()


def test_validation_covers_speculating_variants_but_not_other_drafts():
    """brsd_sd (the run's draft, target writes in rounds) is validated; brsd_u280 (the kernel drafts) and a
    speculating variant without recorded rounds are not."""
    from heterospec.config import compose_config
    from heterospec.replay.traces.reader import plain_traces
    cfg = compose_config(["experiment=ci"])
    keys = [("rsd", "sequential"), ("brsd_sd", "sequential"), ("brsd_u280", "sequential")]
    calls, latency = {k: k for k in keys}, {(*k, "d", "p"): 1.0 for k in keys}
    kept, lat = plain_traces(cfg, calls, latency, {"brsd_sd", "brsd_u280"})
    assert sorted(kept) == [("brsd_sd", "sequential"), ("rsd", "sequential")]
    assert sorted(lat) == [("brsd_sd", "sequential", "d", "p"), ("rsd", "sequential", "d", "p")]
    assert sorted(plain_traces(cfg, calls, latency)[0]) == [("rsd", "sequential")]


def test_draft_pace_is_each_jobs_draft_time_per_token_over_its_executors_jobs():
    """Worked by hand: sequential jobs at 1 and 2 ms per draft token (pooled median 1.5), step_ahead jobs at 3 and 3
    (pooled 3): the paces are per executor (drift between jobs measured the same way), the executors' ratio is the
    overlapped run's contention (3 / 1.5); the target's calls and the draft's prefills do not count."""
    from heterospec.replay.validation.noise import draft_contention, draft_pace

    def job(ms_per_token, n=4):
        rows = [dict(role="draft", phase="decode", tokens_in=1, tokens_out=n, kv_len=0, wall_ms=ms_per_token * n)] * 3
        rows += [dict(role="target", phase="decode", tokens_in=1, tokens_out=n, kv_len=0, wall_ms=99.0),
                 dict(role="draft", phase="prefill", tokens_in=9, tokens_out=0, kv_len=0, wall_ms=99.0)]
        return pa.Table.from_pylist([dict(r, dataset="d", problem="p", step_idx=0, call_idx=k, outcome="accept")
                                     for k, r in enumerate(rows)], schema=MODEL_CALLS_SCHEMA)
    jobs = {("rsd", "sequential"): job(1.0), ("brsd", "sequential"): job(2.0, n=8),
            ("rsd", "step_ahead"): job(3.0), ("brsd", "step_ahead"): job(3.0, n=2)}
    assert draft_pace(jobs) == pytest.approx({("rsd", "sequential"): 1 / 1.5, ("brsd", "sequential"): 2 / 1.5,
                                              ("rsd", "step_ahead"): 1.0, ("brsd", "step_ahead"): 1.0})
    assert draft_contention(jobs) == pytest.approx({"sequential": 1.0, "step_ahead": 2.0})


def test_quantile_and_aggregate_errors_worked_by_hand():
    """P50 / P90 as numpy interpolates them; the error of an aggregate is that of the predicted distribution's
    statistic against the measured one's (not a mean of per-problem errors); the bootstrap resamples pairs."""
    import random
    from heterospec.replay.validation.noise import aggregate_error, aggregate_interval, quantile
    rng = random.Random(3)
    v = [rng.lognormvariate(0, 1) for _ in range(37)]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert quantile(v, q) == pytest.approx(float(np.percentile(v, 100 * q)))
    measured, predicted = [10.0, 20.0, 30.0, 40.0], [20.0, 20.0, 30.0, 30.0]
    # mean 25 vs 25: 0, although every problem but two is off (per-problem errors +100 %, 0, 0, -25 %)
    assert aggregate_error(measured, predicted, "mean") == pytest.approx(0.0)
    assert aggregate_error(measured, predicted, "p50") == pytest.approx(25 / 25 - 1)          # 25 vs 25
    assert aggregate_error(measured, predicted, "p90") == pytest.approx(30 / 37 - 1)          # 30 vs 37
    scaled = [1.1 * m for m in measured]                       # a systematic +10 %: every resample says so
    for stat in ("mean", "p50", "p90"):
        assert aggregate_error(measured, scaled, stat) == pytest.approx(0.1)
        assert aggregate_interval(measured, scaled, stat) == pytest.approx((0.1, 0.1))
    lo, hi = aggregate_interval(measured, predicted, "mean")
    assert lo < 0 < hi and hi - lo > 0.1


def _call(i, step, role, phase, tin, tout, kv, ms, out="accept"):
    return dict(dataset="d", problem="p", step_idx=step, call_idx=i, role=role, phase=phase, tokens_in=tin,
                tokens_out=tout, kv_len=kv, outcome=out, wall_ms=ms)


def _zero_fit(prm_dispatch=0.0, problem=0.0) -> MeasuredProfile:
    zero = {k: [0.0, 0.0, 0.0] for k in (("draft", "decode"), ("prm", "score"), ("target", "decode"))}
    return MeasuredProfile({**zero, ("prm", "dispatch"): [prm_dispatch], ("controller", "problem"): [problem]})


def test_schedule_only_replays_a_sequential_run_at_its_own_call_times():
    """Every call of an accept, a BRSD backtrack (failed rescue, rewrite at the anchor) and an unscored RSD rescue
    priced at its own time: the sequential replay is their sum (1 + ... + 12 ms) plus the model's controller time
    (0.5 ms before each of 5 PRM calls, 2 ms per problem); none priced by the fallback."""
    from heterospec.replay.simulator.problem import problems_from_steps
    from heterospec.replay.traces.call_times import TraceTimes
    rows = [_call(0, -1, "draft", "prefill", 20, 0, 0, 1.0),
            _call(1, 0, "draft", "decode", 0, 12, 20, 2.0), _call(2, 0, "prm", "score", 32, 0, 0, 3.0),
            _call(3, 1, "draft", "decode", 0, 9, 32, 4.0, "backtrack"), _call(4, 1, "prm", "score", 9, 0, 32, 5.0),
            _call(5, 1, "target", "decode", 0, 11, 32, 6.0, "backtrack"),          # the rescue the PRM rejects
            _call(6, 1, "prm", "score", 11, 0, 32, 7.0, "backtrack"),
            _call(7, 1, "target", "decode", 0, 14, 20, 8.0, "backtrack"),          # rewrite at the anchor
            _call(8, 1, "prm", "score", 14, 0, 20, 9.0, "backtrack"),
            _call(9, 2, "draft", "decode", 0, 8, 34, 10.0, "rescue"), _call(10, 2, "prm", "score", 8, 0, 34, 11.0),
            _call(11, 2, "target", "decode", 0, 10, 34, 12.0, "rescue")]          # RSD-style: not scored
    (prob,) = problems_from_steps(steps_from_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)))
    tt = TraceTimes(prob, rows, _zero_fit(prm_dispatch=0.5, problem=2.0))
    m, _ = simulate_problem(prob, "sequential", Ctx(tt, replace(cpu3({}), link_bandwidth_gbs=float("inf"),
                                                                link_latency_us=0.0)))
    assert m["latency_ms"] == pytest.approx(78.0 + 5 * 0.5 + 2.0)
    assert tt.complete and not tt.unmatched


def test_sequential_draft_takes_a_scored_rescue_in_after_its_verdict():
    """A BRSD rescue the PRM scores, then the draft's next write, which first takes the target's step in (2 ms): under
    sequential nothing overlaps, as in our executor, so the replay at the calls' own times is their sum, 32 ms; the
    draft's ingest running beside the PRM's score of the step (3 ms) would give 30. Under step_ahead the draft writes
    the next step while that score runs, so there it does overlap."""
    from heterospec.replay.simulator.problem import problems_from_steps
    from heterospec.replay.traces.call_times import TraceTimes
    rows = [_call(0, -1, "draft", "prefill", 10, 0, 0, 1.0),
            _call(1, 0, "draft", "decode", 0, 5, 10, 4.0), _call(2, 0, "prm", "score", 15, 0, 0, 3.0),
            _call(3, 1, "draft", "decode", 0, 6, 15, 5.0, "rescue"), _call(4, 1, "prm", "score", 6, 0, 15, 2.0),
            _call(5, 1, "target", "decode", 0, 7, 15, 8.0, "rescue"),
            _call(6, 1, "prm", "score", 7, 0, 15, 3.0, "rescue"),                   # the rescue scored
            _call(7, 2, "draft", "prefill", 7, 0, 16, 2.0),                          # its feed into the draft
            _call(8, 2, "draft", "decode", 0, 4, 22, 3.0), _call(9, 2, "prm", "score", 4, 0, 22, 1.0)]
    (prob,) = problems_from_steps(steps_from_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)))
    assert prob.outcome == ["accept", "rescue", "accept"] and prob.target_scored[1]
    tt = TraceTimes(prob, rows, _zero_fit())
    system = replace(cpu3({}), link_bandwidth_gbs=float("inf"), link_latency_us=0.0)
    m, ops = simulate_problem(prob, "sequential", Ctx(tt, system))
    assert m["latency_ms"] == pytest.approx(32.0) and tt.complete and not tt.unmatched
    sync, score = next(o for o in ops if o.kind == "sync"), next(o for o in ops if o.kind == "verify_target")
    assert sync.start == pytest.approx(score.end)
    _, ops = simulate_problem(prob, "step_ahead", Ctx(tt, system))
    sync, score = next(o for o in ops if o.kind == "sync"), next(o for o in ops if o.kind == "verify_target")
    assert sync.start < score.end


def test_schedule_only_step_ahead_overlaps_the_next_draft_with_the_verdict():
    """Two accepted steps under step_ahead: the second is drafted while the PRM scores the first, so the problem
    takes 1 (prompt) + 4 + max(3, 0.5 + 6) + 2 ms; the target's prefetches of accepted steps, which the sequential
    run never did, are the only calls the fallback prices, and they change nothing (cancelled by the verdicts)."""
    from heterospec.replay.simulator.problem import problems_from_steps
    from heterospec.replay.traces.call_times import TraceTimes
    rows = [_call(0, -1, "draft", "prefill", 10, 0, 0, 1.0),
            _call(1, 0, "draft", "decode", 0, 5, 10, 4.0), _call(2, 0, "prm", "score", 15, 0, 0, 3.0),
            _call(3, 1, "draft", "prefill", 1, 0, 14, 0.5), _call(4, 1, "draft", "decode", 0, 5, 15, 6.0),
            _call(5, 1, "prm", "score", 20, 0, 0, 2.0)]
    (prob,) = problems_from_steps(steps_from_calls(pa.Table.from_pylist(rows, schema=MODEL_CALLS_SCHEMA)))
    for yields in ({}, {"target": "prm"}):
        tt = TraceTimes(prob, rows, _zero_fit())
        system = replace(cpu3(yields), link_bandwidth_gbs=float("inf"), link_latency_us=0.0)
        assert simulate_problem(prob, "sequential", Ctx(tt, system))[0]["latency_ms"] == pytest.approx(16.5)
        assert simulate_problem(prob, "step_ahead", Ctx(tt, system))[0]["latency_ms"] == pytest.approx(13.5)
        assert tt.unmatched and {k[0] for k in tt.unmatched} <= {"prefill", "decode"}


def test_schedule_only_of_an_overlapped_run_prices_its_own_calls():
    """A step_ahead run's own calls, worked by hand (ms): the accepted step 0's prefetch is stopped after 2 tokens
    (prefill 1, decode 2: the target's pace at that context, 1 ms a token); the draft's ahead write of step 1 is
    cancelled (not the step's work); step 1 is rescued by a prefetch hit of 3 tokens whose decode the PRM's score
    overlapped for 2 ms of its 8 (its work: 6 ms, the yield model adds the overlap back); a backtrack's rewrite
    resumes step 0's stopped prefetch (prefill where that decode ended): one write of 2 + 3 tokens."""
    from heterospec.replay.traces.call_times import _target_writes, overlapped_rows

    def c(step, role, phase, tin, tout, kv, s, e, how):
        return dict(step_idx=step, call_idx=0, role=role, phase=phase, tokens_in=tin, tokens_out=tout, kv_len=kv,
                    start_ns=int(s * 1e6), end_ns=int(e * 1e6), call_outcome=how)
    rows = [c(0, "target", "prefill", 10, 0, 0, 0, 1, "partial_reuse"),
            c(0, "target", "decode", 1, 2, 10, 1, 3, "partial_reuse"),
            c(0, "draft", "decode", 1, 5, 10, 0, 4, "accept"),
            c(1, "draft", "decode", 1, 4, 15, 4, 6, "cancelled"),
            c(1, "target", "prefill", 1, 0, 14, 10, 11, "prefetch_hit"),
            c(1, "target", "decode", 1, 3, 15, 11, 19, "prefetch_hit"),
            c(1, "prm", "score", 5, 0, 15, 14, 16, "reject"),
            c(2, "target", "prefill", 1, 0, 11, 20, 21, "partial_reuse"),    # 11 + 1 = 10 + 2: resumes step 0's
            c(2, "target", "decode", 1, 3, 12, 21, 24, "partial_reuse")]
    own = overlapped_rows(rows, {"target": "prm"})
    assert [r["wall_ms"] for r in own] == pytest.approx([1, 2, 4, 2, 1, 6, 2, 1, 3])
    writes, stopped = _target_writes([r for r in own if r["role"] == "target"])
    assert dict(writes) == {1: [(1.0, 3, 6.0)], 2: [(1.0, 5, 2.0 + 1.0 + 3.0)]}
    assert not any(stopped.values())
    rows[0]["call_outcome"] = rows[1]["call_outcome"] = "cancelled"     # never resumed: a pace, not a write
    writes, stopped = _target_writes([r for r in overlapped_rows(rows, {}) if r["role"] == "target"])
    assert dict(stopped) == {0: [(1.0, 2, 2.0)]} and 0 not in writes
