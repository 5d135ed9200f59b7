"""RSD and BRSD, top to bottom as in the paper.

Per step: the draft writes a step; the PRM scores it; a score at or above the threshold accepts
it; otherwise the target rewrites the step. In BRSD the rewrite is scored too, and a rewrite that
still fails backtracks: the target rewrites the nearest ancestor that can still be intervened
(one intervention per node, at most ``ancestor_limit`` steps up, at most ``max_backtracks`` per
problem); when that fails too, reasoning continues with the best target child.

*How* the calls run (one after another, or overlapped across devices) is the executor's business
(:mod:`heterospec.reasoning.executors`); the decisions here are the same for every executor, and the controller
tells the executor each one (:data:`VERDICTS`), so its trace records them rather than working them out again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from heterospec.grading import last_boxed
from heterospec.reasoning.roles import Step


# What became of a scored step: it passed and joins the path; it failed and is dropped; a failed rewrite set off a
# backtrack; a failed rewrite stays on the path all the same (no backtrack left or in reach, or the best child)
ACCEPT, REJECT, BACKTRACK, KEPT = "accept", "reject", "backtrack", "kept"
VERDICTS = (ACCEPT, REJECT, BACKTRACK, KEPT)


@dataclass
class Node:
    """A step on the reasoning path."""
    step: Step
    author: str                 # draft | target
    score: float | None         # PRM reward (None: a target step RSD did not score)
    intervened: bool = False    # the target has already intervened at this position


@dataclass
class Outcome:
    path: list[Node] = field(default_factory=list)
    backtracks: int = 0
    stop: str = "max_steps"     # eos | answer | max_tokens | max_steps


class Executor(Protocol):
    """The four things the controller asks of the devices."""

    def propose(self, path: list[Node]) -> Step: ...                          # draft: next step
    def verify(self, path: list[Node], step: Step, author: str) -> float: ...  # PRM: its reward
    def settle(self, path: list[Node], step: Step, verdict: str) -> None: ...  # on the step just verified
    def rewrite(self, path: list[Node], why: str) -> Step: ...                # target: its own step


def finished(step: Step) -> str | None:
    """Why reasoning stops after this step, or None to go on."""
    if step.eos:
        return "eos"
    if last_boxed(step.text) is not None:
        return "answer"
    if not step.complete:
        return "max_tokens"
    return None


def solve(ex: Executor, alg) -> Outcome:
    """Run RSD (``alg.backtrack`` false) or BRSD on one problem through ``ex``."""
    out = Outcome()
    path = out.path
    while len(path) < alg.max_steps:
        step = ex.propose(path)                                   # 1. the draft writes a step
        score = ex.verify(path, step, "draft")                    # 2. the PRM scores it
        accepted = score >= alg.threshold
        ex.settle(path, step, ACCEPT if accepted else REJECT)
        if accepted:                                              # 3. accept the draft's step
            node = Node(step, "draft", score)
        else:                                                     # 4. the target rewrites it
            node = Node(ex.rewrite(path, "rescue"), "target", None, intervened=True)
            if alg.backtrack:                                     # BRSD: the rewrite must pass too
                node.score = ex.verify(path, node.step, "target")
                if node.score >= alg.backtrack_threshold:
                    ex.settle(path, node.step, ACCEPT)
                elif out.backtracks < alg.max_backtracks and nearest_anchor(path, alg.ancestor_limit) is not None:
                    ex.settle(path, node.step, BACKTRACK)
                    path, node = _backtrack(ex, alg, path, node, out)
                else:
                    ex.settle(path, node.step, KEPT)
        path.append(node)
        why = finished(node.step)
        if why:
            out.stop = why
            break
    out.path = path
    return out


def nearest_anchor(path: list[Node], limit: int) -> int | None:
    """Index of the nearest ancestor (at most ``limit`` up) that the target has not yet intervened."""
    for i in range(len(path) - 1, max(-1, len(path) - 1 - limit), -1):
        if path[i].author == "draft" and not path[i].intervened:
            return i
    return None


def _backtrack(ex: Executor, alg, path: list[Node], failed: Node, out: Outcome) -> tuple[list[Node], Node]:
    """The target's rewrite failed: rewrite the anchor (there is one) instead; keep whichever target child scores
    better."""
    anchor = nearest_anchor(path, alg.ancestor_limit)
    out.backtracks += 1
    path[anchor].intervened = True                                # its one intervention is spent now
    base = path[:anchor]
    retry = Node(ex.rewrite(base, "backtrack"), "target", None, intervened=True)
    retry.score = ex.verify(base, retry.step, "target")
    if retry.score >= alg.backtrack_threshold or retry.score > failed.score:
        ex.settle(base, retry.step, ACCEPT if retry.score >= alg.backtrack_threshold else KEPT)
        return base, retry                                        # continue from the anchor
    ex.settle(base, retry.step, REJECT)
    return path, failed                                           # the best target child stays
