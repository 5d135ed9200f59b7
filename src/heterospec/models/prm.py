"""Process reward model in the Qwen2.5-Math-PRM interface: one reward per reasoning step.

:class:`PrmProtocol` is the one place that turns (question, steps) into PRM input and reads the
rewards back: each step is closed by the separator token ``<extra_0>`` and its reward is
``softmax(logits)[1]`` at that separator. Training, the quality report and the collect workers all
go through it. Two variants, picked by ``models.prompt``: ``plain`` (the synthetic task's prompt,
the tiny PRM) and ``qwen_math`` (the system/user/assistant chat that Qwen2.5-Math-PRM expects).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from heterospec.errors import UserError
from heterospec.tasks.synthetic import format_prompt

STEP_TOKEN = "<extra_0>"
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class PrmProtocol:
    """The plain layout: bos, the synthetic task's prompt, then each step closed by the separator."""

    name = "plain"

    def __init__(self, tokenizer, step_token: str = STEP_TOKEN):
        sep = tokenizer.convert_tokens_to_ids(step_token)
        if sep is None or sep == tokenizer.unk_token_id:
            raise UserError(f"PRM tokenizer has no step separator token '{step_token}' (models.prm_step_token)")
        self.tokenizer, self.step_token, self.sep = tokenizer, step_token, sep

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prefix(self, question: str) -> list[int]:
        """Tokens before the first step (the tokenizer's own specials included, as in training)."""
        return self.tokenizer(format_prompt(question))["input_ids"]

    def ids(self, question: str, steps: list[str]) -> list[int]:
        """PRM input ending at the last step's separator; steps lose their surrounding delimiter whitespace."""
        ids = list(self.prefix(question))
        for s in steps:
            ids += self._encode(s.strip()) + [self.sep]
        return ids

    @staticmethod
    def reward(logits: torch.Tensor) -> torch.Tensor:
        """P(correct) from 2-label logits [..., 2]."""
        return torch.softmax(logits.float(), dim=-1)[..., 1]

    def rewards(self, ids: list[int], logits: torch.Tensor) -> list[float]:
        """One reward per separator in ``ids``, read from the logits [T, 2] over them."""
        return self.reward(logits)[torch.as_tensor(ids, device=logits.device) == self.sep].tolist()


class QwenMathProtocol(PrmProtocol):
    """Qwen2.5-Math-PRM's chat: system prompt, the question as the user, the steps as the assistant."""

    name = "qwen_math"

    def _chat(self, question: str, body: str) -> str:
        messages = [{"role": "system", "content": QWEN_MATH_SYSTEM}, {"role": "user", "content": question},
                    {"role": "assistant", "content": body}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)

    def prefix(self, question: str) -> list[int]:
        marker = "\x00"  # cut the template where the assistant's content begins
        return self.tokenizer(self._chat(question, marker).split(marker)[0])["input_ids"]

    def ids(self, question: str, steps: list[str]) -> list[int]:
        # the whole text at once, as the model's own usage tokenizes it; the template's tail after the
        # last separator is dropped (a causal model's rewards do not depend on it)
        if not steps:
            return self.prefix(question)
        body = "".join(s.strip() + self.step_token for s in steps)
        ids = self.tokenizer(self._chat(question, body))["input_ids"]
        last = len(ids) - 1 - ids[::-1].index(self.sep)
        return ids[: last + 1]


PROTOCOLS = {"plain": PrmProtocol, "qwen_math_cot": QwenMathProtocol}   # models.prompt -> PRM protocol


def protocol_for(prompt: str, tokenizer, step_token: str = STEP_TOKEN) -> PrmProtocol:
    """The PRM protocol that goes with the models group's prompt style."""
    if prompt not in PROTOCOLS:
        raise UserError(f"models.prompt={prompt}: no PRM protocol for it; expected one of {sorted(PROTOCOLS)}")
    return PROTOCOLS[prompt](tokenizer, step_token)


class PRM:
    """A loaded PRM (``.model``, ``.tokenizer``) read through its protocol."""

    def __init__(self, model, protocol: PrmProtocol):
        self.model, self.protocol, self.tokenizer = model, protocol, protocol.tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def score_batch(self, items: list[tuple[str, list[str]]]) -> list[list[float]]:
        """Step rewards for several (question, steps) at once (right-padded, so causal scores are unchanged)."""
        if not items:
            return []
        enc = [self.protocol.ids(q, s) for q, s in items]
        T = max(len(e) for e in enc)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(enc), T), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, e in enumerate(enc):
            ids[i, : len(e)], att[i, : len(e)] = torch.tensor(e), 1
        logits = self.model(input_ids=ids.to(self.device), attention_mask=att.to(self.device))[0]  # [B, T, 2]
        out = []
        for i, (e, (_, steps)) in enumerate(zip(enc, items)):
            r = self.protocol.rewards(e, logits[i, : len(e)])
            if len(r) != len(steps):
                raise UserError(f"a step contains the PRM separator '{self.protocol.step_token}' itself")
            out.append(r)
        return out

    def score_steps(self, question: str, steps: list[str]) -> list[float]:
        """Reward in [0, 1] of each step, given the steps before it."""
        return self.score_batch([(question, steps)])[0]


class StepScorer:
    """The PRM as a reasoning role: the reward of a path's last step, feeding only tokens it has not seen.

    ``cache`` holds the model's KV cache over the ids it has read (models.prefix_cache.PrefixCache);
    ``record`` builds the measurement of one model call (reasoning.roles.Call).
    """

    def __init__(self, protocol: PrmProtocol, cache, record: Callable[..., Any]):
        self.protocol, self.cache, self.record = protocol, cache, record
        self._fresh = type(cache)

    def reset(self, seed: int = 0) -> None:
        self.cache = self._fresh(self.cache.model)

    def ids(self, question: str, steps: list[str]) -> list[int]:
        return self.protocol.ids(question, steps)

    def score(self, question: str, steps: list[str]) -> tuple[float, list]:
        """Reward in [0, 1] of the last step given the ones before it, and the call that computed it."""
        ids = self.ids(question, steps)
        t0 = time.perf_counter_ns()
        logits, _, fed = self.cache.advance(ids)
        reward = float(self.protocol.reward(logits))
        return reward, [self.record("score", fed, 0, len(self.cache.ids) - fed, t0, time.perf_counter_ns())]

    @property
    def processed(self) -> int:
        return self.cache.processed
