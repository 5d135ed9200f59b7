"""The DFVG decoding loop, one verification round at a time, and the baselines it is measured against.

A round: the strategy plans, the draft grows a tree from the committed context, the target verifies it in one
pass, the accepted path plus the target's next token are committed, both caches keep only that path. Each round
leaves a trace row (:data:`heterospec.dfvg.traces.ROUNDS_SCHEMA`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from heterospec.dfvg.drafter import Drafter, Plan
from heterospec.dfvg.strategies import Strategy
from heterospec.dfvg.verify import Verifier
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
    """Draft + target with their caches; :meth:`generate` decodes one prompt with one strategy."""

    def __init__(self, pair: Pair, temperature: float = 0.0, seed: int = 0, draft_kernel: str = "auto"):
        self.pair = pair
        self.drafter = Drafter(pair.draft, draft_kernel)
        self.verifier = Verifier(pair.target, temperature, seed)

    @torch.no_grad()
    def generate(self, prompt: list[int], strategy: Strategy, max_new: int) -> tuple[list[int], list[dict]]:
        """New tokens (as plain decoding returns them) and one trace dict per verification round."""
        max_pos = self.pair.max_positions
        check_prompt(len(prompt), max_pos)
        max_new = min(max_new, max_pos - len(prompt))
        eos = self.pair.tokenizer.eos_token_id
        ctx, carry, rounds = list(prompt), [], []
        self.drafter.reset()
        self.verifier.start(ctx)
        dec = self.drafter.dec
        while len(ctx) - len(prompt) < max_new and not (eos is not None and eos in ctx[len(prompt):]):
            plan = strategy.plan()
            room = min(max_new - (len(ctx) - len(prompt)), max_pos - len(ctx))   # no node past the budget
            if plan.depth > room:
                plan = Plan(room, plan.width, min(plan.budget, room * plan.width), plan.top_k, plan.min_confidence,
                            plan.verify)
            kv_target, kv_draft, passes0, carried = self.verifier.cached, len(self.drafter.ids), dec.passes, len(carry)
            t0 = time.perf_counter()
            tree = self.drafter.build(ctx, plan, carry)
            t1 = time.perf_counter()
            if rounds and rounds[-1]["guess_hit"] is None:    # last round's main path was accepted: was the bonus guessed?
                rounds[-1]["guess_hit"] = self.drafter.guess == ctx[-1]
            window = tree.prefix(plan.verify) if plan.verify and len(tree) > plan.verify else tree
            path, nxt = self.verifier.verify(ctx, window)
            t2 = time.perf_counter()
            # the overlapped schedule's guess: the draft's main path accepted and its next token the target's
            # (None: the main path's leaf was never fed; the next round's first pass tells)
            guess_hit = False
            if path == window.main_path():
                top = self.drafter.top_child.get(path[-1] if path else -1)
                guess_hit = None if top is None else top == nxt
            keep, carry = path, []
            if window is not tree and len(path) == len(window) and tree.tokens[len(window)] == nxt:
                keep, carry = list(range(len(tree))), tree.tokens[len(window) + 1:]   # the chain drafted on continues
            self.drafter.accept(len(ctx), tree, keep)
            ctx += [window.tokens[i] for i in path] + [nxt]
            strategy.update(len(window), len(path))
            widths = [window.depths.count(d) for d in range(1, window.depth + 1)]
            rounds.append(dict(round=len(rounds), nodes=len(window), depth=window.depth, width=max(widths, default=0),
                               drafted=len(tree) - carried, carried=carried, accepted=len(path),
                               draft_passes=dec.passes - passes0, catch_up=self.drafter.caught_up,
                               guess_hit=guess_hit, kv_target=kv_target, kv_draft=kv_draft,
                               kv_target_after=self.verifier.cached, kv_draft_after=len(self.drafter.ids),
                               draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3,
                               round_ms=(time.perf_counter() - t0) * 1e3))
        if rounds and rounds[-1]["guess_hit"] is None:
            rounds[-1]["guess_hit"] = False
        return finish(ctx[len(prompt):], max_new, eos), rounds


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
