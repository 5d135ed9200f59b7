"""The batching policies' passes against hand-worked timelines: members of one pass that each leave when their own
work is done, lanes that take a newcomer at the next pass and a batched prefill that makes it wait for the next
batch, the KV bound on who joins, and a cancel under contention. Each case is a few operations driven through a
policy's :class:`~heterospec.replay.load.batching.server.Server` by a minimal event loop, the numbers worked by hand
in each docstring."""
from __future__ import annotations

import math

import pytest

from heterospec.replay.load.batching import Bounds, get_policy


class Op:
    """An operation as a policy sees it: its work (ms at batch 1), its context and how a cancel cuts it."""

    def __init__(self, name: str, work: float, ctx: int = 0, atomic: float = 0.0, grain: float = 0.0):
        self.name, self.final, self.ctx_tokens, self.atomic, self.grain = name, work, ctx, atomic, grain
        self.vstart = self.vfin = 0.0


def curve(b: int, ctx: float) -> float:
    """Two sequences in a pass cost 1.3 x one, three 1.6 x (0.3 per sequence past the first)."""
    return 1.0 + 0.3 * (b - 1)


def drive(policy: str, bounds: Bounds, arrivals: list[tuple[float, Op]], cuts=()) -> dict[str, float]:
    """Every operation's end (ms): arrivals join the queue at their time; a cut (time, name) ends the named
    operation's cancelling op then. The loop advances to the next arrival, cut or end."""
    server = get_policy(policy)(policy, bounds, curve)
    arrivals, cuts, ends = sorted(arrivals, key=lambda a: a[0]), sorted(cuts), {}
    ops = {op.name: op for _, op in arrivals}
    while arrivals or cuts or server.busy or server.queue:
        now = min(server.next_end(), arrivals[0][0] if arrivals else math.inf, cuts[0][0] if cuts else math.inf)
        assert now < math.inf, "work queued and nothing left to happen"
        server.advance(now)
        for op in server.ended(now):
            ends[op.name] = now
        while cuts and cuts[0][0] <= now:
            name = cuts.pop(0)[1]
            if server.cut(ops[name], now):
                ends[name] = now
        while arrivals and arrivals[0][0] <= now:
            server.offer(arrivals.pop(0)[1], now)
        server.fill(now)
    return ends


@pytest.mark.parametrize("policy", ["lanes", "batched_prefill"])
@pytest.mark.parametrize("pace", [1.0, 2.0])
def test_each_member_of_a_pass_leaves_when_its_own_work_is_done(policy, pace):
    """4 and 40 ms of work in one pass of two at 1.3 x: both advance 1 / 1.3 ms of work per ms, so the short one
    leaves at 4 x 1.3 = 5.2 ms; the long one has then done 4 and does its other 36 alone: 41.2 ms. At pace 2 (a lane
    with half the board's bandwidth) every time doubles: 10.4 and 82.4. Ending both together at the pass's mean
    (1.3 x 22 = 28.6 ms) would finish the long one sooner than alone."""
    ends = drive(policy, Bounds(max_batch=2, pace=pace), [(0.0, Op("short", 4.0)), (0.0, Op("long", 40.0))])
    assert ends == pytest.approx({"short": 5.2 * pace, "long": 41.2 * pace})


def test_a_lane_takes_a_newcomer_at_the_next_pass():
    """40 ms alone from 0; a 4 ms one arrives at 10 and joins at once: from 10 both at 1.3 x, the newcomer leaves at
    10 + 5.2 = 15.2, the first has done 10 + 4 = 14 and ends its other 26 alone at 41.2."""
    ends = drive("lanes", Bounds(max_batch=2), [(0.0, Op("first", 40.0)), (10.0, Op("late", 4.0))])
    assert ends == pytest.approx({"first": 41.2, "late": 15.2})


def test_a_batched_prefill_makes_a_newcomer_wait_for_the_next_batch():
    """The same two on the PRM: the newcomer waits for the running batch to empty (40 ms) and runs alone: 44."""
    ends = drive("batched_prefill", Bounds(max_batch=2), [(0.0, Op("first", 40.0)), (10.0, Op("late", 4.0))])
    assert ends == pytest.approx({"first": 40.0, "late": 44.0})


def test_an_idle_lane_takes_the_newcomer_before_a_busy_one():
    """Two lanes of up to two: the second arrival goes to the idle lane (both alone: 20 and 10 + 20 = 30); the third
    joins the lane with fewest members (the first, ties to the first lane), where both run at 1.3 x from 15: the
    first has done 15, its 5 left take 6.5 (ends 21.5); the third does 5 of its 10 by then and 5 alone: 26.5."""
    ends = drive("lanes", Bounds(lanes=2, max_batch=2),
                 [(0.0, Op("a", 20.0)), (10.0, Op("b", 20.0)), (15.0, Op("c", 10.0))])
    assert ends == pytest.approx({"a": 21.5, "b": 30.0, "c": 26.5})


@pytest.mark.parametrize("policy", ["lanes", "batched_prefill", "continuous"])
def test_the_kv_bound_keeps_a_member_out_first_come_first_served(policy):
    """KV for 100 context tokens: 60 + 60 do not fit, so the second waits for the first (40 ms) and runs alone
    (40 + 10 = 50); the small third (ctx 10) would fit beside the first but does not pass the second: it joins the
    second (in the batched prefill too, which starts them together) at 1.3 x, 10 ms each: both end at 40 + 13 = 53.
    An operation larger than the bound still runs alone."""
    ends = drive(policy, Bounds(max_batch=4, kv_tokens=100),
                 [(0.0, Op("a", 40.0, ctx=60)), (1.0, Op("b", 10.0, ctx=60)), (2.0, Op("c", 10.0, ctx=10))])
    assert ends == pytest.approx({"a": 40.0, "b": 53.0, "c": 53.0})
    assert drive(policy, Bounds(max_batch=4, kv_tokens=100), [(0.0, Op("big", 5.0, ctx=500))]) == \
        pytest.approx({"big": 5.0})


@pytest.mark.parametrize("policy", ["lanes", "continuous"])
def test_a_cancel_under_contention_stops_one_member_and_speeds_the_other(policy):
    """Two 40 ms members at 1.3 x; the first's cancelling op ends at 13 ms, when each has done 10. Without a grain it
    stops there and the other does its 30 left alone: 43. With 4 ms tokens it finishes the token in progress (to
    12, at 13 + 2 x 1.3 = 15.6) and the other, also at 12 then, ends at 15.6 + 28 = 43.6. An atomic part of 20 ms (a
    prefill) runs to its end: at 13 + 10 x 1.3 = 26, the other at 26 + 20 = 46."""
    two = [(0.0, Op("cut", 40.0)), (0.0, Op("other", 40.0))]
    assert drive(policy, Bounds(max_batch=2), two, cuts=[(13.0, "cut")]) == \
        pytest.approx({"cut": 13.0, "other": 43.0})
    two = [(0.0, Op("cut", 40.0, grain=4.0)), (0.0, Op("other", 40.0))]
    assert drive(policy, Bounds(max_batch=2), two, cuts=[(13.0, "cut")]) == \
        pytest.approx({"cut": 15.6, "other": 43.6})
    two = [(0.0, Op("cut", 40.0, atomic=20.0)), (0.0, Op("other", 40.0))]
    assert drive(policy, Bounds(max_batch=2), two, cuts=[(13.0, "cut")]) == \
        pytest.approx({"cut": 26.0, "other": 46.0})
