"""How a writing role produces tokens: the :class:`Decoding` interface and plain autoregressive decoding.

A :class:`~heterospec.reasoning.roles.StepWriter` writes a step with a :class:`Decoding`: :class:`PlainDecoding` (one
model, one token per forward, a :class:`~heterospec.models.prefix_cache.PrefixCache`), token-level speculative
decoding with a draft (:mod:`heterospec.speculative.stepwise`), or the generated accelerator kernel
(:mod:`heterospec.hls.kernel_draft`). It sits below both the reasoning engine and the speculative decoders, which
import it from here. :class:`DecodingRecipe` is how a worker process builds its decoding from a picklable recipe.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from heterospec.models.prefix_cache import PrefixCache


@dataclass
class Chunk:
    """The next tokens of a continuation, in order, each the one the role's own decoding would write."""
    tokens: list[int]
    round: Any = None           # a token-level verification round's record (heterospec.speculative.rounds.Round)


class Decoding(ABC):
    """How a writing role produces tokens: make its model(s) hold a context, then continue it chunk by chunk.

    ``processed`` counts tokens fed through the role's own model (the KV-reuse metric); ``held`` is how many
    tokens its KV cache holds now.
    """
    kind = "plain"
    kvmu = None     # a decoding that drives a KVMU of its own (the kernel's registers) exposes it: the writer logs it

    @abstractmethod
    def reset(self, seed: int) -> None:
        """A new problem: empty caches, the sampler reseeded."""

    @abstractmethod
    def start(self, context: list[int]) -> int:
        """Make the model hold ``context`` (keeping what it already holds of it); returns the tokens fed."""

    @abstractmethod
    def next(self, room: int) -> Chunk:
        """The next one or more tokens after what is held (at most ``room`` are wanted; more may come)."""

    def keep(self, kept: int, complete: bool) -> None:
        """The writer keeps the first ``kept`` tokens of the last chunk; ``complete``: the step ended at the last of
        them (a decoding whose caches went further leaves them: the next :meth:`start` keeps only the context)."""

    @property
    @abstractmethod
    def processed(self) -> int: ...

    @property
    @abstractmethod
    def held(self) -> int: ...


class DecodingRecipe(Protocol):
    """A picklable recipe a worker builds its role's decoding from (the model is loaded in the worker)."""
    kind: str

    def build(self, spec) -> Decoding: ...


class PlainDecoding(Decoding):
    """Autoregressive decoding with one causal LM: greedy at temperature 0, else sampling with a seeded generator.

    A sampled token is fed to the model only when the writer asks for more: a complete step's last token waits for
    the next write (if its step survives), a step cut at the token limit has fed them all.
    """

    def __init__(self, model, temperature: float = 0.0):
        self.cache = PrefixCache(model)
        self.temperature = temperature
        self.generator = torch.Generator(device="cpu")
        self.logits: torch.Tensor | None = None
        self.last: int | None = None

    def reset(self, seed: int) -> None:
        self.cache = PrefixCache(self.cache.model)
        self.generator.manual_seed(seed)

    def start(self, context: list[int]) -> int:
        self.logits, _, fed = self.cache.advance(context)
        return fed

    def next(self, room: int) -> Chunk:
        if self.temperature <= 0:
            self.last = int(self.logits.argmax())
        else:
            probs = torch.softmax(self.logits.float() / self.temperature, dim=-1).cpu()
            self.last = int(torch.multinomial(probs, 1, generator=self.generator))
        return Chunk([self.last])

    def keep(self, kept: int, complete: bool) -> None:
        if not complete:
            self.logits = self.cache.feed([self.last])

    @property
    def processed(self) -> int:
        return self.cache.processed

    @property
    def held(self) -> int:
        return len(self.cache.ids)
