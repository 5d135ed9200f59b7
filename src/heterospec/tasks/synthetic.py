"""Synthetic multi-step arithmetic: every reasoning step is checkable exactly.

A problem gives a few inputs and a chain of definitions; the solution evaluates them in order,
one step per definition, then boxes the value of the last one::

    question  a=3,b=5,c=a+b,d=c-a,e=d+b. Find e.
    steps     c=a+b=3+5=8 | d=c-a=8-3=5 | e=d+b=5+5=... | \\boxed{...}

Each step copies its definition, substitutes the operand values and writes the result, so a
step can be wrong in a few recognisable ways (wrong definition, wrong operand value, wrong
arithmetic) that :func:`corrupt_step` imitates for the PRM's negatives. Every value stays
within ``[0, max_value]`` (``[-max_value, max_value]`` with ``allow_negative``) so numbers
stay short for character-level models. Each computed variable after the first uses the one
before it, so an early mistake reaches the answer.
"""
from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from typing import Any, Iterator

from heterospec.errors import UserError

SUPPORTED_OPS = ("+", "-", "*", "/")
_VAL = r"(-?\d+|\(-\d+\))"
_STEP_RE = re.compile(rf"^\s*([a-z])=([a-z])([-+*/])([a-z])={_VAL}([-+*/]){_VAL}=(-?\d+)\s*$")
_BOX_RE = re.compile(r"^\s*\\boxed\{(-?\d+)\}\s*$")


@dataclass
class Problem:
    id: str
    question: str
    steps: list[str]
    answer: str
    inputs: dict[str, int] = field(default_factory=dict)        # given variable -> value
    defs: list[tuple[str, str, str, str]] = field(default_factory=list)  # (var, left, op, right) in order
    values: dict[str, int] = field(default_factory=dict)        # every variable -> true value

    @property
    def solution(self) -> str:
        return "\n\n".join(self.steps)


def _get(gen: Any, key: str, default: Any) -> Any:
    return getattr(gen, key, default) if not isinstance(gen, dict) else gen.get(key, default)


def _apply(x: int, op: str, y: int) -> int | None:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return x // y if y != 0 and x % y == 0 else None
    raise UserError(f"synthetic generator: unsupported operation {op!r}; use some of {list(SUPPORTED_OPS)}")


def _fmt(v: int) -> str:
    """An operand value as written in a step: negatives in parentheses so '5-(-3)' stays readable."""
    return f"({v})" if v < 0 else str(v)


def _parse_val(s: str) -> int:
    return int(s.strip("()"))


class _Spec:
    """Validated knobs of a GeneratorConfig."""

    def __init__(self, gen: Any):
        self.min_steps = int(_get(gen, "min_steps", 3))
        self.max_steps = int(_get(gen, "max_steps", 4))
        self.num_inputs = int(_get(gen, "num_inputs", 2))
        self.lo_in = int(_get(gen, "min_operand", 1))
        self.hi_in = int(_get(gen, "max_operand", 9))
        self.ops = [str(o) for o in _get(gen, "operations", ["+", "-"])]
        self.hi = int(_get(gen, "max_value", 9))
        self.lo = -self.hi if bool(_get(gen, "allow_negative", False)) else 0
        bad = [o for o in self.ops if o not in SUPPORTED_OPS]
        if bad or not self.ops:
            raise UserError(f"dataset.generator.operations={self.ops}: use a non-empty subset of {list(SUPPORTED_OPS)}")
        if not 3 <= self.min_steps <= self.max_steps:
            raise UserError(f"dataset.generator: need 3 <= min_steps <= max_steps (got {self.min_steps}, {self.max_steps})")
        if self.num_inputs < 1 or self.num_inputs + self.max_steps > 26:
            raise UserError("dataset.generator: need num_inputs >= 1 and num_inputs + max_steps <= 26 (one letter per variable)")
        if not (self.lo <= self.lo_in <= self.hi_in <= self.hi):
            raise UserError(f"dataset.generator: inputs [{self.lo_in}, {self.hi_in}] must lie within the value range "
                            f"[{self.lo}, {self.hi}] (raise max_value)")


def _sample(spec: _Spec, rng: random.Random, pid: str) -> Problem:
    while True:  # rejection: restart when some step has no operands keeping the value in range
        names = iter(string.ascii_lowercase)
        inputs = {next(names): rng.randint(spec.lo_in, spec.hi_in) for _ in range(spec.num_inputs)}
        values = dict(inputs)
        defs: list[tuple[str, str, str, str]] = []
        prev: str | None = None
        ok = True
        for _ in range(rng.randint(spec.min_steps, spec.max_steps)):
            var = next(names)
            known = list(values)
            for _try in range(50):
                a = prev if prev is not None else rng.choice(known)
                others = [k for k in known if k != a] or known
                b = rng.choice(others)
                if rng.random() < 0.5:
                    a, b = b, a
                op = rng.choice(spec.ops)
                r = _apply(values[a], op, values[b])
                if r is not None and spec.lo <= r <= spec.hi:
                    break
            else:
                ok = False
                break
            defs.append((var, a, op, b))
            values[var] = r
            prev = var
        if ok:
            break
    question = ",".join([f"{k}={v}" for k, v in inputs.items()] + [f"{v}={a}{op}{b}" for v, a, op, b in defs])
    question += f". Find {prev}."
    steps = [f"{v}={a}{op}{b}={_fmt(values[a])}{op}{_fmt(values[b])}={values[v]}" for v, a, op, b in defs]
    answer = str(values[prev])
    steps.append(f"\\boxed{{{answer}}}")
    return Problem(id=pid, question=question, steps=steps, answer=answer, inputs=inputs, defs=defs, values=values)


