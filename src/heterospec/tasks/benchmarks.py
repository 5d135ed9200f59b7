"""Loaders for the real benchmarks (Qwen2.5-Math evaluation JSONL copies), read from a configured path."""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from heterospec.errors import UserError
from heterospec.tasks.synthetic import Problem

BENCHMARKS = ("math500", "gsm8k", "gaokao2023en", "olympiadbench")

# (question field, how to get the reference answer) per benchmark
_QUESTION = {"math500": "problem", "gsm8k": "question", "gaokao2023en": "question", "olympiadbench": "question"}


def _answer(kind: str, row: dict, where: str) -> str:
    if kind == "gsm8k":
        text = _field(row, "answer", where)
        if "####" not in text:
            raise UserError(f"{where}: field 'answer' has no '#### N' final answer")
        return text.split("####")[-1].strip().replace(",", "")
    if kind == "olympiadbench":
        final = _field(row, "final_answer", where)
        if isinstance(final, str):  # some copies store the list as its repr
            try:
                final = ast.literal_eval(final)
            except (ValueError, SyntaxError):
                final = [final]
        if not isinstance(final, list) or not final:
            raise UserError(f"{where}: field 'final_answer' must be a non-empty list")
        return ",".join(str(a).strip().strip("$") for a in final)
    return str(_field(row, "answer", where)).strip().strip("$")


def _field(row: dict, name: str, where: str):
    if name not in row or row[name] is None:
        raise UserError(f"{where}: missing field '{name}'")
    return row[name]


def _solution_steps(kind: str, row: dict) -> list[str]:
    sol = row.get("solution") if kind != "gsm8k" else row.get("answer", "").split("####")[0]
    if isinstance(sol, list):
        sol = "\n\n".join(sol)
    return [s.strip() for s in str(sol or "").split("\n\n") if s.strip()]


def load_benchmark(kind: str, path: str | Path, limit: int = -1) -> list[Problem]:
    """Problems of one benchmark; a malformed line raises UserError naming the file and line."""
    if kind not in BENCHMARKS:
        raise UserError(f"dataset kind '{kind}' is not one of {list(BENCHMARKS)} or 'synthetic'")
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: benchmark file not found (set paths.datasets=DIR holding {kind}/test.jsonl, "
                        f"or the HETEROSPEC_DATASETS environment variable)")
    problems: list[Problem] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
            question = str(_field(row, _QUESTION[kind], where))
            pid = str(row.get("idx", row.get("id", row.get("unique_id", lineno - 1))))
            problems.append(Problem(id=f"{kind}-{pid}", question=question,
                                    steps=_solution_steps(kind, row), answer=_answer(kind, row, where)))
            if 0 <= limit <= len(problems):
                break
    empty = [p.id for p in problems if not p.answer]
    if empty:  # real data: Gaokao2023EN has two; they count as wrong, as in the reference evaluation
        print(f"heterospec: warning: {path}: {len(empty)} problem(s) without a reference answer "
              f"({', '.join(empty[:3])}); they are graded as incorrect", file=sys.stderr)
    return problems
