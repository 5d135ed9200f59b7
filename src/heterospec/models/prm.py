"""Process reward model in the Qwen2.5-Math-PRM interface: one reward per reasoning step.

Each step is followed by the separator token ``<extra_0>``; the model's 2-label logits at a
separator give the step's reward, ``softmax(logits)[1]``. Because the model is causal, one
forward pass over a whole solution scores every step. Real Qwen2.5-Math-PRM checkpoints
expect the steps inside their chat format; the tiny PRM takes the synthetic task's plain prompt.
"""
from __future__ import annotations

import torch

from heterospec.tasks.synthetic import format_prompt

STEP_TOKEN = "<extra_0>"
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class PRM:
    def __init__(self, model, tokenizer, step_token: str = STEP_TOKEN, prompt: str = "auto"):
        self.model, self.tokenizer = model, tokenizer
        self.sep_id = tokenizer.convert_tokens_to_ids(step_token)
        self.step_token = step_token
        archs = getattr(model.config, "architectures", None) or []
        # "auto": the chat format for Qwen's own PRM, the synthetic task's prompt for the tiny one
        self.prompt = prompt if prompt != "auto" else (
            "qwen_math" if "Qwen2ForProcessRewardModel" in archs else "plain")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def text(self, question: str, steps: list[str]) -> str:
        """The PRM input for a question and its steps, a separator closing each step."""
        body = "".join(s + self.step_token for s in steps)
        if self.prompt == "plain":
            return format_prompt(question) + body
        messages = [{"role": "system", "content": QWEN_MATH_SYSTEM},
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": body}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)

    @torch.no_grad()
    def score_batch(self, items: list[tuple[str, list[str]]]) -> list[list[float]]:
        """Step rewards for several (question, steps) at once (right-padded, so causal scores are unchanged)."""
        if not items:
            return []
        enc = [self.tokenizer(self.text(q, s))["input_ids"] for q, s in items]
        T = max(len(e) for e in enc)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(enc), T), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, e in enumerate(enc):
            ids[i, : len(e)], att[i, : len(e)] = torch.tensor(e), 1
        ids, att = ids.to(self.device), att.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=att)[0]          # [B, T, 2]
        probs = torch.softmax(logits.float(), dim=-1)[..., 1]             # [B, T]
        out = []
        for i, (_, steps) in enumerate(items):
            r = probs[i][(ids[i] == self.sep_id) & (att[i] == 1)].tolist()
            assert len(r) == len(steps), "a step contains the separator token itself"
            out.append(r)
        return out

    def score_steps(self, question: str, steps: list[str]) -> list[float]:
        """Reward in [0, 1] of each step, given the steps before it."""
        return self.score_batch([(question, steps)])[0]
