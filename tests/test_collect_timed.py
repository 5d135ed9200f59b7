"""The timed collects in one job (heterospec.collect.run_timed) on the ci trio: problem by problem, every
configuration of a problem before the next problem, in a seeded order; the same tables as one block-wise collect per
configuration; a job killed mid-way (kill -9) resumes to the tables of an uninterrupted one."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from heterospec.collect import Collect, check_one_session, interleaved_order, run_shard, run_timed
from heterospec.config import compose_config
from heterospec.config.collect_variants import timed_collects
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.reasoning.repeats import journal_name
from heterospec.store import read_parquet
from heterospec.tasks import load_problems
from test_reasoning import OVERRIDES, trio  # noqa: F401  (the module's ci trio, thresholds at the PRM's median)

# what a run measures rather than decides: clocks, and for step_ahead everything that depends on how far cancelled
# work got before its verdict (the calls' tokens, the KVMU's log, the draft's and target's totals)
TIMING = {"start_ns", "end_ns", "t_ns", "latency_s", "draft_ms", "verify_ms"}
DECIDED = {"problems": ["problem_id", "answer", "prediction", "correct", "output", "stop", "steps", "draft_steps",
                        "target_steps", "backtracks", "prompt_tokens"],
           "steps": ["problem_id", "step_idx", "position", "outcome", "draft_score"]}


def settings(ci, *extra):
    thr = ci[0].algorithm.threshold
    return [*OVERRIDES, f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}",
            "collect.algorithms=[rsd,brsd]", *extra]


def decided(path, table: str, executor: str) -> list[dict]:
    """A table's rows as the reasoning decides them (sequential: every column but the clocks and the run)."""
    t = read_parquet(path, COLLECT_TABLES[table])
    if executor == "step_ahead":
        if table not in DECIDED:
            return []
        cols = DECIDED[table]
    else:
        cols = [c for c in t.schema.names if c not in TIMING and c != "run"]
    return t.select(cols).to_pylist()


def same(a: list[dict], b: list[dict]) -> bool:
    """Equal rows, PRM scores within the tolerance repeats are held to (reasoning.repeats.SCORE_RTOL)."""
    def eq(x, y):
        return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) if isinstance(x, float) and isinstance(y, float) \
            else x == y
    return len(a) == len(b) and all(r.keys() == s.keys() and all(eq(r[k], s[k]) for k in r) for r, s in zip(a, b))


def test_the_order_goes_round_by_round_and_takes_every_configuration_of_a_problem_before_the_next_and_is_seeded():
    problems = load_problems(compose_config(["experiment=ci"]).dataset, 5)
    collects = [Collect(None, "synthetic", a, e, "0of1", problems, 2, None, {})
                for a in ("rsd", "brsd") for e in ("sequential", "step_ahead")]
    order = interleaved_order(collects, seed=0)
    names = [(c.algorithm, c.executor, k, j) for c, k, j in order]
    # round 0 of every problem, then round 1; within a round problem by problem, each with all 4 collects once
    assert [(j, k) for _, _, k, j in names] == [(j, k) for j in range(2) for k in range(5) for _ in range(4)]
    assert len(set(names)) == 40
    # the order within a problem is shuffled (not the listing's), differs between problems and rounds, is the seed's
    per_run = [tuple((a, e) for a, e, k, i in names if (k, i) == (p, j)) for j in range(2) for p in range(5)]
    listed = [(c.algorithm, c.executor) for c in collects]
    assert any(list(p) != listed for p in per_run)
    assert len(set(per_run[:5])) > 1 and any(per_run[p] != per_run[5 + p] for p in range(5))
    assert [(c.algorithm, c.executor, k, j) for c, k, j in interleaved_order(collects, seed=0)] == names
    assert [(c.algorithm, c.executor, k, j) for c, k, j in interleaved_order(collects, seed=1)] != names
    # a problem's order depends on the problem, not on its place in a shard: the last problem alone, same order
    alone = [Collect(None, "synthetic", c.algorithm, c.executor, "1of2", problems[4:], 2, None, {}) for c in collects]
    assert [(c.algorithm, c.executor, j) for c, _, j in interleaved_order(alone, seed=0)] == \
        [(a, e, j) for a, e, k, j in names if k == 4]
    # a collect with fewer repeats sits out the later rounds
    fewer = collects[:3] + [Collect(None, "synthetic", "brsd", "step_ahead", "0of1", problems, 1, None, {})]
    short = interleaved_order(fewer, seed=0)
    assert len(short) == 5 * 7 and all(c.repeats == 2 for c, _, j in short if j == 1)


