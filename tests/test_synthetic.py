"""The synthetic task: deterministic, every step exactly checkable, corruptions detectably wrong."""
import random

import pytest

from heterospec.config.schema import GeneratorConfig
from heterospec.errors import UserError
from heterospec.grading import grade
from heterospec.tasks.synthetic import (TEST_RESERVE, check_step, corrupt_step, format_prompt,
                                        generate_problems, held_out_problems, training_stream)

GEN = GeneratorConfig()


def test_same_seed_same_problems_other_seed_different():
    a, b = generate_problems(GEN, 50, seed=3), generate_problems(GEN, 50, seed=3)
    assert [(p.question, p.steps) for p in a] == [(p.question, p.steps) for p in b]
    assert [p.question for p in generate_problems(GEN, 20, seed=3)] == [p.question for p in a[:20]]
    assert [p.question for p in generate_problems(GEN, 50, seed=4)] != [p.question for p in a]


@pytest.mark.parametrize("gen", [GEN, GeneratorConfig(min_steps=3, max_steps=6, num_inputs=3, operations=["+", "-", "*"],
                                                      allow_negative=True, max_value=20)])
def test_steps_check_box_and_grade(gen):
    for p in generate_problems(gen, 200, seed=0):
        n_computed = len(p.steps) - 1
        assert gen.min_steps <= n_computed <= gen.max_steps and n_computed >= 3
        assert p.solution == "\n\n".join(p.steps) and all("\n" not in s for s in p.steps)
        assert all(check_step(p, p.steps[:k], s) for k, s in enumerate(p.steps))
        assert p.steps[-1] == f"\\boxed{{{p.answer}}}" and grade(p.solution, p.answer)
        assert all(-gen.max_value <= v <= gen.max_value for v in p.values.values())
        assert format_prompt(p.question).startswith(p.question)


def test_check_step_rejects_wrong_steps():
    p = generate_problems(GEN, 1, seed=5)[0]
    assert not check_step(p, [], p.steps[1])                  # right step, wrong place
    assert not check_step(p, p.steps, "\\boxed{1}")          # past the end
    assert not check_step(p, [], "garbage")
    var, rest = p.steps[0].split("=", 1)
    res = int(rest.rsplit("=", 1)[1])
    assert not check_step(p, [], f"{var}={rest.rsplit('=', 1)[0]}={res + 1}")


def test_corrupted_steps_fail_the_check():
    rng = random.Random(0)
    for p in generate_problems(GEN, 100, seed=7):
        for k, s in enumerate(p.steps):
            bad = corrupt_step(p, p.steps[:k], s, rng)
            assert bad != s and not check_step(p, p.steps[:k], bad)
            assert ("\\boxed" in bad) == ("\\boxed" in s)     # same kind of step, plausibly wrong


def test_training_stream_never_yields_test_questions():
    test = {p.question for p in held_out_problems(GEN, TEST_RESERVE)}
    stream = training_stream(GEN, seed=GEN.test_seed)         # even the test seed itself is filtered
    assert not any(next(stream).question in test for _ in range(3000))


def test_bad_knobs_are_user_errors():
    with pytest.raises(UserError):
        generate_problems(GeneratorConfig(min_steps=2), 1, 0)
    with pytest.raises(UserError):
        generate_problems(GeneratorConfig(operations=["^"]), 1, 0)
    with pytest.raises(UserError):
        generate_problems(GeneratorConfig(max_operand=20, max_value=9), 1, 0)
