"""Where each stage's outputs live inside ``results/<run name>/``.

The Snakefile and the stages' own command lines both use these, so a stage run by hand
writes exactly what Snakemake would.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROLES = ("draft", "prm", "target")
EVAL_METHODS = ("draft_only", "target_only")
DUCKDB_FILE = Path("results") / "heterospec.duckdb"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    def model_manifest(self, role: str) -> Path:
        return self.root / "models" / role / "manifest.json"

    def model_checkpoint(self, role: str) -> Path:
        return self.root / "models" / role / "checkpoint"

    @property
    def model_quality(self) -> Path:
        return self.root / "models" / "quality.parquet"

    def evaluation(self, dataset: str, method: str) -> Path:
        return self.root / "evaluate" / dataset / f"{method}.parquet"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def benchmark(self, name: str) -> Path:
        return self.root / "benchmarks" / f"{name}.tsv"
