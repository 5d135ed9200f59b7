"""Decoding with the KV cache, one prompt or a left-padded batch: greedy, or sampled at a temperature."""
from __future__ import annotations

import inspect

import torch


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _step(model, cache, **inputs):
    """One forward pass continuing ``cache`` (None at prefill); returns (output, new cache).

    transformers >= 5.2x names the KV cache ``cache``; earlier versions ``past_key_values``.
    """
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    if cache is not None:
        inputs[name] = cache
    out = model(**inputs, use_cache=True, logits_to_keep=1)
    cache = getattr(out, "cache", None)
    return out, cache if cache is not None else out.past_key_values


@torch.no_grad()
def greedy_generate(model, tokenizer, prompt: str, max_new_tokens: int,
                    stop_at_eos: bool = True) -> tuple[str, int]:
    """Greedy continuation of ``prompt``: (decoded new text, number of generated tokens)."""
    ids = torch.tensor([tokenizer(prompt)["input_ids"]], device=_device(model))
    eos = tokenizer.eos_token_id
    out, cache = _step(model, None, input_ids=ids)
    new: list[int] = []
    for _ in range(max_new_tokens):
        nxt = int(out.logits[0, -1].argmax())
        new.append(nxt)
        if stop_at_eos and nxt == eos:
            break
        out, cache = _step(model, cache, input_ids=torch.tensor([[nxt]], device=ids.device))
    return tokenizer.decode(new, skip_special_tokens=True), len(new)


def greedy_generate_batch(model, tokenizer, prompts: list[str], max_new_tokens: int,
                          stop_at_eos: bool = True) -> list[tuple[str, int]]:
    """:func:`greedy_generate` for many prompts at once (left padding; same tokens as one by one)."""
    return generate_batch(model, tokenizer, prompts, max_new_tokens, stop_at_eos)


@torch.no_grad()
def generate_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, stop_at_eos: bool = True,
                   temperature: float = 0.0, generator: torch.Generator | None = None) -> list[tuple[str, int]]:
    """Continuations of many prompts at once: greedy at temperature 0, else sampled with ``generator``."""
    if not prompts:
        return []
    dev, eos = _device(model), tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    enc = [tokenizer(p)["input_ids"] for p in prompts]
    B, T = len(enc), max(len(e) for e in enc)
    ids = torch.full((B, T), pad, dtype=torch.long)
    att = torch.zeros((B, T), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, T - len(e):], att[i, T - len(e):] = torch.tensor(e), 1
    ids, att = ids.to(dev), att.to(dev)
    pos = (att.cumsum(-1) - 1).clamp(min=0)                    # [B, T] positions ignore the left pads
    out, cache = _step(model, None, input_ids=ids, attention_mask=att, position_ids=pos)
    next_pos = pos[:, -1:] + 1                                 # [B, 1]
    new = torch.empty((B, 0), dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1]                             # [B, V]
        if temperature > 0:
            probs = torch.softmax(logits.float() / temperature, dim=-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0].to(dev)
        else:
            nxt = logits.argmax(-1)                            # [B]
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        new = torch.cat([new, nxt[:, None]], dim=1)
        if stop_at_eos:
            done |= nxt == eos
            if bool(done.all()):
                break
        att = torch.cat([att, torch.ones((B, 1), dtype=att.dtype, device=dev)], dim=1)
        out, cache = _step(model, cache, input_ids=nxt[:, None], attention_mask=att, position_ids=next_pos)
        next_pos = next_pos + 1
    results = []
    for row in new.tolist():
        if stop_at_eos and eos in row:  # pads only ever follow a row's eos
            row = row[: row.index(eos) + 1]
        results.append((tokenizer.decode(row, skip_special_tokens=True), len(row)))
    return results
