"""The writing roles as small objects that each own one model on one torch device.

* :class:`StepWriter` — a causal LM that writes one reasoning step (up to the step delimiter or
  EOS) after a context; the draft and the target are both StepWriters, the draft with a KVMU.

The PRM's role, ``StepScorer``, lives with the PRM protocol in :mod:`heterospec.models.prm`.
Roles keep a :class:`~heterospec.reasoning.kvcache.PrefixCache`, so a context they have seen is
never processed again, and report every model call they make as :class:`Call` records.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from heterospec.reasoning.kvcache import KVMU, PrefixCache, common_prefix


@dataclass
class Call:
    """One model call as measured where it ran."""
    phase: str            # prefill | decode | score
    tokens_in: int        # tokens fed to the model
    tokens_out: int       # tokens generated (0 for prefill and score)
    kv_len: int           # tokens already in the model's KV cache before the call
    start_ns: int         # time.perf_counter_ns(): one clock for every process on the machine
    end_ns: int


@dataclass
class Step:
    """A reasoning step written by the draft or the target."""
    tokens: list[int]
    text: str
    complete: bool        # ended at the step delimiter or EOS (False: cancelled or cut at max tokens)
    eos: bool
    calls: list[Call] = field(default_factory=list)


class StepWriter:
    """Writes one step at a time after a context, reusing its KV cache across calls."""

    def __init__(self, model, tokenizer, delimiter: str = "\n\n", kvmu: bool = False, temperature: float = 0.0):
        self.cache = PrefixCache(model)
        self.tokenizer = tokenizer
        self.delimiter = delimiter
        self.eos = tokenizer.eos_token_id
        self.kvmu = KVMU() if kvmu else None
        self.temperature = temperature
        self.generator = torch.Generator(device="cpu")
        self.written: list[int] = []  # context + sampled tokens, the last one not yet fed
        self.ingested = 0     # host tokens written into the cache (prompt, shadow sync, re-init)
        self.generated = 0    # tokens this model sampled

    def reset(self, seed: int) -> None:
        """Start a new problem: empty cache, fresh pointers, reseeded sampler."""
        self.cache = PrefixCache(self.cache.model)
        if self.kvmu is not None:
            self.kvmu = KVMU()
        self.generator.manual_seed(seed)
        self.written = []
        self.ingested = self.generated = 0

    def _pick(self, logits: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits.float() / self.temperature, dim=-1).cpu()
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def write(self, context: list[int], valid: int, max_tokens: int, step_start: int | None = None,
              cancelled: Callable[[], bool] = lambda: False) -> Step:
        """Generate one step after ``context`` (its first ``valid`` tokens are verified).

        ``step_start`` < len(context) resumes a step whose first tokens are already in the context
        (a cached partial output); the returned step then includes them.
        """
        prior = list(context[step_start:]) if step_start is not None else []
        keep = common_prefix(self.written, context)    # what this model already holds of the context
        if self.kvmu is not None:
            self._kvmu_before(keep, context, valid)
        self.ingested += len(context) - keep           # host tokens: prompt, shadow sync, re-init
        t0 = time.perf_counter_ns()
        logits, _, fed = self.cache.advance(context)
        calls = [Call("prefill", fed, 0, len(self.cache.ids) - fed, t0, time.perf_counter_ns())]
        tokens: list[int] = []
        kv1, t1 = len(self.cache.ids), time.perf_counter_ns()
        text, eos, complete = "", False, False
        while len(prior) + len(tokens) < max_tokens and not cancelled():
            tok = self._pick(logits)
            tokens.append(tok)
            if tok == self.eos:
                eos = complete = True
                break
            text = self.tokenizer.decode(prior + tokens, skip_special_tokens=True)
            if self.delimiter in text:
                complete = True
                break
            logits = self.cache.feed([tok])
        self.generated += len(tokens)
        # a complete step's last token is fed at the next call, if its step survives; a cut one fed them all
        fed_decode = len(self.cache.ids) - kv1
        calls.append(Call("decode", fed_decode, len(tokens), kv1, t1, time.perf_counter_ns()))
        self.written = list(context) + tokens
        if self.kvmu is not None:
            self.kvmu.speculate(len(context), len(self.written), ahead=valid < len(context))
        if eos or not tokens:
            text = self.tokenizer.decode(prior + tokens, skip_special_tokens=True)
        return Step(prior + tokens, text, complete, eos, calls)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _kvmu_before(self, keep: int, context: list[int], valid: int) -> None:
        """Log the pointer moves a write implies: rollback, accept, host tokens in."""
        k = self.kvmu
        if keep < k.step_ahead:     # the cache held more (a step drafted ahead included): it is dropped
            k.rollback(keep, "backtrack" if keep < k.valid else "reject")
        if len(context) > keep:
            k.initialise(len(context), "prompt" if keep == 0 else ("shadow_sync" if valid >= len(context) else "host"))
        if valid > k.valid:
            k.accept(valid, "prm" if keep >= valid else "shadow_sync")

    @property
    def processed(self) -> int:
        return self.cache.processed
