"""RSD / BRSD at the edges: scores exactly at a threshold, an anchor exactly ``ancestor_limit`` steps up, ties
between target children, the backtrack cap reached exactly, and why reasoning stops. Expected paths are worked
out by hand from the algorithm in the paper (HeteroReason, Alg. 1 and 2), using the scripted executor of
test_controller."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from heterospec.reasoning.controller import Node, finished, nearest_anchor, solve
from heterospec.reasoning.roles import Step
from test_controller import Scripted, alg, names


def test_a_draft_step_scored_exactly_at_the_threshold_is_accepted():
    ex = Scripted({"d1": 0.7}, final_at=2)
    out = solve(ex, alg(backtrack=False))
    assert names(out) == ["d0", "d1", "d2"] and not any(c.startswith("target") for c in ex.calls)
    # just below it, the target rewrites
    ex = Scripted({"d1": 0.7 - 1e-9}, final_at=2)
    assert names(solve(ex, alg(backtrack=False))) == ["d0", "t1", "d2"]


def test_a_rewrite_scored_exactly_at_the_backtrack_threshold_stands():
    ex = Scripted({"d1": 0.1, "t1": 0.6}, final_at=2)
    out = solve(ex, alg(backtrack_threshold=0.6))
    assert names(out) == ["d0", "t1", "d2"] and out.backtracks == 0
    assert [n.score for n in out.path] == [0.9, 0.6, 0.9]
    # just below it, BRSD backtracks to d0
    ex = Scripted({"d1": 0.1, "t1": 0.6 - 1e-9}, final_at=2)
    assert solve(ex, alg(backtrack_threshold=0.6)).backtracks == 1


def _chain(*nodes):
    return [SimpleNamespace(author=a, intervened=i) for a, i in nodes]


def test_anchor_exactly_ancestor_limit_up_is_found():
    # position 0 is 4 steps up from the end of a 4-step path: within limit 4, beyond limit 3
    path = _chain(("draft", False), ("target", True), ("draft", True), ("target", True))
    assert nearest_anchor(path, 4) == 0
    assert nearest_anchor(path, 3) is None
    assert nearest_anchor(path, 1) is None and nearest_anchor(path, 0) is None
    assert nearest_anchor(_chain(("draft", False)), 1) == 0
    assert nearest_anchor([], 5) is None
    # the nearest of two eligible ancestors; a draft node already intervened or a target node never is
    path = _chain(("draft", False), ("draft", False), ("target", False), ("draft", True))
    assert nearest_anchor(path, 10) == 1


def test_brsd_reaches_an_anchor_exactly_ancestor_limit_up():
    # d0 d1 pass; t2 is a passing rescue (intervened, target); at position 3 both d3 and t3 fail.
    # The nearest draft ancestor not yet intervened is d1: 2 steps up from position 3.
    scores = {"d0/d1|d2": 0.1, "t2": 0.8, "d0/d1/t2|d3": 0.1, "d0/d1/t2|t3": 0.2, "t1": 0.95}
    ex = Scripted(scores, final_at=4)
    out = solve(ex, alg(ancestor_limit=2))
    assert "target@1:backtrack" in ex.calls and out.backtracks == 1
    assert names(out) == ["d0", "t1", "d2", "d3", "d4"]
    # with a limit of 1 the anchor is out of reach: the failed rewrite t3 stays, no backtrack counted
    ex = Scripted(scores, final_at=4)
    out = solve(ex, alg(ancestor_limit=1))
    assert out.backtracks == 0 and not any(c.endswith("backtrack") for c in ex.calls)
    assert names(out) == ["d0", "d1", "t2", "t3", "d4"]


def test_a_tie_between_target_children_keeps_the_child_in_place():
    # the anchor's rewrite t1 scores exactly what the failed t2 scored: not better, so t2 stays
    ex = Scripted({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.3}, final_at=3)
    out = solve(ex, alg())
    assert names(out) == ["d0", "d1", "t2", "d3"] and out.backtracks == 1
    assert out.path[0].intervened is False and out.path[1].intervened is True   # d1's intervention is spent
    # a hair better and reasoning continues from the anchor with t1
    ex = Scripted({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.3 + 1e-9}, final_at=3)
    out = solve(ex, alg())
    assert names(out) == ["d0", "t1", "d2", "d3"] and out.path[1].score == pytest.approx(0.3 + 1e-9)
    assert out.path[1].author == "target" and out.path[1].intervened


def test_backtracks_stop_exactly_at_the_cap():
    # d0..d3 pass, every later step and every rewrite fails: positions 4..7 each backtrack until the cap is spent
    scores = {f"d{i}": 0.1 for i in range(4, 12)} | {f"t{i}": 0.1 for i in range(12)}
    for cap in (0, 1, 2, 3, 4):
        ex = Scripted(scores, final_at=8)
        out = solve(ex, alg(max_backtracks=cap, max_steps=8))
        assert out.backtracks == cap == sum(c.endswith(":backtrack") for c in ex.calls)


def test_rsd_never_backtracks_and_records_authors_and_scores():
    ex = Scripted({"d1": 0.2, "d2": 0.2}, final_at=3)
    out = solve(ex, alg(backtrack=False))
    assert [(n.author, n.score, n.intervened) for n in out.path] == [
        ("draft", 0.9, False), ("target", None, True), ("target", None, True), ("draft", 0.9, False)]
    assert ex.calls == ["draft@0", "prm:d0", "draft@1", "prm:d1", "target@1:rescue", "draft@2", "prm:d2",
                        "target@2:rescue", "draft@3", "prm:d3"]


class _Stops(Scripted):
    """A draft whose step ``stop_at`` ends with EOS, or is cut short (incomplete)."""

    def __init__(self, stop_at: int, kind: str):
        super().__init__({}, final_at=99)
        self.stop_at, self.kind = stop_at, kind

    def _step(self, name, pos):
        if pos != self.stop_at:
            return super()._step(name, pos)
        return Step([pos], name, complete=self.kind != "max_tokens", eos=self.kind == "eos")


@pytest.mark.parametrize("kind", ["eos", "max_tokens"])
def test_reasoning_stops_at_eos_or_a_cut_step(kind):
    out = solve(_Stops(2, kind), alg(max_steps=10))
    assert out.stop == kind and len(out.path) == 3


def test_why_a_step_ends_reasoning():
    assert finished(Step([1], "x", True, True)) == "eos"
    assert finished(Step([1], "so \\boxed{3}", True, True)) == "eos"            # EOS wins over the answer
    assert finished(Step([1], "so \\boxed{3}", False, False)) == "answer"       # an answer wins over a cut
    assert finished(Step([1], "half a st", False, False)) == "max_tokens"
    assert finished(Step([1], "a step\n\n", True, False)) is None


def test_max_steps_counts_every_node():
    out = solve(Scripted({"d1": 0.1}, final_at=99), alg(max_steps=3, backtrack=False))
    assert len(out.path) == 3 and out.stop == "max_steps" and names(out) == ["d0", "t1", "d2"]
    assert isinstance(out.path[0], Node)


class _Recording(Scripted):
    """Also records who each PRM call is for and every verdict the controller settles."""

    def __init__(self, scores, final_at):
        super().__init__(scores, final_at)
        self.authors: list[tuple[str, str]] = []
        self.verdicts: list[tuple[int, str, str]] = []

    def verify(self, path, step, author):
        self.authors.append((step.text.strip(), author))
        return super().verify(path, step, author)

    def settle(self, path, step, verdict):
        self.verdicts.append((len(path), step.text.strip(), verdict))


def test_the_executor_is_told_each_author_and_each_verdict():
    ex = _Recording({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.5, "d1": 0.8}, final_at=3)
    solve(ex, alg())
    assert ex.authors == [("d0", "draft"), ("d1", "draft"), ("d2", "draft"), ("t2", "target"), ("t1", "target"),
                          ("d2", "draft"), ("\\boxed{d3}", "draft")]
    # one verdict per scored step, right after its score, on the path it was written after: t2 fails and sets off
    # a backtrack to d1; the anchor's rewrite t1 fails too but beats t2, so it stays on the path
    assert ex.verdicts == [(0, "d0", "accept"), (1, "d1", "accept"), (2, "d2", "reject"), (2, "t2", "backtrack"),
                           (1, "t1", "kept"), (2, "d2", "accept"), (3, "\\boxed{d3}", "accept")]


def test_a_target_step_exactly_at_the_backtrack_threshold_is_settled_as_accepted():
    # BRSD: the rescue t1 scores exactly the backtrack threshold, so it passes: accepted after d0
    ex = _Recording({"d1": 0.1, "t1": 0.6}, final_at=2)
    solve(ex, alg(backtrack_threshold=0.6))
    assert ex.verdicts == [(0, "d0", "accept"), (1, "d1", "reject"), (1, "t1", "accept"), (2, "\\boxed{d2}", "accept")]
    # t2 fails and sets off a backtrack to d1; the anchor's rewrite t1 scores exactly the threshold: accepted, not
    # merely kept as the better child
    ex = _Recording({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.6}, final_at=3)
    solve(ex, alg(backtrack_threshold=0.6))
    assert ex.verdicts == [(0, "d0", "accept"), (1, "d1", "accept"), (2, "d2", "reject"), (2, "t2", "backtrack"),
                           (1, "t1", "accept"), (2, "d2", "accept"), (3, "\\boxed{d3}", "accept")]


@pytest.mark.parametrize("cap, limit, verdict", [(0, 10, "kept"), (1, 0, "kept"), (1, 10, "backtrack")])
def test_a_failed_rewrite_backtracks_only_while_the_cap_and_an_anchor_allow(cap, limit, verdict):
    ex = _Recording({"d1": 0.1, "d0|t1": 0.2, "t0": 0.1}, final_at=2)
    out = solve(ex, alg(max_backtracks=cap, ancestor_limit=limit))
    assert ex.verdicts[2] == (1, "t1", verdict) and out.backtracks == (verdict == "backtrack")
    if verdict == "backtrack":   # the anchor's rewrite t0 scores worse than t1: dropped, t1 stays
        assert ex.verdicts[3] == (0, "t0", "reject") and names(out)[:2] == ["d0", "t1"]
