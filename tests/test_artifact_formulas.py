"""The artifact's v12 and v11 replays against a reference written from REFERENCE.md's text, on random event
sequences (every status, backtracks to any earlier step, missing totals) and under a cost profile whose terms all
differ, so that a swapped argument, a dropped term or an off-by-one shows up in the latency. Uses only the public
functions of :mod:`heterospec.replay.artifact.replays`."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from heterospec.errors import UserError
from heterospec.replay.artifact.replays import (DEFAULT_PROFILE, ARTIFACT_REPLAY_SCHEMA, SEMANTICS, Event, replay_table, replay_v11,
                                        replay_v12)

MODES = ("prefetched_complete", "partial_resume", "direct_generation")


class Costs:
    """REFERENCE.md's cost shapes with constants chosen so that no two terms coincide."""
    name = "formulas"

    def __init__(self, k: float = 1.0):
        self.k = k

    def init(self, p):
        return 16.0 + 0.03 * p if p > 0 else 0.0

    def draft_decode(self, kv, n):
        return sum(5.0 * self.k + 0.011 * (kv + i) for i in range(1, n + 1))

    def prm_score(self, n):
        return 14.0 + 0.19 * n

    def comm(self, t):
        return 0.007 * t

    def target(self, kv, g):
        return 0.25 * kv + sum(19.0 + 0.0131 * (kv + i) for i in range(1, g + 1))


def ref_v12(events, prompt, c):
    """v12 as REFERENCE.md words it: (latency, target tokens, target wait)."""
    if not events:
        return 0.0, 0, 0.0
    d0 = events[0].d
    latency, w, dkv, kv, stack, used, waited = c.init(prompt) + c.draft_decode(0, d0), c.draft_decode(0, d0), d0, 0, [], 0, 0.0
    for i, e in enumerate(events):
        d = e.d
        verify = c.prm_score(kv + d) + c.comm(d)
        nd = events[i + 1].d if i + 1 < len(events) else None
        total = e.target_total_tokens if e.target_total_tokens is not None else e.target_tokens_spent
        # each event: time before the overlap, the verification the next draft overlaps, where that draft starts
        if e.status == "accept_pure_draft":
            kv += d
            stack.append((e.logical_step, d))
            before, overlapped, start = 0.0, verify, dkv
        else:
            T = total if e.status == "target_rescue" else (total or d)
            if e.status == "BACKTRACK_EVENT":
                kept = [x for x in stack if x[0] <= e.to_step]
                dropped = sum(t for _, t in stack[len(kept):])
                assert stack[:len(kept)] == kept        # the generator only backtracks along the path
                stack, kv, dkv = kept, kv - dropped, dkv - dropped
            wait = max(0.0, c.target(kv, T) - (w + verify))
            before, overlapped = verify + wait, c.prm_score(kv + T) + c.comm(T)
            start = kv + T if e.status == "target_rescue" else dkv + T     # a rescue resyncs the draft
            kv += T
            dkv = start
            stack.append((e.logical_step if e.status == "target_rescue" else e.to_step, T))
            used += T
            waited += wait
        latency += before
        if nd is None:
            latency += overlapped
        else:
            s = max(overlapped, c.draft_decode(start, nd))
            latency, w, dkv = latency + s, s, start + nd
    return latency, used, waited


def ref_v11(events, c):
    """v11 as REFERENCE.md words it: (latency, target tokens)."""
    if not events:
        return 0.0, 0
    latency, dkv, kv, used = c.draft_decode(0, events[0].d), events[0].d, 0, 0
    for i, e in enumerate(events):
        p = c.prm_score(kv + e.d) + c.comm(e.d)
        nd = events[i + 1].d if i + 1 < len(events) else None
        if e.status == "accept_pure_draft":
            latency += p if nd is None else max(p, c.draft_decode(dkv, nd))
            kv, dkv = kv + e.d, dkv + e.d
            continue
        if e.status == "BACKTRACK_EVENT":
            if e.bt_target_mode in MODES:
                total, crit = e.bt_target_tokens or 0, e.bt_target_critical_gen_tokens or 0
            else:
                total, crit = e.d, e.d
            latency += p + c.target(kv, crit)
        else:
            recorded = e.target_mode in MODES
            if recorded:
                total = e.target_total_tokens if e.target_total_tokens is not None else e.target_tokens_spent
                crit = total if e.target_critical_gen_tokens is None else e.target_critical_gen_tokens
            elif e.status == "target_rescue":
                total = crit = max(1, e.target_tokens_spent)
            else:
                total = crit = 1
            latency += p + (c.target(kv, crit) if crit > 0 or not recorded else 0.0)
        if nd is not None:
            latency += c.draft_decode(dkv, nd)
        kv += total
        used += total
    return latency, used


