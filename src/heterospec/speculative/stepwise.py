"""Token-level speculative decoding as a writing role's :class:`~heterospec.reasoning.roles.Decoding`: the target
writes a reasoning step round by round, the draft proposing with one of DFVG's strategies.

Each chunk is one verification round: the accepted draft tokens plus the target's own next token, so under greedy
verification every token is the one the target's plain decoding writes, and the :class:`StepWriter` stops at the
delimiter, EOS or the token limit exactly where plain decoding stops (tokens verified past that point are dropped
from both caches at the next write). In a collect run the draft that speculates for the target runs beside the
target, on the target's torch device: a copy of the run's draft (on the paper's systems the replay places it on the
draft device instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from heterospec.reasoning.roles import Chunk, Decoding
from heterospec.speculative.decoder import SpeculativeDecoder
from heterospec.speculative.strategies import Strategy, make_strategy


class SpeculativeDecoding(Decoding):
    """A :class:`SpeculativeDecoder` continuing whatever context the writer gives it, round by round."""
    kind = "speculative"

    def __init__(self, decoder: SpeculativeDecoder, strategy: str, knobs, lanes: int | None = None):
        self.decoder, self.strategy_name, self.knobs, self.lanes = decoder, strategy, knobs, lanes
        self.strategy: Strategy = make_strategy(strategy, knobs, lanes)
        self.ctx: list[int] = []

    def reset(self, seed: int) -> None:
        """A new problem: empty caches, a fresh strategy (its schedule adapts within a problem), reseeded sampler."""
        self.decoder.reset()
        self.decoder.verifier.gen.manual_seed(seed)
        self.strategy = make_strategy(self.strategy_name, self.knobs, self.lanes)
        self.ctx = []

    def start(self, context: list[int]) -> int:
        self.ctx = list(context)
        return self.decoder.resume(self.ctx)

    def next(self, room: int) -> Chunk:
        new, record = self.decoder.round(self.ctx, self.strategy, room)
        self.ctx += new
        return Chunk(new, dict(record, strategy=self.strategy_name))

    @property
    def processed(self) -> int:
        return self.decoder.verifier.processed

    @property
    def held(self) -> int:
        return self.decoder.verifier.cached


@dataclass
class SpeculativeRecipe:
    """How a target worker builds its speculative decoding: the draft's checkpoint, the strategy and its knobs (the
    ``dfvg`` config section as a plain dict), the draft device's lanes that bound a tree."""
    draft_path: str
    strategy: str
    knobs: dict = field(default_factory=dict)
    lanes: int | None = None
    draft_kernel: str = "auto"
    kind: str = "speculative"

    def build(self, spec) -> SpeculativeDecoding:
        """Load the target (``spec``: the worker's RoleSpec) and the draft beside it, on the target's device."""
        from omegaconf import OmegaConf

        from heterospec.speculative.decoder import load_pair
        pair = load_pair(self.draft_path, spec.path, spec.dtype, (spec.device, spec.device))
        decoder = SpeculativeDecoder(pair, spec.temperature, 0, self.draft_kernel)
        return SpeculativeDecoding(decoder, self.strategy, OmegaConf.create(self.knobs), self.lanes)
