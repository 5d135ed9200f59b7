"""Grow a draft tree from the draft's confidence, one batched draft pass per level (EAGLE-2's expansion rule).

Each level keeps the ``width`` candidates with the highest cumulative draft log-probability whose cumulative
probability is still at least ``min_confidence``; those become nodes and are fed to the draft together (one pass,
tree mask) to propose ``top_k`` children each. Growth stops at ``depth`` levels, when no candidate is confident
enough, or when no candidate can still make the final cut. Finally the ``nodes`` likeliest nodes are kept
(cumulative log-probability never rises along a path, so the kept set contains every kept node's ancestors).
A chain is the tree with width 1 and top_k 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from heterospec.speculative.lean_decoder import draft_decoder
from heterospec.speculative.tree import DraftTree
from heterospec.models.prefix_cache import common_prefix


@dataclass(frozen=True)
class Plan:
    """What to draft this round."""
    depth: int                      # levels below the root (a chain's length)
    width: int = 1                  # nodes per level
    nodes: int = 0                  # nodes kept for verification (0: depth x width)
    top_k: int = 1                  # children proposed per node
    min_confidence: float = 0.0     # prune candidates whose cumulative draft probability is below this
    verify: int = 0                 # chains: verify only the first ``verify`` nodes (0: all); the rest is carried

    @property
    def budget(self) -> int:
        return self.nodes or self.depth * self.width


class Drafter:
    """The draft model with its KV buffer; :meth:`build` proposes a tree, :meth:`accept` keeps the accepted path."""

    def __init__(self, model, decoder: str = "auto"):
        self.dec = draft_decoder(model, decoder)
        self.max_positions = self.dec.max_positions
        self.ids: list[int] = []          # tokens whose K/V sit in slots [0, len(ids))
        self.slots: list[int] = []        # per node of the last tree: its slot, or -1 if never fed
        self.base = 0                     # slots before the last tree's nodes
        self.guess: int | None = None     # the draft's argmax before the last context token (see build)
        self.top_child: dict[int, int] = {}  # fed node of the last tree -> the draft's argmax after it

    def reset(self) -> None:
        self.ids, self.slots, self.base = [], [], 0
        self.dec.reset()

    def build(self, context: list[int], plan: Plan, carry: list[int] = ()) -> DraftTree:
        """A tree continuing ``context``; ``carry`` (drafted last round, not yet verified) forms its first nodes."""
        seq = list(context) + list(carry)
        keep = common_prefix(self.ids, seq)
        if keep == len(seq):                      # fully cached, but the logits at its end are needed
            keep -= 1
        self.dec.keep(keep)
        new = seq[keep:]
        self.caught_up = len(new)         # tokens the first pass ingests (accepted leaves, the bonus, the carry)
        self.ids = seq
        tree = DraftTree()
        for t in carry:
            tree.add(t, len(tree) - 1, 0.0)
        self.base = len(seq)
        self.slots = [len(context) + i for i in range(len(tree))]   # the carry is fed with the context
        self.top_child = {i: t for i, t in enumerate(carry[1:])}
        levels = min(plan.depth - len(carry), self.max_positions - len(seq))
        if levels <= 0:
            out = self.dec.forward(torch.tensor(new), torch.arange(keep, len(seq)), None, slice(-1, None))
            self.top_child[len(tree) - 1] = int(out[-1].argmax())
            self.guess = None
            return tree
        logits = self.dec.forward(torch.tensor(new), torch.arange(keep, len(seq)), None, slice(-2, None))
        # what the draft would have guessed for the last context token (the target's bonus token): the replay's
        # overlapped schedule drafts the next tree from that guess while the target verifies
        self.guess = int(logits[0].argmax()) if len(new) >= 2 and not carry else None
        if plan.width == 1 and plan.top_k == 1 and plan.min_confidence <= 0:
            return self._chain(tree, logits, levels)
        return self._grow(tree, plan, logits, levels)

    def _chain(self, tree: DraftTree, logits: torch.Tensor, levels: int) -> DraftTree:
        """Greedy chain: each node attends every slot before it, so the plain causal pass needs no mask."""
        for level in range(1, levels + 1):
            token = int(logits[-1].argmax())
            self.top_child[len(tree) - 1] = token            # (-1: the root)
            tree.add(token, len(tree) - 1, 0.0)
            if level == levels:
                self.slots.append(-1)
                break
            self.slots.append(self.dec.length)
            logits = self.dec.forward(torch.tensor([token]), torch.tensor([self.base - 1 + level]), None)
        return tree

    def _grow(self, tree: DraftTree, plan: Plan, logits: torch.Tensor, levels: int) -> DraftTree:
        budget, floor = plan.budget, math.log(plan.min_confidence) if plan.min_confidence > 0 else -math.inf
        root = len(tree) - 1
        # candidates: cumulative log-prob, token, parent node (children of the root first)
        lp, tok = torch.log_softmax(logits[-1].float(), -1).topk(plan.top_k)
        cand_lp, cand_tok, cand_par = lp, tok, torch.full_like(tok, root)
        self.top_child[root] = int(tok[0])
        anc = None                                         # [fed, fed]: fed tree node -> its fed ancestors + self
        fed_of = {}                                        # node -> index among fed tree nodes
        kept_lp: list[float] = []
        for level in range(1, levels + 1):
            order = cand_lp.argsort(descending=True)[: plan.width]
            order = order[cand_lp[order] >= floor]
            if len(kept_lp) >= budget:                     # a candidate must beat the budget-th best node so far
                order = order[cand_lp[order] > sorted(kept_lp, reverse=True)[budget - 1]]
            if len(order) == 0:
                break
            sel_lp, sel_tok, sel_par = cand_lp[order].tolist(), cand_tok[order].tolist(), cand_par[order].tolist()
            nodes = [tree.add(t, p, lp_) for t, p, lp_ in zip(sel_tok, sel_par, sel_lp)]
            self.slots += [-1] * len(nodes)
            kept_lp += sel_lp
            if level == levels:
                break
            # feed this level: each node sees the context, its fed ancestors and itself
            m, f = len(nodes), len(fed_of)
            if anc is None and m == 1 and fed_of.get(sel_par[0], -1) == f - 1:
                mask = None                                # still one chain: the causal pass is the tree pass
            else:
                if anc is None:                            # the first branch: the chain so far, as a mask
                    anc = torch.ones((f, f), dtype=torch.bool).tril_()
                rows = torch.zeros((m, f + m), dtype=torch.bool)
                par_fed = [fed_of.get(p, -1) for p in sel_par]
                if f and any(q >= 0 for q in par_fed):
                    idx = torch.tensor([max(q, 0) for q in par_fed])
                    rows[:, :f] = anc[idx] & torch.tensor([q >= 0 for q in par_fed])[:, None]
                rows[:, f:] = torch.eye(m, dtype=torch.bool)
                anc = torch.cat([torch.cat([anc, torch.zeros((f, m), dtype=torch.bool)], 1), rows], 0)
                mask = torch.cat([torch.ones((m, self.base), dtype=torch.bool), rows], 1)   # fed nodes follow the base
            slot0 = self.dec.length
            for j, node in enumerate(nodes):
                fed_of[node] = f + j
                self.slots[node] = slot0 + j
            pos = torch.full((m,), self.base - 1 + level, dtype=torch.long)
            out = self.dec.forward(torch.tensor(sel_tok), pos, mask)
            lp, tok = torch.log_softmax(out.float(), -1).topk(plan.top_k, dim=-1)         # [m, k]
            cand_lp = (lp + torch.tensor(sel_lp)[:, None]).flatten()
            cand_tok = tok.flatten()
            cand_par = torch.tensor(nodes).repeat_interleave(plan.top_k)
            self.top_child.update(zip(nodes, tok[:, 0].tolist()))
        return self._rerank(tree, budget)

    def _rerank(self, tree: DraftTree, budget: int) -> DraftTree:
        if len(tree) <= budget:
            return tree
        best = sorted(range(len(tree)), key=lambda i: (-tree.logps[i], i))[:budget]
        best.sort()
        new_of = {old: new for new, old in enumerate(best)}
        out = DraftTree()
        for old in best:
            p = tree.parents[old]
            out.add(tree.tokens[old], new_of[p] if p >= 0 else -1, tree.logps[old])
        self.slots = [self.slots[i] for i in best]
        self.top_child = {new_of.get(n, -1) if n >= 0 else -1: t for n, t in self.top_child.items()
                          if n < 0 or n in new_of}
        return out

    def accept(self, context_len: int, tree: DraftTree, path: list[int]) -> None:
        """Keep the round's context plus the fed nodes of ``path`` (root-down nodes of the last tree); the fed
        nodes of a path are a prefix of it (a node is fed only after its parent)."""
        extra = [self.slots[n] for n in path if self.slots[n] >= 0]
        self.dec.keep(context_len, extra)
        self.ids = self.ids[:context_len] + [tree.tokens[n] for n in path[:len(extra)]]