def random_v12(rng: random.Random, n: int) -> list[Event]:
    events, steps = [], []
    for _ in range(n):
        d = rng.randint(1, 40)
        kind = rng.choice(["accept_pure_draft"] * 3 + ["target_rescue"] * 2 + ["BACKTRACK_EVENT"])
        step = (steps[-1] + 1) if steps else 1
        if kind == "BACKTRACK_EVENT" and steps:
            to = rng.choice(steps)
            total = rng.choice([None, 0, rng.randint(1, 50)])
            events.append(Event(kind, step, d, rng.randint(0, 50), total, to_step=to))
            steps = [s for s in steps if s <= to]
            if steps[-1] != to:
                steps.append(to)
            continue
        if kind == "target_rescue":
            events.append(Event(kind, step, d, rng.randint(1, 50), rng.choice([None, rng.randint(1, 60)])))
        else:
            events.append(Event("accept_pure_draft", step, d))
        steps.append(step)
    return events


def random_v11(rng: random.Random, n: int) -> list[Event]:
    events = []
    for i in range(n):
        d = rng.randint(1, 40)
        kind = rng.choice(["accept_pure_draft", "target_rescue", "accept_via_prefetch", "BACKTRACK_EVENT"])
        mode = rng.choice([None, "none", *MODES])
        events.append(Event(kind, i, d, rng.randint(0, 30), rng.choice([None, rng.randint(0, 60)]), mode,
                            rng.choice([None, 0, rng.randint(1, 20)]), None,
                            rng.choice([None, "none", *MODES]), rng.choice([None, rng.randint(1, 50)]),
                            rng.choice([None, rng.randint(1, 20)])))
    return events


