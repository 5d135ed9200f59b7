"""Benchmark loaders: real copies from ../shared, and one clear line for each kind of bad file."""
from __future__ import annotations

import json

import pytest

from heterospec.errors import UserError
from heterospec.tasks import load_problems
from heterospec.tasks.benchmarks import load_benchmark
from heterospec.config import compose_config

SIZES = {"math500": 500, "gsm8k": 1319, "gaokao2023en": 385, "olympiadbench": 675}


@pytest.mark.parametrize("kind, size", SIZES.items())
def test_real_benchmarks_load(kind, size, shared_datasets):
    problems = load_benchmark(kind, shared_datasets / kind / "test.jsonl")
    assert len(problems) == size
    assert len({p.id for p in problems}) == size
    assert all(p.question for p in problems)


def test_dataset_config_points_at_the_configured_path(shared_datasets):
    cfg = compose_config(["dataset=olympiadbench", f"paths.datasets={shared_datasets}", "dataset.limit=7"])
    problems = load_problems(cfg.dataset)
    assert len(problems) == 7 and problems[0].answer == "2"


def _write(tmp_path, lines):
    f = tmp_path / "test.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_malformed_line_names_file_and_line(tmp_path):
    f = _write(tmp_path, [json.dumps({"question": "q", "answer": "a #### 3"}), "{not json"])
    with pytest.raises(UserError, match=r"test.jsonl:2: not valid JSON"):
        load_benchmark("gsm8k", f)


def test_missing_field_names_it(tmp_path):
    f = _write(tmp_path, [json.dumps({"question": "q"})])
    with pytest.raises(UserError, match=r"test.jsonl:1: missing field 'answer'"):
        load_benchmark("gaokao2023en", f)
    f = _write(tmp_path, [json.dumps({"question": "q", "answer": "no final"})])
    with pytest.raises(UserError, match=r"'#### N'"):
        load_benchmark("gsm8k", f)


def test_missing_file_says_how_to_fix(tmp_path):
    with pytest.raises(UserError, match="paths.datasets"):
        load_benchmark("math500", tmp_path / "nope.jsonl")
