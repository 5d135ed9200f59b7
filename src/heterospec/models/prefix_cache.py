"""One model's KV cache keyed by context: a model never re-processes a prefix it has already seen.

:class:`PrefixCache` keeps one model's KV cache together with the token ids it holds. Asked to continue a context,
it keeps the longest common prefix (rolling back anything after it) and feeds only the new tokens.
"""
from __future__ import annotations

import inspect

import torch
import transformers
from transformers import DynamicCache

# transformers 5 crops by a negative count and names the forward argument `cache`; 4.x differs
_NEW_CROP = int(transformers.__version__.split(".")[0]) >= 5


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """One model's KV cache plus the ids it covers; :meth:`advance` returns the next-token logits."""

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        self.ids: list[int] = []          # tokens whose KV is in the cache
        self.cache = self._empty()
        self.processed = 0                # tokens fed through the model (the KV-reuse metric)
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def _empty(self):
        """A fresh cache of the model's own kind (the W8A8 draft keeps int8 K/V, as the FPGA does)."""
        maker = getattr(self.model, "empty_cache", None)
        return maker() if callable(maker) else DynamicCache()

    def rollback(self, n: int) -> int:
        """Drop everything after the first ``n`` tokens; returns how many were dropped."""
        dropped = len(self.ids) - n
        if dropped > 0:
            if n == 0:
                self.cache = self._empty()
            elif isinstance(self.cache, DynamicCache):
                self.cache.crop(-dropped if _NEW_CROP else n)
            else:  # heterospec's own caches (the W8A8 draft's int8 cache) crop to a length
                self.cache.crop(n)
            del self.ids[n:]
        return max(0, dropped)

    def prepare(self, context: list[int]) -> tuple[int, list[int]]:
        """Roll back to the longest prefix of ``context`` held; returns (dropped, the tokens still to feed)."""
        keep = common_prefix(self.ids, context)
        if keep == len(context):  # fully cached, but the logits at the end are not: re-feed one token
            keep -= 1
        return self.rollback(keep), context[keep:]

    def advance(self, context: list[int]) -> tuple[torch.Tensor, int, int]:
        """Make the cache cover ``context`` and return (logits at its last position, dropped, fed)."""
        dropped, new = self.prepare(context)
        logits = self.feed(new)
        return logits, dropped, len(new)

    @torch.no_grad()
    def feed(self, tokens: list[int]) -> torch.Tensor:
        """Append ``tokens`` to the cache; logits at the last one, shape [vocab] (or [labels] for a PRM)."""
        ids = torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, **{self.cache_arg: self.cache})
        self.ids.extend(tokens)
        self.processed += len(tokens)
        return out.logits[0, -1]
