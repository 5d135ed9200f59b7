"""The RSD / BRSD decision rules, driven by a scripted executor whose PRM scores are chosen per step.

The executor below is not a model stand-in for a stage: it is the test's way of choosing which
steps pass the PRM, so that every branch of the paper's algorithm (accept, rescue, backtrack to the
nearest ancestor, the ancestor limit, the backtrack cap, one intervention per node, the best target
child) is exercised exactly.
"""
from __future__ import annotations

from types import SimpleNamespace

from heterospec.reasoning.controller import nearest_anchor, solve
from heterospec.reasoning.roles import Step


def alg(**kw):
    base = dict(backtrack=True, threshold=0.7, backtrack_threshold=0.7, max_backtracks=5, ancestor_limit=10,
                max_steps=20)
    base.update(kw)
    return SimpleNamespace(**base)


class Scripted:
    """Steps are named by author and position (d3, t3); ``scores`` maps a name (and path) to a reward."""

    def __init__(self, scores: dict[str, float], final_at: int, default: float = 0.9):
        self.scores, self.final_at, self.default = scores, final_at, default
        self.calls: list[str] = []

    def _step(self, name: str, pos: int) -> Step:
        text = f"{name}\n\n" if pos < self.final_at else f"\\boxed{{{name}}}"
        return Step([pos], text, True, False)

    def propose(self, path):
        self.calls.append(f"draft@{len(path)}")
        return self._step(f"d{len(path)}", len(path))

    def verify(self, path, step, author):
        name = step.text.strip().removeprefix("\\boxed{").removesuffix("}")
        self.calls.append(f"prm:{name}")
        key = "/".join(n.step.text.strip() for n in path) + "|" + name
        return self.scores.get(key, self.scores.get(name, self.default))

    def settle(self, path, step, verdict):
        pass

    def rewrite(self, path, why):
        self.calls.append(f"target@{len(path)}:{why}")
        return self._step(f"t{len(path)}", len(path))


def names(out):
    return [n.step.text.strip().removeprefix("\\boxed{").removesuffix("}") for n in out.path]


def test_all_accepted():
    out = solve(Scripted({}, final_at=3), alg())
    assert names(out) == ["d0", "d1", "d2", "d3"] and out.stop == "answer" and out.backtracks == 0


def test_rsd_rescue_is_not_scored():
    ex = Scripted({"d1": 0.2, "t1": 0.1}, final_at=3)
    out = solve(ex, alg(backtrack=False))
    assert names(out) == ["d0", "t1", "d2", "d3"]
    assert "prm:t1" not in ex.calls and out.backtracks == 0


def test_brsd_accepts_a_passing_rewrite():
    ex = Scripted({"d1": 0.2, "t1": 0.8}, final_at=3)
    out = solve(ex, alg())
    assert names(out) == ["d0", "t1", "d2", "d3"] and "prm:t1" in ex.calls and out.backtracks == 0


def test_brsd_backtracks_to_nearest_draft_ancestor():
    # d2 fails, its rewrite t2 fails too: the target rewrites position 1 (the nearest draft ancestor)
    ex = Scripted({"d0/d1|d2": 0.1, "d0/d1|t2": 0.1, "t1": 0.9}, final_at=3)
    out = solve(ex, alg())
    assert ex.calls[ex.calls.index("target@2:rescue") + 2] == "target@1:backtrack"
    assert names(out)[:2] == ["d0", "t1"] and out.backtracks == 1


def test_anchor_skips_intervened_nodes_and_respects_the_limit():
    path = [SimpleNamespace(author=a, intervened=i) for a, i in
            [("draft", False), ("target", True), ("draft", True), ("target", True)]]
    assert nearest_anchor(path, limit=10) == 0
    assert nearest_anchor(path, limit=3) is None            # position 0 is 4 steps up


def test_failed_anchor_rewrite_keeps_the_best_target_child():
    # the anchor's rewrite t1 scores 0.05, below the failed t2 (0.3): reasoning keeps t2 at position 2
    ex = Scripted({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.05}, final_at=3)
    out = solve(ex, alg())
    assert names(out) == ["d0", "d1", "t2", "d3"] and out.backtracks == 1
    # ... and if the anchor's rewrite is the better child, reasoning continues from the anchor
    ex = Scripted({"d0/d1|d2": 0.1, "d0/d1|t2": 0.3, "t1": 0.5}, final_at=3)
    out = solve(ex, alg())
    assert names(out) == ["d0", "t1", "d2", "d3"]


def test_backtrack_cap_and_one_intervention_per_node():
    # every rewrite fails: each backtrack spends one ancestor's intervention, never the same node twice
    scores = {f"t{i}": 0.1 for i in range(20)} | {f"d{i}": (0.9 if i < 6 else 0.1) for i in range(20)}
    ex = Scripted(scores, final_at=12)
    out = solve(ex, alg(max_backtracks=3, max_steps=12))
    anchors = [c for c in ex.calls if c.endswith(":backtrack")]
    assert out.backtracks == 3 and len(anchors) == 3 and len(set(anchors)) == 3


def test_max_steps_stops():
    out = solve(Scripted({}, final_at=99), alg(max_steps=4))
    assert len(out.path) == 4 and out.stop == "max_steps"
