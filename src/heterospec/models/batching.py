"""Batched forward passes over per-request KV caches: several sequences, each holding its own context in its own
:class:`~heterospec.models.prefix_cache.PrefixCache`, each fed its own new tokens, in one padded pass.

The caches are left-padded to the longest one and the new tokens right-padded to the longest feed; an attention
mask hides the padding and each row keeps its own positions, so a row sees exactly what it would see alone. After
the pass each row's part of the batch's cache (without the padding) goes back to its own cache. Padding changes
the shapes of the matrix products, so logits may differ from a pass of one in the last bits
(``benchmarks/serving_padding.py`` measures by how much); the tokens a greedy writer picks do not, unless two
logits tie to those bits.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from heterospec.models.prefix_cache import PrefixCache


def _rows(cache: PrefixCache) -> int:
    return len(cache.ids)


@torch.no_grad()
def feed_batch(caches: list[PrefixCache], news: list[list[int]], pad: int = 0) -> list[torch.Tensor]:
    """Append ``news[i]`` to ``caches[i]`` for every i in one forward pass of their (shared) model; returns the
    logits at each row's last new token ([vocab], or [labels] for a PRM). Every feed holds at least one token."""
    if any(not n for n in news):
        raise ValueError("feed_batch: every row needs at least one new token")
    if len(caches) == 1:                   # a batch of one is exactly the unbatched pass
        return [caches[0].feed(news[0])]
    model, dev = caches[0].model, caches[0].device
    held = [_rows(c) for c in caches]
    K, N, B = max(held), max(len(n) for n in news), len(caches)
    ids = torch.full((B, N), pad, dtype=torch.long)
    mask = torch.zeros((B, K + N), dtype=torch.long)
    pos = torch.zeros((B, N), dtype=torch.long)
    for i, (h, n) in enumerate(zip(held, news)):
        ids[i, : len(n)] = torch.tensor(n)
        mask[i, K - h: K + len(n)] = 1                     # its cache (left-padded) and its new tokens
        pos[i] = torch.arange(h, h + N)                      # its own positions (the pads' are never read)
    batch = DynamicCache(ddp_cache_data=_stack([c.cache for c in caches], held, K)) if K else DynamicCache()
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True,
                **{caches[0].cache_arg: batch})
    logits = out.logits                                      # [B, N, vocab]
    for i, (c, h, n) in enumerate(zip(caches, held, news)):
        c.cache = DynamicCache(ddp_cache_data=[(layer.keys[i: i + 1, :, K - h: K + len(n)].contiguous(),
                                                layer.values[i: i + 1, :, K - h: K + len(n)].contiguous())
                                               for layer in batch.layers])
        c.ids.extend(n)
        c.processed += len(n)
    return [logits[i, len(n) - 1] for i, n in enumerate(news)]


def _stack(caches: list[DynamicCache], held: list[int], K: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the rows' keys and values left-padded (with zeros, masked) to ``K`` tokens: [B, heads, K, dim]."""
    filled = next(c for c, h in zip(caches, held) if h)      # an empty cache has no layers yet
    out = []
    for layer in range(len(filled.layers)):
        ref = filled.layers[layer].keys                    # [1, heads, tokens, dim]
        keys, values = [], []
        for c, h in zip(caches, held):
            k, v = (c.layers[layer].keys, c.layers[layer].values) if h else (ref[:, :, :0], ref[:, :, :0])
            keys.append(torch.nn.functional.pad(k, (0, 0, K - h, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, K - h, 0)))
        out.append((torch.cat(keys), torch.cat(values)))
    return out