def test_the_timed_collects_are_the_algorithm_configs_under_every_executor():
    cfg = compose_config(["experiment=ci"])             # rsd, brsd, and the variants brsd_sd, brsd_u280
    assert timed_collects(cfg) == [(a, e) for a in ("rsd", "brsd") for e in ("sequential", "step_ahead")]
    assert timed_collects(compose_config(["experiment=dfvg"])) == []


@pytest.fixture(scope="module")
def timed(request):
    """(cfg, paths, overrides, tables) of the ci trio's timed job, twice each, in a run folder of its own."""
    ci = request.getfixturevalue("trio")
    ov = settings(ci, "collect.repeats=2", "name=timed")
    cfg = compose_config(ov)
    paths = RunPaths(ci[1].root.parent / "timed", ci[1].model_keys)
    return cfg, paths, ov, run_timed(cfg, paths, ov, "synthetic", "0of1", processes=False)


def test_timed_collects_write_the_block_wise_tables_problem_by_problem(request, timed):
    """One session, interleaved: round by round, and within a round every run of a problem journaled before any run
    of the next; the tables equal one block-wise collect per configuration in another run folder (same models, same
    problems)."""
    ci = request.getfixturevalue("trio")
    cfg, _, _, out = timed
    assert sorted(out) == sorted(timed_collects(cfg))
    # the journals' write times: round 0 before round 1, and within a round problem k's four runs all before any of
    # problem k + 1's
    run_of = {journal_name(k, j): (j, k) for j in range(2) for k in range(6)}
    written = []
    for (a, e), tables in out.items():
        for f in (tables["problems"].parent / "journal").glob("*.json"):
            written.append((f.stat().st_mtime_ns, run_of[f.name]))
    assert len(written) == 6 * 4 * 2
    by_time = [k for _, k in sorted(written)]
    assert by_time == sorted(by_time)
    block = settings(ci, "collect.repeats=2", "name=blocks")
    block_paths = RunPaths(ci[1].root.parent / "blocks", ci[1].model_keys)
    for (a, e), tables in out.items():
        mine = run_shard(compose_config(block), block_paths, block, "synthetic", a, e, "0of1", processes=False)
        for t in COLLECT_TABLES:
            assert same(decided(tables[t], t, e), decided(mine[t], t, e)), (a, e, t)
        reps = read_parquet(tables["repeats"], COLLECT_TABLES["repeats"])
        assert set(reps.column("repeat").to_pylist()) == {0, 1}
    assert read_parquet(out[("brsd", "sequential")]["calls"], COLLECT_TABLES["calls"]).num_rows > 0


def _scale(paths, algorithm: str, executor: str, f: float) -> None:
    """Every measured time of one collect's merged tables times ``f``: its calls, its problems, its repeats."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from heterospec.store import write_parquet
    for table, cols in (("calls", ("start_ns", "end_ns")), ("repeats", ("start_ns", "end_ns")),
                        ("problems", ("latency_s",))):
        path = paths.collect_table("synthetic", algorithm, executor, table)
        t = read_parquet(path, COLLECT_TABLES[table])
        for c in cols:
            scaled = pc.multiply(t.column(c).cast(pa.float64()), f)
            t = t.set_column(t.schema.get_field_index(c), c, scaled.cast(t.schema.field(c).type, safe=False))
        write_parquet(t, path, COLLECT_TABLES[table])


def _copy(timed, name: str):
    """(cfg, paths, overrides) of a run named ``name`` holding a copy of the timed run's collect tables, merged."""
    import shutil
    from heterospec.collect import merge
    _, src, ov, _ = timed
    ov = [o for o in ov if not o.startswith("name=")] + [f"name={name}"]
    cfg = compose_config(ov)
    paths = RunPaths(src.root.parent / name, src.model_keys)
    shutil.copytree(src.collect_root, paths.collect_root)
    for a, e in timed_collects(cfg):
        merge(paths, "synthetic", a, e, 1)
    return cfg, paths, ov