def generate_problems(gen: Any, n: int, seed: int) -> list[Problem]:
    """``n`` distinct problems, deterministic per seed; a prefix of a longer list for the same seed."""
    spec, rng = _Spec(gen), random.Random(seed)
    out: list[Problem] = []
    seen: set[str] = set()
    while len(out) < n:
        p = _sample(spec, rng, f"syn-{seed}-{len(out)}")
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    return out


def held_out_problems(gen: Any, n: int) -> list[Problem]:
    """The held-out test set: the first ``n`` problems of ``gen.test_seed``."""
    return generate_problems(gen, n, int(_get(gen, "test_seed", 12345)))


# Training never sees any of the first TEST_RESERVE test-seed questions, so every test limit up to it is clean.
TEST_RESERVE = 2000


def training_stream(gen: Any, seed: int) -> Iterator[Problem]:
    """Endless training problems from ``seed``, skipping every question of the held-out test set."""
    reserved = {p.question for p in held_out_problems(gen, TEST_RESERVE)}
    spec, rng = _Spec(gen), random.Random(seed)
    i = 0
    while True:
        p = _sample(spec, rng, f"train-{seed}-{i}")
        i += 1
        if p.question not in reserved:
            yield p


def check_step(problem: Problem, prefix_steps: list[str], step: str) -> bool:
    """True when ``step`` is exactly the next correct step after ``len(prefix_steps)`` steps."""
    k = len(prefix_steps)
    if k < len(problem.defs):
        m = _STEP_RE.match(step)
        if not m:
            return False
        var, a, op, b, va, op2, vb, res = m.groups()
        return ((var, a, op, b) == problem.defs[k] and op2 == op
                and _parse_val(va) == problem.values[a] and _parse_val(vb) == problem.values[b]
                and int(res) == problem.values[var])
    if k == len(problem.defs):
        m = _BOX_RE.match(step)
        return bool(m) and int(m.group(1)) == int(problem.answer)
    return False


def corrupt_step(problem: Problem, prefix_steps: list[str], step: str, rng: random.Random) -> str:
    """A plausible wrong version of the step after ``prefix_steps``: the kinds of mistakes a weak model makes."""
    k = len(prefix_steps)
    spec_lo = min(problem.values.values())
    spec_hi = max(max(problem.values.values()), 9)
    vals = list(problem.values.values())
    if k >= len(problem.defs):  # the boxed answer: box some other value, often an earlier variable's
        true = int(problem.answer)
        cands = [v for v in vals if v != true] or [true + 1]
        while True:
            v = rng.choice(cands) if rng.random() < 0.6 else rng.randint(spec_lo, spec_hi)
            if v != true:
                return f"\\boxed{{{v}}}"
    var, a, op, b = problem.defs[k]
    known = [x for x in problem.values if x < var]
    for _ in range(100):
        va, vb, fa, fb, fop = problem.values[a], problem.values[b], a, b, op
        kind = rng.choice(("result", "operand", "operand", "definition", "operator"))
        if kind == "operand":  # a value copied from the wrong place
            wrong = rng.choice(vals) if rng.random() < 0.7 else rng.randint(spec_lo, spec_hi)
            if rng.random() < 0.5:
                va = wrong
            else:
                vb = wrong
            res = _apply(va, op, vb)
        elif kind == "definition":  # the wrong variable copied into the definition, then used consistently
            if rng.random() < 0.5:
                fa = rng.choice(known)
            else:
                fb = rng.choice(known)
            va, vb = problem.values[fa], problem.values[fb]
            res = _apply(va, op, vb)
        elif kind == "operator":  # the right operands combined with another operation
            fop = rng.choice([o for o in SUPPORTED_OPS if o != op])
            res = _apply(va, fop, vb)
            fop = op
        else:  # plain arithmetic slip
            res = problem.values[var] + rng.choice((-2, -1, 1, 1, 2, 3))
        if res is None:
            continue
        cand = f"{var}={fa}{fop}{fb}={_fmt(va)}{fop}{_fmt(vb)}={res}"
        if not check_step(problem, prefix_steps, cand):
            return cand
    return f"{var}={a}{op}{b}={_fmt(problem.values[a])}{op}{_fmt(problem.values[b])}={problem.values[var] + 1}"


def format_prompt(question: str) -> str:
    """What the causal LMs are conditioned on; they continue with the steps."""
    return question + "\n\n"
