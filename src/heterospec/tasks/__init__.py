"""Problem sets: the synthetic reasoning task and the real benchmarks behind one loader."""
from __future__ import annotations

from omegaconf import DictConfig

from heterospec.errors import UserError


def load_problems(dataset: DictConfig, limit: int = -1) -> list:
    """The problems of a ``dataset`` config entry; ``limit`` (or ``dataset.limit``) caps their number."""
    n = dataset.limit if limit < 0 else (limit if dataset.limit < 0 else min(limit, dataset.limit))
    if dataset.kind == "synthetic":
        from heterospec.tasks.synthetic import generate_problems
        if dataset.generator is None:
            raise UserError(f"dataset {dataset.name}: kind synthetic needs a 'generator' section")
        if n < 0:
            raise UserError(f"dataset {dataset.name}: a synthetic set needs limit >= 0 (its size)")
        return generate_problems(dataset.generator, n, dataset.generator.test_seed)
    from heterospec.tasks.benchmarks import load_benchmark
    return load_benchmark(dataset.kind, dataset.path, n)
