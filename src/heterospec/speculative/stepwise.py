"""Token-level speculative decoding as a writing role's :class:`~heterospec.models.decoding.Decoding`: the target
writes a reasoning step round by round, the draft proposing with one of DFVG's strategies.

Each chunk is one verification round: the accepted draft tokens plus the target's own next token, so under greedy
verification every token is the one the target's plain decoding writes, and the :class:`StepWriter` stops at the
delimiter, EOS or the token limit exactly where plain decoding stops (tokens verified past that point are dropped
from both caches at the next write). In a collect run the draft that speculates for the target runs beside the
target, on the target's torch device: a copy of the run's draft (on the paper's systems the replay places it on the
draft device instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from heterospec.errors import UserError
from heterospec.models.decoding import Chunk, Decoding, PlainDecoding
from heterospec.speculative.decoder import SpeculativeDecoder, check_tokenizers
from heterospec.speculative.strategies import STRATEGIES, Strategy, make_strategy


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
        return Chunk(new, replace(record, strategy=self.strategy_name))

    def plain(self, temperature: float) -> PlainDecoding:
        """The target alone, decoding plainly over the same loaded model (a KV cache of its own): for the writes
        that should not speculate."""
        return PlainDecoding(self.decoder.pair.target, temperature)

    @property
    def processed(self) -> int:
        return self.decoder.verifier.processed

    @property
    def held(self) -> int:
        return self.decoder.verifier.cached


@dataclass
class SpeculativeRecipe:
    """How a target worker builds its speculative decoding: the draft's checkpoint, the strategy and its knobs (the
    ``token_speculation`` config section as a plain dict), the draft device's lanes that bound a tree."""
    draft_path: str
    strategy: str
    knobs: dict = field(default_factory=dict)
    lanes: int | None = None
    draft_decoder: str = "auto"
    kind: str = "speculative"

    def build(self, spec) -> SpeculativeDecoding:
        """Load the target (``spec``: the worker's RoleSpec) and the draft beside it, on the target's device."""
        from omegaconf import OmegaConf

        from heterospec.speculative.decoder import load_pair
        pair = load_pair(self.draft_path, spec.path, spec.dtype, (spec.device, spec.device))
        decoder = SpeculativeDecoder(pair, spec.temperature, 0, self.draft_decoder)
        return SpeculativeDecoding(decoder, self.strategy, OmegaConf.create(self.knobs), self.lanes)


def check_strategy(strategy: str, key: str, plain: bool = False) -> None:
    """``strategy`` (the value of config ``key``) names a token-level strategy (or, with ``plain``, is ``plain``)."""
    if strategy not in STRATEGIES and not (plain and strategy == "plain"):
        expected = ["plain", *STRATEGIES] if plain else list(STRATEGIES)
        raise UserError(f"{key}={strategy}: not a token-level strategy; expected one of {expected}")


def speculative_recipe(cfg, strategy: str, key: str, draft_path: str, target_path: str) -> SpeculativeRecipe:
    """The recipe of a target that writes with token-level speculation: ``strategy`` (the config ``key`` that names
    it) with the ``token_speculation`` section's knobs, the tree bounded by the lanes of the run's draft device where it has some
    (``system.draft.fpga.draft_lanes``), the draft at ``draft_path``. Bad input is one line, before any model
    loads: an unknown strategy, a tree wider than the lanes, a draft whose tokenizer is not the target's."""
    from omegaconf import OmegaConf

    from heterospec.config.hardware import Device
    from heterospec.models.loading import load_tokenizer

    check_strategy(strategy, key)
    draft_device = Device.of(cfg.system.draft)
    lanes = draft_device.fabric.draft_lanes if draft_device.fabric is not None else None
    make_strategy(strategy, cfg.token_speculation, lanes, draft_device.name)     # checks the tree against the lanes
    try:
        check_tokenizers(load_tokenizer(draft_path, "draft"), load_tokenizer(target_path, "target"))
    except UserError as e:
        raise UserError(f"{key}={strategy}: draft {draft_path}: {e}") from None
    knobs = OmegaConf.to_container(cfg.token_speculation, resolve=True)
    return SpeculativeRecipe(str(draft_path), strategy, knobs, lanes, str(cfg.token_speculation.draft_decoder))
