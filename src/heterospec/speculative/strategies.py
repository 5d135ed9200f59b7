"""Drafting strategies: each says what to draft next round (:class:`Plan`) and learns from the round's outcome.

* ``chain``         a fixed chain of ``chain_length`` tokens.
* ``hf_heuristic``  Hugging Face assisted generation's schedule: start at ``hf_start`` tokens, +2 after a round
                    whose every drafted token was accepted, -1 (never below 1) otherwise.
* ``feedback``      DFVG's acceptance-feedback controller: draft length L in [min_draft, max_draft], at most
                    ``max_verify`` tokens checked per pass (the rest of the chain waits for the next pass); after a
                    pass with acceptance ratio >= threshold L grows x growth, otherwise it backs off x backoff.
* ``tree``          the confidence-driven dynamic tree (:mod:`heterospec.speculative.drafter`): width, depth and nodes
                    bounded by the draft accelerator's parallel lanes.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from heterospec.speculative.drafter import Plan
from heterospec.errors import UserError

STRATEGIES = ("chain", "hf_heuristic", "feedback", "tree")


class Strategy(ABC):
    name: str = ""

    @abstractmethod
    def plan(self) -> Plan:
        """What to draft this round."""

    def update(self, verified: int, accepted: int) -> None:
        """The round checked ``verified`` drafted tokens and accepted ``accepted`` of them."""


class Chain(Strategy):
    name = "chain"

    def __init__(self, length: int):
        self.length = length

    def plan(self) -> Plan:
        return Plan(depth=self.length)


class HfHeuristic(Strategy):
    name = "hf_heuristic"

    def __init__(self, start: int):
        self.length = start

    def plan(self) -> Plan:
        return Plan(depth=self.length)

    def update(self, verified: int, accepted: int) -> None:
        self.length = self.length + 2 if accepted == verified else max(1, self.length - 1)


class Feedback(Strategy):
    name = "feedback"

    def __init__(self, min_draft: int, max_draft: int, max_verify: int, threshold: float, backoff: float,
                 growth: float):
        self.min, self.max, self.window = min_draft, max_draft, max_verify
        self.threshold, self.backoff, self.growth = threshold, backoff, growth
        self.length = float(min_draft)

    def plan(self) -> Plan:
        return Plan(depth=int(self.length), verify=self.window)

    def update(self, verified: int, accepted: int) -> None:
        ratio = accepted / verified if verified else 0.0
        scale = self.growth if ratio >= self.threshold else self.backoff
        self.length = min(self.max, max(self.min, self.length * scale))


class Tree(Strategy):
    name = "tree"

    def __init__(self, max_width: int, max_depth: int, max_nodes: int, top_k: int, min_confidence: float):
        self.p = Plan(depth=max_depth, width=max_width, nodes=max_nodes, top_k=top_k, min_confidence=min_confidence)

    def plan(self) -> Plan:
        return self.p


def draft_lanes(hw: Any) -> int:
    """The draft accelerator's parallel lanes (``fpga.draft_lanes`` of a typed Device)."""
    lanes = hw.fabric.draft_lanes if hw.fabric is not None else None
    if not lanes:
        raise UserError(f"hardware '{hw.name}' has no fpga.draft_lanes; DFVG's tree is bounded by it")
    return lanes


def check_tree(tree: Any, lanes: int, hw_name: str) -> None:
    """The tree must fit the accelerator: width <= lanes, nodes <= lanes x depth."""
    if tree.max_width > lanes:
        raise UserError(f"token_speculation.tree.max_width={tree.max_width} exceeds the {lanes} parallel draft lanes of "
                        f"'{hw_name}' (fpga.draft_lanes)")
    if tree.max_nodes > lanes * tree.max_depth:
        raise UserError(f"token_speculation.tree.max_nodes={tree.max_nodes} exceeds what '{hw_name}' drafts in "
                        f"{tree.max_depth} levels ({lanes} lanes x {tree.max_depth} = {lanes * tree.max_depth})")


def make_strategy(name: str, knobs: Any, lanes: int | None = None, hw_name: str = "") -> Strategy:
    """The strategy ``name`` with its knobs from the ``token_speculation`` config (and the tree checked against
    ``lanes``)."""
    if name == "chain":
        return Chain(int(knobs.chain_length))
    if name == "hf_heuristic":
        return HfHeuristic(int(knobs.hf_start))
    if name == "feedback":
        f = knobs.feedback
        return Feedback(int(f.min_draft), int(f.max_draft), int(f.max_verify), float(f.threshold),
                        float(f.backoff), float(f.growth))
    if name == "tree":
        t = knobs.tree
        if lanes is not None:
            check_tree(t, lanes, hw_name)
        return Tree(int(t.max_width), int(t.max_depth), int(t.max_nodes), int(t.top_k), float(t.min_confidence))
    raise UserError(f"unknown DFVG strategy '{name}'; choose one of {list(STRATEGIES)}")
