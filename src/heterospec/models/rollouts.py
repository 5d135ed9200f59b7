"""The draft's own next steps, each labelled by the synthetic task's exact checker.

A sample is the draft's step after a correct prefix of a problem's solution: the situation the
PRM judges during reasoning, where the path so far has been accepted. The same samples feed the
PRM's training (greedy and at a temperature) and its quality report (greedy, held-out problems).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from heterospec.models.generate import generate_batch
from heterospec.models.prompts import format_prompt
from heterospec.tasks.synthetic import Problem, check_step

STEP_TOKENS = 24   # a synthetic step is at most ~16 characters; the rest is cut at the delimiter


@dataclass(frozen=True)
class StepSample:
    problem: Problem
    k: int            # steps of the correct solution before it
    step: str         # the draft's step, delimiter stripped
    correct: bool     # check_step: definition, operand values and arithmetic all right

    @classmethod
    def of(cls, problem: Problem, k: int, text: str, delimiter: str = "\n\n") -> "StepSample":
        """The step a writer's ``text`` starts with, after the first ``k`` correct steps, labelled by the checker."""
        step = text.split(delimiter)[0].strip()
        return cls(problem, k, step, check_step(problem, problem.steps[:k], step))

    @property
    def steps(self) -> list[str]:
        """The path the PRM scores: the correct prefix, then the draft's step."""
        return self.problem.steps[: self.k] + [self.step]


def context(problem: Problem, k: int, prompt: str = "plain", tokenizer=None, delimiter: str = "\n\n") -> str:
    """What the draft reads before writing step ``k``: the prompt and the first ``k`` correct steps."""
    return format_prompt(prompt, problem.question, tokenizer) + "".join(s + delimiter for s in problem.steps[:k])


def sample_steps(model, tokenizer, at: list[tuple[Problem, int]], temperature: float = 0.0, seed: int = 0,
                 prompt: str = "plain", delimiter: str = "\n\n", batch_size: int = 100) -> list[StepSample]:
    """The draft's next step at each (problem, k), greedy or sampled, labelled by the checker."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out: list[StepSample] = []
    for i in range(0, len(at), batch_size):
        chunk = at[i : i + batch_size]
        texts = generate_batch(model, tokenizer, [context(p, k, prompt, tokenizer, delimiter) for p, k in chunk],
                               STEP_TOKENS, temperature=temperature, generator=gen)
        out += [StepSample.of(p, k, text, delimiter) for (p, k), (text, _) in zip(chunk, texts)]
    return out


def every_position(problems: list[Problem]) -> list[tuple[Problem, int]]:
    """Each step position of each problem (the quality report's set)."""
    return [(p, k) for p in problems for k in range(len(p.steps))]


def random_positions(problems: list[Problem], seed: int) -> list[tuple[Problem, int]]:
    """One random step position per problem (the training pool's set: more problems, same cost)."""
    rng = random.Random(seed)
    return [(p, rng.randrange(len(p.steps))) for p in problems]
