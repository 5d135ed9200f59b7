"""The baselines DFVG is measured against: the target's plain greedy decoding and Hugging Face assisted generation.

The speculative decoder itself is :mod:`heterospec.speculative.decoder`.
"""
from __future__ import annotations

import torch

from heterospec.speculative.decoder import Pair, check_prompt, finish


@torch.no_grad()
def target_greedy(pair: Pair, prompt: list[int], max_new: int) -> list[int]:
    """Plain greedy decoding with the target: one Hugging Face forward per token, KV cache (the baseline)."""
    from heterospec.models.generate import _step
    max_pos = pair.max_positions
    check_prompt(len(prompt), max_pos)
    max_new = min(max_new, max_pos - len(prompt))
    eos = pair.tokenizer.eos_token_id
    dev = next(pair.target.parameters()).device
    out, cache = _step(pair.target, None, input_ids=torch.tensor([prompt], device=dev))
    new: list[int] = []
    while len(new) < max_new:
        nxt = int(out.logits[0, -1].argmax())
        new.append(nxt)
        if nxt == eos or len(new) == max_new:
            break
        out, cache = _step(pair.target, cache, input_ids=torch.tensor([[nxt]], device=dev))
    return new


@torch.no_grad()
def hf_generate(pair: Pair, prompt: list[int], max_new: int, assisted: bool) -> list[int]:
    """Hugging Face ``target.generate`` (greedy), with ``assistant_model=draft`` when ``assisted``."""
    max_new = min(max_new, pair.max_positions - len(prompt))
    check_prompt(len(prompt), pair.max_positions)
    ids = torch.tensor([prompt], device=next(pair.target.parameters()).device)
    kw = dict(assistant_model=pair.draft) if assisted else {}
    out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                               pad_token_id=pair.tokenizer.pad_token_id, **kw)
    return finish(out[0, len(prompt):].tolist(), max_new, pair.tokenizer.eos_token_id)
