"""The writing roles: a :class:`StepWriter` writes one reasoning step after a context; *how* it produces the tokens
is a :class:`~heterospec.models.decoding.Decoding` plugged into it (plain decoding, token-level speculation, the
generated accelerator kernel: :mod:`heterospec.models.decoding`). The step-level controller above never sees which.

:class:`StepWriter` owns what every way of writing shares: where a step stops (the step delimiter, EOS, the token
limit), cancellation between chunks, the KVMU pointer moves a write implies, and the :class:`Call` records.
The PRM's role, ``StepScorer``, lives with the PRM protocol in :mod:`heterospec.models.prm`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable


from heterospec.models.decoding import Decoding, PlainDecoding
from heterospec.models.prefix_cache import common_prefix
from heterospec.reasoning.kvcache import KVMU


@dataclass
class Call:
    """One model call as measured where it ran."""
    phase: str            # prefill | decode | score
    tokens_in: int        # tokens fed to the model
    tokens_out: int       # tokens generated (0 for prefill and score)
    kv_len: int           # tokens already in the model's KV cache before the call
    start_ns: int         # time.perf_counter_ns(): one clock for every process on the machine
    end_ns: int
    rounds: list = field(default_factory=list)  # token-level speculation: one Round per verification round
    modelled_ms: float | None = None  # the accelerator's modelled time for the call on its board (the kernel draft)


@dataclass
class Step:
    """A reasoning step written by the draft or the target."""
    tokens: list[int]
    text: str
    complete: bool        # ended at the step delimiter or EOS (False: cancelled or cut at max tokens)
    eos: bool
    calls: list[Call] = field(default_factory=list)


class StepWriter:
    """Writes one step at a time after a context with a :class:`Decoding`, logging the KVMU's pointers if it has one
    (the draft: the Python twin :class:`~heterospec.reasoning.kvcache.KVMU`, or the kernel's own registers)."""

    def __init__(self, decoding: Decoding, tokenizer, delimiter: str = "\n\n", kvmu: KVMU | None = None):
        self.decoding = decoding
        self.tokenizer = tokenizer
        self.delimiter = delimiter
        self.eos = tokenizer.eos_token_id
        self.kvmu = kvmu
        self.written: list[int] = []  # context + sampled tokens, the last one not yet fed
        self.ingested = 0     # host tokens written into the cache (prompt, shadow sync, re-init)
        self.generated = 0    # tokens this role wrote
        self.cancelled = False  # the last write was cancelled: its tokens go at the next write, however many

    @classmethod
    def plain(cls, model, tokenizer, delimiter: str = "\n\n", kvmu: bool = False, temperature: float = 0.0
              ) -> "StepWriter":
        """A writer that decodes ``model`` autoregressively (with the software KVMU when ``kvmu``)."""
        return cls(PlainDecoding(model, temperature), tokenizer, delimiter, KVMU() if kvmu else None)

    def reset(self, seed: int) -> None:
        """Start a new problem: empty cache, fresh pointers, reseeded sampler."""
        self.decoding.reset(seed)
        if self.kvmu is not None:
            self.kvmu.reset()
        self.written = []
        self.ingested = self.generated = 0
        self.cancelled = False

    def _stops(self, tokens: list[int], prior: list[int]) -> tuple[bool, bool]:
        """(complete, eos) after the last of ``tokens``: EOS, or the delimiter in the step's text."""
        if tokens[-1] == self.eos:
            return True, True
        return self.delimiter in self.tokenizer.decode(prior + tokens, skip_special_tokens=True), False

    def write(self, context: list[int], valid: int, max_tokens: int, step_start: int | None = None,
              cancelled: Callable[[], bool] = lambda: False) -> Step:
        """Generate one step after ``context`` (its first ``valid`` tokens are verified).

        ``step_start`` < len(context) resumes a step whose first tokens are already in the context
        (a cached partial output); the returned step then includes them.
        """
        dec = self.decoding
        prior = list(context[step_start:]) if step_start is not None else []
        keep = common_prefix(self.written, context)    # what this model already holds of the context
        if self.kvmu is not None:
            self._kvmu_before(keep, context, valid)
        self.ingested += len(context) - keep           # host tokens: prompt, shadow sync, re-init
        board = getattr(dec, "modelled_ms", None)      # a kernel's modelled board time, summed over its calls
        t0 = time.perf_counter_ns()
        fed = dec.start(context)
        calls = [Call("prefill", fed, 0, dec.held - fed, t0, time.perf_counter_ns())]
        if board is not None:
            calls[0].modelled_ms, board = dec.modelled_ms - board, dec.modelled_ms
        tokens: list[int] = []
        rounds: list = []
        kv1, p1, t1 = dec.held, dec.processed, time.perf_counter_ns()
        eos = complete = False
        while len(prior) + len(tokens) < max_tokens and not cancelled():
            room = max_tokens - len(prior) - len(tokens)
            chunk = dec.next(room)
            kept = 0
            for tok in chunk.tokens[:room]:
                tokens.append(tok)
                kept += 1
                complete, eos = self._stops(tokens, prior)
                if complete:
                    break
            if chunk.round is not None:
                rounds.append(replace(chunk.round, kept=kept))
            dec.keep(kept, complete)
            if complete:
                break
        self.generated += len(tokens)
        self.written = list(context) + tokens
        if self.kvmu is not None:   # before the call ends: a kernel writes the step's last token here
            self.cancelled = not complete and len(prior) + len(tokens) < max_tokens
            self.kvmu.speculate(len(context), len(self.written), ahead=valid < len(context),
                                held_back=bool(tokens) and not self.cancelled)
        calls.append(Call("decode", dec.processed - p1, len(tokens), kv1, t1, time.perf_counter_ns(), rounds,
                          None if board is None else dec.modelled_ms - board))
        text = self.tokenizer.decode(prior + tokens, skip_special_tokens=True)
        return Step(prior + tokens, text, complete, eos, calls)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _kvmu_before(self, keep: int, context: list[int], valid: int) -> None:
        """Log the pointer moves a write implies (the KVMU's modes, :mod:`heterospec.reasoning.kvcache`): a reject
        rolls back to valid, host tokens come in by INIT (a backtrack, or a reject whose rewrite shares the rejected
        step's first tokens, re-initialises in the same INIT), an accept commits the step under verification.

        A cancelled write (a step drafted ahead of a reject) is dropped even when it wrote nothing, or nothing the
        context does not repeat: the KVMU cannot drop a step drafted ahead alone, so whether it has to move must not
        depend on how far the draft got before the cancel."""
        k, n = self.kvmu, len(context)
        sync = "prompt" if keep == 0 else ("shadow_sync" if valid >= n else "host")
        if keep < k.step_ahead or self.cancelled:   # the cache held more (a step drafted ahead included): dropped
            if keep == k.valid:
                k.rollback("reject")
            else:
                k.initialise(n, "backtrack" if keep < k.valid else "reject")
                return
        if n > keep:
            k.initialise(n, sync)
        elif valid > k.valid or (k.held_back and keep > k.step_ahead):
            k.accept("prm")                     # the step drafted ahead, if any, goes to verification

    @property
    def processed(self) -> int:
        return self.decoding.processed
