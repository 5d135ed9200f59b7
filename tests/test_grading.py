"""The answer grader, on hand-picked cases and on every reference answer of the real benchmarks."""
from __future__ import annotations

import pytest

from heterospec.grading import answers_match, grade, last_boxed, normalize
from heterospec.tasks.benchmarks import BENCHMARKS, load_benchmark


def test_last_boxed_takes_the_last_balanced_box():
    assert last_boxed("x \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert last_boxed("no box here") is None
    assert last_boxed("cut off \\boxed{\\frac{1}{") is None
    assert last_boxed("\\fbox{7}") == "7"


@pytest.mark.parametrize("pred, gold", [
    ("\\frac{14}{3}", "\\frac{14}{3}"),
    ("\\dfrac{1}{2}", "0.5"),          # numeric
    ("1,000", "1000"),                   # thousands separator
    ("18.00", "18"),
    ("\\$18", "18"),                     # currency
    ("x^2+2x", "2x+x^2"),                # symbolic (math-verify)
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("\\text{(C)}", "C"),
    ("12", "12.00001"),                  # relative tolerance 1e-4
])
def test_equal_answers(pred, gold):
    assert answers_match(pred, gold)


@pytest.mark.parametrize("pred, gold", [
    ("3", "4"),
    ("12", "12.01"),
    ("\\frac{1}{3}", "0.33"),
    ("", "5"),
    # documented limitation: set-builder notation against an interval is not recognised
    ("\\{x|-2\\leq x < 1\\}", "[-2,1)"),
])
def test_unequal_answers(pred, gold):
    assert not answers_match(pred, gold)


def test_grade_needs_a_box():
    assert grade("so the answer is \\boxed{42}.", "42")
    assert not grade("so the answer is 42.", "42")


def test_normalize():
    assert normalize(" 5\\text{ cm}. ") == "5"
    assert normalize("90^\\circ") == "90"


@pytest.mark.parametrize("kind", BENCHMARKS)
def test_every_reference_answer_grades_against_itself(kind, shared_datasets):
    problems = load_benchmark(kind, shared_datasets / kind / "test.jsonl")
    failures = [p.answer for p in problems if p.answer and not grade(f"Thus \\boxed{{{p.answer}}}.", p.answer)]
    assert failures == []
    # and a different answer from the same set is (almost always) graded wrong
    wrong = sum(grade(f"\\boxed{{{a.answer}}}", b.answer) for a, b in zip(problems, problems[1:])
                if a.answer and b.answer and normalize(a.answer) != normalize(b.answer))
    assert wrong <= 0.01 * len(problems)


def test_gsm8k_answers_parsed_from_hash_lines(shared_datasets):
    p = load_benchmark("gsm8k", shared_datasets / "gsm8k" / "test.jsonl", limit=1)[0]
    assert p.answer == "18" and p.steps and "####" not in p.steps[-1]
    assert grade("She makes 9 * 2 = \\boxed{\\$18} a day.", p.answer)
