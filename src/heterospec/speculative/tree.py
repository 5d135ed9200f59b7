"""A draft tree: nodes in breadth-first order (every parent before its children), each with its token, parent,
depth and cumulative draft log-probability. Node ``-1`` is the root: the last committed token."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)     # drafted token of each node
    parents: list[int] = field(default_factory=list)    # parent node index; -1: the root
    depths: list[int] = field(default_factory=list)     # 1 for the root's children
    logps: list[float] = field(default_factory=list)    # cumulative draft log-probability from the root

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def add(self, token: int, parent: int, logp: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        self.logps.append(logp)
        return len(self.tokens) - 1

    def is_chain(self) -> bool:
        """Node i's parent is node i-1: the plain causal mask is the tree mask."""
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def prefix(self, n: int) -> "DraftTree":
        """The first ``n`` nodes (a subtree, since parents come first)."""
        return DraftTree(self.tokens[:n], self.parents[:n], self.depths[:n], self.logps[:n])

    def children(self) -> dict[int, dict[int, int]]:
        """parent -> {token: child}; the first child with a token wins (the likelier one, by construction)."""
        out: dict[int, dict[int, int]] = {}
        for i, (t, p) in enumerate(zip(self.tokens, self.parents)):
            out.setdefault(p, {}).setdefault(t, i)
        return out

    def main_path(self) -> list[int]:
        """The draft's own best guess: from the root, always the first (likeliest) child."""
        kids = self.children()
        path, node = [], -1
        while kids.get(node):
            node = next(iter(kids[node].values()))
            path.append(node)
        return path

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node``."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def ancestor_mask(self) -> torch.Tensor:
        """[n, n] bool: row i attends node j iff j is i or one of its ancestors (one vectorised step per level)."""
        n = len(self)
        if self.is_chain():
            return torch.ones((n, n), dtype=torch.bool).tril_()
        m = torch.eye(n, dtype=torch.bool)
        parent = torch.tensor(self.parents, dtype=torch.long)
        rows, up = torch.arange(n), parent.clone()
        for _ in range(self.depth - 1):     # up: each node's ancestor one level higher per step
            live = up >= 0
            m[rows[live], up[live]] = True
            up = torch.where(live, parent[up.clamp(min=0)], up)
        return m