@pytest.mark.parametrize("seed", range(40))
def test_v12_matches_the_reference_on_random_traces(seed):
    rng = random.Random(seed)
    events = random_v12(rng, rng.randint(1, 14))
    costs = Costs(k=rng.choice([0.05, 1.0, 30.0]))          # cheap and expensive drafts: both sides of each max
    prompt = rng.choice([0, 57])
    got = replay_v12(events, prompt, costs)
    lat, used, waited = ref_v12(events, prompt, costs)
    assert got.latency_ms == pytest.approx(lat, rel=1e-12)
    assert got.target_tokens == used and got.target_wait_ms == pytest.approx(waited, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_v11_matches_the_reference_on_random_traces(seed):
    rng = random.Random(seed)
    events = random_v11(rng, rng.randint(1, 14))
    costs = Costs(k=rng.choice([0.05, 1.0, 30.0]))
    got = replay_v11(events, costs)
    lat, used = ref_v11(events, costs)
    assert got.latency_ms == pytest.approx(lat, rel=1e-12) and got.target_tokens == used
    assert got.target_wait_ms == 0.0


def test_v12_hand_worked_rescue_and_wait():
    """Two events, worked by hand: accept 10 draft tokens, then a rescue of 4 target tokens that must wait."""
    c = Costs()
    ev = [Event("accept_pure_draft", 1, 10), Event("target_rescue", 2, 6, 4, 5)]
    d10 = 10 * 5.0 + 0.011 * 55                      # draft(0, 10)
    v1 = 14.0 + 0.19 * 10 + 0.07                     # prm(10) + comm(10)
    s = max(v1, 6 * 5.0 + 0.011 * (6 * 10 + 21))     # vs draft(10, 6)
    v2 = 14.0 + 0.19 * 16 + 0.042                    # prm(10 + 6) + comm(6)
    tgt = 0.25 * 10 + 5 * 19.0 + 0.0131 * (5 * 10 + 15)   # target(10, 5)
    wait = tgt - (s + v2)
    assert wait > 0
    tv = 14.0 + 0.19 * 15 + 0.035                    # prm(10 + 5) + comm(5)
    r = replay_v12(ev, 100, c)
    assert r.latency_ms == pytest.approx(16.0 + 3.0 + d10 + s + v2 + wait + tv, rel=1e-12)
    assert r.target_tokens == 5 and r.target_wait_ms == pytest.approx(wait, rel=1e-12)


def test_empty_and_bad_traces():
    assert replay_v12([], 10, Costs()).latency_ms == 0.0 and replay_v11([], Costs()).latency_ms == 0.0
    with pytest.raises(UserError, match="BACKTRACK_EVENT at step 3 has no to_step"):
        replay_v12([Event("accept_pure_draft", 1, 3), Event("BACKTRACK_EVENT", 3, 2)], 0, Costs())
    with pytest.raises(UserError, match="status 'accept_via_prefetch' at step 1 is not a v12 status"):
        replay_v12([Event("accept_via_prefetch", 1, 3)], 0, Costs())
    with pytest.raises(UserError, match="unknown status 'odd' at step 0"):
        replay_v11([Event("odd", 0, 3)], Costs())


def _events_table(problems: dict[str, tuple[str, int, list[Event]]]) -> pa.Table:
    rows = []
    for i, (source, (fmt, prompt, evs)) in enumerate(problems.items()):
        for e in evs:
            rows.append(dict(dataset="gsm8k", source=source, problem_idx=i, format=fmt, prompt_tokens=prompt,
                             status=e.status, logical_step=e.logical_step, draft_tokens_spent=e.d,
                             target_tokens_spent=e.target_tokens_spent, target_total_tokens=e.target_total_tokens,
                             target_mode=e.target_mode, target_critical_gen_tokens=e.target_critical_gen_tokens,
                             to_step=e.to_step, bt_target_mode=e.bt_target_mode, bt_target_tokens=e.bt_target_tokens,
                             bt_target_critical_gen_tokens=e.bt_target_critical_gen_tokens))
    types = dict(dataset=pa.string(), source=pa.string(), problem_idx=pa.int64(), format=pa.string(),
                 prompt_tokens=pa.int64(), status=pa.string(), logical_step=pa.int64(), draft_tokens_spent=pa.int64(),
                 target_tokens_spent=pa.int64(), target_total_tokens=pa.int64(), target_mode=pa.string(),
                 target_critical_gen_tokens=pa.int64(), to_step=pa.int64(), bt_target_mode=pa.string(),
                 bt_target_tokens=pa.int64(), bt_target_critical_gen_tokens=pa.int64())
    return pa.Table.from_pylist(rows, schema=pa.schema(list(types.items())))


def test_replay_table_groups_problems_and_picks_each_format_rule():
    rng = random.Random(7)
    a, c = random_v12(rng, 6), random_v12(rng, 3)
    b = [Event("target_rescue", 0, 5, 3, 9, "partial_resume", 4),           # every v11 field read from the table
         Event("BACKTRACK_EVENT", 1, 6, 0, None, None, None, None, "direct_generation", 7, 2),
         Event("accept_via_prefetch", 2, 3, 0, 8, "prefetched_complete", 0), *random_v11(rng, 11)]
    table = _events_table({"p/a.json": ("v12", 40, a), "p/b.json": ("v11", 0, b), "p/c.json": ("v12", 0, c)})
    replayed = replay_table(table, trace_set="with_bt", run="r1")
    assert replayed.schema.equals(ARTIFACT_REPLAY_SCHEMA, check_metadata=True)
    out = replayed.to_pylist()
    assert [r["source"] for r in out] == ["p/a.json", "p/b.json", "p/c.json"]
    assert [r["semantics"] for r in out] == ["v12", "v11", "v12"]
    assert [r["profile"] for r in out] == [DEFAULT_PROFILE["v12"], DEFAULT_PROFILE["v11"], DEFAULT_PROFILE["v12"]]
    assert [r["events"] for r in out] == [6, 14, 3] and [r["problem_idx"] for r in out] == [0, 1, 2]
    assert [r["draft_tokens"] for r in out] == [sum(e.d for e in x) for x in (a, b, c)]
    assert all(r["run"] == "r1" and r["trace_set"] == "with_bt" and r["dataset"] == "gsm8k" for r in out)
    from heterospec.replay.profiles.registry import get_profile
    v12, v11 = get_profile("paper_v12"), get_profile("paper_v11")
    want = [replay_v12(a, 40, v12), replay_v11(b, v11), replay_v12(c, 0, v12)]
    assert [r["latency_ms"] for r in out] == [w.latency_ms for w in want]
    assert [r["target_tokens"] for r in out] == [w.target_tokens for w in want]
    assert [r["target_wait_ms"] for r in out] == [w.target_wait_ms for w in want]
    # one rule for all, and an explicit profile for all
    assert {(r["run"], r["trace_set"]) for r in replay_table(table).to_pylist()} == {("", "")}
    forced = replay_table(table, semantics="v11", profile="paper_v12").to_pylist()
    assert {r["semantics"] for r in forced} == {"v11"} and {r["profile"] for r in forced} == {"paper_v12"}
    assert forced[0]["latency_ms"] == replay_v11(a, v12).latency_ms
    prof = replay_table(table, profile=v11).to_pylist()
    assert prof[0]["latency_ms"] == replay_v12(a, 40, v11).latency_ms and prof[0]["profile"] == v11.name
    assert SEMANTICS == ("v12", "v11")
    with pytest.raises(UserError, match=r"unknown replay semantics 'v13'; choose one of \['v12', 'v11'\]"):
        replay_table(table, semantics="v13")


def test_each_trace_is_replayed_under_every_listed_paper_profile_of_its_format():
    """A run's profile list: a v11 trace gets one row per listed v11 paper profile (in the listed order), a v12
    trace with no v12 profile listed gets its default, a non-paper profile gets none; each row's latency is the
    reference formula's under that profile's constants."""
    from heterospec.replay.artifact.replays import replay_for_profiles
    from heterospec.replay.profiles.registry import get_profile
    rng = random.Random(11)
    a, b = random_v12(rng, 5), random_v11(rng, 8)
    table = _events_table({"p/a.json": ("v12", 30, a), "p/b.json": ("v11", 0, b)})
    out = replay_for_profiles(table, ["roofline", "paper_v11_config2", "paper_v11"], trace_set="t", run="r")
    assert out.schema.equals(ARTIFACT_REPLAY_SCHEMA, check_metadata=True)
    rows = out.to_pylist()
    assert [(r["source"], r["profile"]) for r in rows] == [
        ("p/b.json", "paper_v11_config2"), ("p/b.json", "paper_v11"), ("p/a.json", "paper_v12")]
    want = [ref_v11(b, get_profile("paper_v11_config2"))[0], ref_v11(b, get_profile("paper_v11"))[0],
            ref_v12(a, 30, get_profile("paper_v12"))[0]]
    assert [r["latency_ms"] for r in rows] == pytest.approx(want, rel=1e-12)
    assert {(r["trace_set"], r["run"]) for r in rows} == {("t", "r")}
    assert {(r["trace_set"], r["run"]) for r in replay_for_profiles(table, []).to_pylist()} == {("", "")}
    assert replay_for_profiles(table.slice(0, 0), ["paper_v12"]).equals(ARTIFACT_REPLAY_SCHEMA.empty_table())


def test_write_replay_round_trips(tmp_path):
    import pyarrow.parquet as pq
    from heterospec.replay.artifact.replays import write_replay
    table = replay_table(_events_table({"p/a.json": ("v12", 12, random_v12(random.Random(3), 4))}), run="r")
    out = write_replay(table, tmp_path / "replay.parquet")
    back = pq.read_table(out)
    assert out == tmp_path / "replay.parquet" and back.schema.names == ARTIFACT_REPLAY_SCHEMA.names
    assert back.to_pylist() == table.to_pylist()