def test_schedule_only_prices_a_sequential_run_at_its_own_calls(timed):
    """The schedule-only replay of the sequential executor, problem by problem, against the sum of the problem's own
    calls (its fastest repeat) plus the model's controller time (the fit's mean gap before each draft write, PRM
    score and target write, and its time per problem), counted from the trace rows: RSD's equal it; BRSD's lie below
    it by at most the draft's feeds of target steps, which the sequential schedule overlaps with the PRM's score of
    that target step (the real executor feeds them at its next write)."""
    from heterospec.replay.traces.reader import fastest_repeats
    from heterospec.replay.profiles.measured import read_fit
    from heterospec.replay.validation.against_collect import validate
    cfg, paths, ov = _copy(timed, "own_calls")
    rows = validate(cfg, paths, ov).to_pylist()
    fit = {(r["role"], r["phase"]): r["coefficients"][0] for r in read_fit(paths.replay_fit).to_pylist()}
    dispatch = {role: fit.get((role, "dispatch"), 0.0) for role in ("draft", "prm", "target")}
    reps = read_parquet(paths.collect_table("synthetic", "rsd", "sequential", "repeats"), COLLECT_TABLES["repeats"]).to_pylist()
    reps += read_parquet(paths.collect_table("synthetic", "brsd", "sequential", "repeats"),
                         COLLECT_TABLES["repeats"]).to_pylist()
    for ts in ("rsd", "brsd"):
        best = fastest_repeats([r for r in reps if r["algorithm"] == ts])
        for r in (r for r in rows if (r["trace_set"], r["executor"]) == (ts, "sequential")):
            calls = best[("synthetic", r["problem"])][1]
            writes = {role: sum(c["role"] == role and c["phase"] in ("decode", "score") for c in calls)
                      for role in dispatch}
            own = sum((c["end_ns"] - c["start_ns"]) / 1e6 for c in calls) + fit[("controller", "problem")] + \
                sum(dispatch[role] * n for role, n in writes.items())
            if ts == "rsd":
                assert r["schedule_only_ms"] == pytest.approx(own, abs=0.01), r["problem"]
            else:
                feeds = sum((c["end_ns"] - c["start_ns"]) / 1e6 for c in calls
                            if c["role"] == "draft" and c["phase"] == "prefill" and c["tokens_in"] > 1)
                assert own - feeds - 0.01 <= r["schedule_only_ms"] <= own + 0.01, r["problem"]


