"""Tree verification on the target: one forward pass over the pending token and every tree node.

The target's KV cache holds the committed context except its last token (the *pending* one, whose logits predict
the first drafted level). The pass feeds ``[pending] + tree`` with per-node positions (context length - 1 + depth)
and a 4D mask in which each node sees the cache, the pending token, its ancestors and itself, handed to the model
prepared (``attention_mask={"full_attention": mask}``) so transformers uses it as is.

* greedy: walk from the root while the target's argmax at the current node is one of its children; the argmax at
  the last accepted node is the bonus token. The result is the target's own greedy continuation.
* sampling: at each node draw one token from the target's distribution; it is accepted when it is one of the
  node's children, else it is the bonus token. This is speculative sampling with each child a point-mass proposal
  (accept x with probability p(x), else drop x from p, renormalise and try the next child; the bonus token from
  what is left): that rule picks each child and each bonus token with exactly these probabilities, so the output
  is distributed as the target's sampling (tests check it by chi-square).

Afterwards the cache keeps the context, the pending token and the accepted path's nodes (rejected nodes dropped).
"""
from __future__ import annotations

import inspect

import torch

from heterospec.errors import UserError
from heterospec.models.prefix_cache import common_prefix
from heterospec.speculative.tree import DraftTree


def walk(tree: DraftTree, token_at) -> tuple[list[int], int]:
    """Accepted nodes (root down) and the next token: follow the tree while the target's token at the current node,
    ``token_at(row)`` (row 0: the pending token, row 1 + i: node i), is one of its children."""
    kids = tree.children()
    path, node = [], -1
    while True:
        token = token_at(node + 1)
        child = kids.get(node, {}).get(token)
        if child is None:
            return path, token
        path.append(child)
        node = child


def greedy_walk(tree: DraftTree, pred: list[int]) -> tuple[list[int], int]:
    """``pred[0]``: target argmax at the pending token, ``pred[1 + i]`` at node i."""
    return walk(tree, pred.__getitem__)


def sample_walk(tree: DraftTree, probs: torch.Tensor, gen: torch.Generator) -> tuple[list[int], int]:
    """Speculative sampling over the tree; ``probs``: [1 + nodes, vocab] target distributions (row 0: pending)."""
    return walk(tree, lambda row: int(torch.multinomial(probs[row], 1, generator=gen)))


class Verifier:
    """The target model and its KV cache."""

    def __init__(self, model, temperature: float = 0.0, seed: int = 0):
        from transformers import DynamicCache
        self.model = model
        self.device = next(model.parameters()).device
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)
        self.max_positions = int(model.config.max_position_embeddings)
        impl = model.config._attn_implementation or "sdpa"
        if impl not in ("sdpa", "eager"):
            raise UserError(f"tree verification needs the sdpa or eager attention; the target uses '{impl}'")
        self.additive_mask = impl == "eager"
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._new_cache = lambda: DynamicCache(config=model.config)
        self.cache = self._new_cache()
        self.cached = 0
        self.ids: list[int] = []      # the tokens whose K/V the cache holds
        self.processed = 0            # tokens fed through the target (prefills and verification passes)

    def start(self, prompt: list[int]) -> None:
        """Prefill all but the prompt's last token (the first round's pending token)."""
        self.cache, self.cached, self.ids = self._new_cache(), 0, []
        self._prefill(prompt[:-1])

    def _prefill(self, tokens: list[int]) -> None:
        if tokens:
            with torch.no_grad():   # the cache passed in is filled whatever the config's use_cache says
                self.model(input_ids=torch.tensor([tokens], device=self.device), logits_to_keep=1,
                           position_ids=torch.arange(self.cached, self.cached + len(tokens), device=self.device)[None],
                           **{self.cache_arg: self.cache})
            self.ids += tokens
            self.cached += len(tokens)
            self.processed += len(tokens)

    def resume(self, context: list[int]) -> int:
        """Make the cache hold all of ``context`` but its last token, keeping the prefix it already holds; returns
        the tokens fed."""
        keep = common_prefix(self.ids, context[:-1])
        if keep < self.cached:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., :keep, :], layer.values[..., :keep, :]
            self.ids, self.cached = self.ids[:keep], keep
        before = self.processed
        self._prefill(list(context[keep:-1]))
        return self.processed - before

    @torch.no_grad()
    def verify(self, context: list[int], tree: DraftTree) -> tuple[list[int], int]:
        """Accepted nodes (root down) and the next token; the cache then covers context + accepted nodes."""
        L, n = len(context), len(tree)
        assert self.cached == L - 1, (self.cached, L)
        ids = torch.tensor([[context[-1], *tree.tokens]])
        pos = torch.tensor([[L - 1, *[L - 1 + d for d in tree.depths]]])
        mask = torch.ones((1 + n, L + n), dtype=torch.bool)
        mask[:, L:] = False
        if n:
            mask[1:, L:] = tree.ancestor_mask()
        mask4 = mask[None, None]
        if self.additive_mask:
            mask4 = torch.zeros(mask4.shape, dtype=self.model.dtype).masked_fill_(~mask4, torch.finfo(self.model.dtype).min)
        dev = self.device
        out = self.model(input_ids=ids.to(dev), position_ids=pos.to(dev), attention_mask={"full_attention": mask4.to(dev)},
                         use_cache=True, **{self.cache_arg: self.cache})
        logits = out.logits[0].float().cpu()
        if self.temperature > 0:
            path, nxt = sample_walk(tree, torch.softmax(logits.float() / self.temperature, -1), self.gen)
        else:
            path, nxt = greedy_walk(tree, logits.argmax(-1).tolist())
        self._compact(L, path)
        self.ids = list(context) + [tree.tokens[i] for i in path]
        self.processed += 1 + n
        return path, nxt

    def _compact(self, L: int, path: list[int]) -> None:
        """Drop rejected nodes: keep slots [0, L) and the path's nodes (at L + node)."""
        if path == list(range(len(path))):   # a prefix of the nodes (always, for a chain): a view, no copy
            keep = slice(L + len(path))
        else:
            keep = [*range(L), *(L + node for node in path)]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[..., keep, :], layer.values[..., keep, :]
        self.cached = L + len(path)
