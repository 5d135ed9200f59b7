"""Token-level speculative decoding, one verification round at a time (the loop DFVG measures and reasoning's target
writes use).

A round: the strategy plans, the draft grows a tree from the committed context, the target verifies it in one
pass, the accepted path plus the target's next token are committed, both caches keep only that path. Each round
leaves a :class:`~heterospec.speculative.rounds.Round` record.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from heterospec.speculative.drafter import Drafter, Plan
from heterospec.speculative.rounds import Round
from heterospec.speculative.strategies import Strategy
from heterospec.speculative.verify import Verifier
from heterospec.errors import UserError


@dataclass
class Pair:
    """A draft and a target that share one tokenizer."""
    draft: object
    target: object
    tokenizer: object

    @property
    def max_positions(self) -> int:
        return int(self.target.config.max_position_embeddings)


def load_pair(draft_path: str, target_path: str, dtype: str = "float32", devices: tuple[str, str] = ("cpu", "cpu")
              ) -> Pair:
    """Load both models (on ``devices``: draft, target); a pair whose tokenizers differ is refused (tree
    verification compares token ids)."""
    from heterospec.models.loading import load_causal_lm, load_tokenizer
    dtok, ttok = load_tokenizer(draft_path, "draft"), load_tokenizer(target_path, "target")
    check_tokenizers(dtok, ttok)
    return Pair(load_causal_lm(draft_path, devices[0], dtype, "draft"),
                load_causal_lm(target_path, devices[1], dtype, "target"), ttok)


def check_tokenizers(draft_tok, target_tok) -> None:
    dv, tv = draft_tok.get_vocab(), target_tok.get_vocab()
    if dv != tv:
        only = sorted(set(dv.items()) ^ set(tv.items()))[:1]
        raise UserError(f"draft and target tokenizers differ ({len(dv)} vs {len(tv)} tokens, e.g. {only[0][0]!r}): "
                        f"speculative decoding needs one vocabulary")


def check_prompt(prompt_tokens: int, max_positions: int) -> None:
    if prompt_tokens >= max_positions:
        raise UserError(f"prompt of {prompt_tokens} tokens does not fit the target's context of {max_positions} "
                        f"tokens (max_position_embeddings)")


def finish(new: list[int], max_new: int, eos: int | None) -> list[int]:
    """The first ``max_new`` tokens, cut after the first eos (what greedy decoding would have returned)."""
    new = new[:max_new]
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
    return new


class SpeculativeDecoder:
    """Draft + target with their caches; :meth:`generate` decodes one prompt with one strategy, :meth:`resume` and
    :meth:`round` let a caller (a reasoning step writer) continue any context round by round."""

    def __init__(self, pair: Pair, temperature: float = 0.0, seed: int = 0, draft_decoder: str = "auto"):
        self.pair = pair
        self.drafter = Drafter(pair.draft, draft_decoder)
        self.verifier = Verifier(pair.target, temperature, seed)
        self.carry: list[int] = []          # drafted last round past the verified window (feedback's long chains)
        self.last: Round | None = None      # the last round's record, whose guess_hit the next round may settle

    def reset(self) -> None:
        """A new sequence: both caches empty."""
        self.drafter.reset()
        self.verifier.start([])
        self.carry, self.last = [], None

    def resume(self, context: list[int]) -> int:
        """Continue ``context`` (which may share only a prefix with what was decoded before): the target's cache
        keeps what it holds of it; the draft's syncs at the next round. Returns the tokens fed to the target."""
        check_prompt(len(context), self.pair.max_positions)
        self.carry = []
        self._settle_guess(False)
        return self.verifier.resume(context)

    def _settle_guess(self, hit: bool) -> None:
        if self.last is not None and self.last.guess_hit is None:
            self.last.guess_hit = hit
        self.last = None

    @torch.no_grad()
    def round(self, ctx: list[int], strategy: Strategy, room: int) -> tuple[list[int], Round]:
        """One round after ``ctx`` (the target's cache holds all of it but its last token): the accepted tokens plus
        the target's next one (at most ``room`` are wanted; the tree is no deeper), and the round's trace record."""
        dec = self.drafter.dec
        plan = strategy.plan()
        room = min(room, self.pair.max_positions - len(ctx))   # no node past the budget
        if plan.depth > room:
            plan = Plan(room, plan.width, min(plan.budget, room * plan.width), plan.top_k, plan.min_confidence,
                        plan.verify)
        carry = self.carry
        kv_target, kv_draft, passes0, carried = self.verifier.cached, len(self.drafter.ids), dec.passes, len(carry)
        t0 = time.perf_counter()
        tree = self.drafter.build(ctx, plan, carry)
        t1 = time.perf_counter()
        if self.last is not None and self.last.guess_hit is None:  # last round's main path was accepted:
            self.last.guess_hit = self.drafter.guess == ctx[-1]      # was the bonus guessed?
        window = tree.prefix(plan.verify) if plan.verify and len(tree) > plan.verify else tree
        path, nxt = self.verifier.verify(ctx, window)
        t2 = time.perf_counter()
        # the overlapped schedule's guess: the draft's main path accepted and its next token the target's
        # (None: the main path's leaf was never fed; the next round's first pass tells)
        guess_hit = False
        if path == window.main_path():
            top = self.drafter.top_child.get(path[-1] if path else -1)
            guess_hit = None if top is None else top == nxt
        keep, self.carry = path, []
        if window is not tree and len(path) == len(window) and tree.tokens[len(window)] == nxt:
            keep, self.carry = list(range(len(tree))), tree.tokens[len(window) + 1:]   # the chain drafted on continues
        self.drafter.accept(len(ctx), tree, keep)
        new = [window.tokens[i] for i in path] + [nxt]
        strategy.update(len(window), len(path))
        widths = [window.depths.count(d) for d in range(1, window.depth + 1)]
        self.last = Round(nodes=len(window), depth=window.depth, width=max(widths, default=0),
                         drafted=len(tree) - carried, carried=carried, accepted=len(path),
                         draft_passes=dec.passes - passes0, catch_up=self.drafter.caught_up,
                         guess_hit=guess_hit, kv_target=kv_target, kv_draft=kv_draft,
                         kv_target_after=self.verifier.cached, kv_draft_after=len(self.drafter.ids),
                         draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3,
                         round_ms=(time.perf_counter() - t0) * 1e3)
        return new, self.last

    @torch.no_grad()
    def generate(self, prompt: list[int], strategy: Strategy, max_new: int) -> tuple[list[int], list[Round]]:
        """New tokens (as plain decoding returns them) and one record per verification round."""
        max_pos = self.pair.max_positions
        check_prompt(len(prompt), max_pos)
        max_new = min(max_new, max_pos - len(prompt))
        eos = self.pair.tokenizer.eos_token_id
        ctx, rounds = list(prompt), []
        self.drafter.reset()
        self.verifier.start(ctx)
        self.carry, self.last = [], None
        while len(ctx) - len(prompt) < max_new and not (eos is not None and eos in ctx[len(prompt):]):
            new, record = self.round(ctx, strategy, max_new - (len(ctx) - len(prompt)))
            ctx += new
            record.round = len(rounds)
            rounds.append(record)
        self._settle_guess(False)
        return finish(ctx[len(prompt):], max_new, eos), rounds