def test_a_systematic_ten_percent_on_one_executor_is_flagged_by_the_aggregate_check(timed, capsys):
    """The timed traces, their step_ahead runs first scaled so that the replay prices their mean exactly (a
    step_ahead the model gets right on average), then their measured times made 10 % slower: the fit (sequential
    calls only) and so every prediction stays, the error on the mean is 1 / 1.1 - 1 = -9.1 %, P50 and P90 move by the
    same factor, the check flags exactly the step_ahead groups; the per-problem MAE, under the machine's noise, would
    not tell."""
    from heterospec.replay.validation.against_collect import AGGREGATE_BAR, aggregates, summary, validate
    cfg, paths, ov = _copy(timed, "planted")

    def check():
        rows = validate(cfg, paths, ov).to_pylist()
        return rows, {(a["trace_set"], a["executor"], a["statistic"]): a for a in aggregates(rows)}

    rows, agg = check()
    for a in ("rsd", "brsd"):
        mean = agg[(a, "step_ahead", "mean")]
        _scale(paths, a, "step_ahead", mean["predicted_ms"] / mean["measured_ms"])
    rows, calibrated = check()
    for a in ("rsd", "brsd"):
        _scale(paths, a, "step_ahead", 1.1)
    planted_rows, planted = check()
    assert [r["predicted_ms"] for r in planted_rows] == pytest.approx([r["predicted_ms"] for r in rows], rel=1e-12)
    for key, a in planted.items():
        before = calibrated[key]
        if key[1] == "sequential":
            assert (a["rel_error"], a["ci_low"], a["ci_high"]) == \
                pytest.approx((before["rel_error"], before["ci_low"], before["ci_high"]), abs=1e-12)
            continue
        for col in ("rel_error", "ci_low", "ci_high"):   # (1 + e) / 1.1 - 1: the measured side 10 % slower
            assert a[col] == pytest.approx((1 + before[col]) / 1.1 - 1, abs=1e-6), (key, col)
        if key[2] == "mean":
            assert abs(before["rel_error"]) < 1e-6 and a["rel_error"] == pytest.approx(1 / 1.1 - 1, abs=1e-6)
            assert abs(a["rel_error"]) > AGGREGATE_BAR >= abs(before["rel_error"])
    text = summary(planted_rows, None, list(planted.values()))
    flagged = [line.split()[:2] for line in text.splitlines() if line.endswith(" NO") and "(" in line]
    assert ["rsd", "step_ahead"] in flagged and ["brsd", "step_ahead"] in flagged


def test_the_timed_collects_share_one_session_or_say_why_not():
    """Collects whose target writes differently (plainly, by token-level speculation) need other workers: one line."""
    problems = load_problems(compose_config(["experiment=ci"]).dataset, 2)
    plain = compose_config(["experiment=ci"])
    chain = compose_config(["experiment=ci", "algorithm=rsd", "algorithm.target_decoding=chain"])
    collects = [Collect(c, "synthetic", c.algorithm.name, "sequential", "0of1", problems, 1, None, {})
                for c in (plain, chain)]
    with pytest.raises(UserError, match=r"algorithm.target_decoding: 'chain' in rsd, 'plain' in brsd; the timed "
                                        r"collects share one session"):
        check_one_session(collects)
    check_one_session(collects[:1] * 2)


def _journals(root) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.glob("**/journal/0*.json")}


def test_a_timed_job_killed_mid_way_resumes_to_the_uninterrupted_tables(request):
    """The real job (worker processes) killed with SIGKILL after a few runs; rerun, it keeps every journaled run,
    runs the rest, and writes the tables an uninterrupted job writes."""
    ci = request.getfixturevalue("trio")
    _, paths, _ = ci
    cwd = paths.root.parent.parent      # where results/_models/ holds the trio
    ov = settings(ci, "name=killed")
    cmd = [sys.executable, "-m", "heterospec.collect", "timed", "--dataset", "synthetic", "--shard", "0of1", *ov]
    root = cwd / "results" / "killed" / "collect"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    job = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True)      # its own process group: the workers go down with it
    try:
        deadline = time.monotonic() + 600
        while len(_journals(root)) < 5 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    kept = _journals(root)
    assert job.returncode == -signal.SIGKILL and 5 <= len(kept) < 6 * 4, job.stderr.read().decode()[-2000:]
    again = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(kept)} of 24 problem runs already done" in again.stderr
    after = _journals(root)
    assert len(after) == 24 and all(after[name] == t for name, t in kept.items())   # nothing journaled ran again
    whole = settings(ci, "name=whole")
    out = run_timed(compose_config(whole), RunPaths(cwd / "results" / "whole", paths.model_keys), whole, "synthetic",
                    "0of1", processes=False)
    killed = RunPaths(cwd / "results" / "killed", paths.model_keys)
    for (a, e), tables in out.items():
        for t in COLLECT_TABLES:
            resumed = killed.collect_shard("synthetic", a, e, "0of1", t)
            assert same(decided(resumed, t, e), decided(tables[t], t, e)), (a, e, t)
