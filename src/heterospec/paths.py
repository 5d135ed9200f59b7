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

    # replay: imported artifact traces per trace set, the simulator's results, the artifact formulas' results
    def replay_events(self, trace_set: str) -> Path:
        return self.root / "replay" / "import" / trace_set / "events.parquet"

    def replay_target_events(self, trace_set: str) -> Path:
        return self.root / "replay" / "import" / trace_set / "target_events.parquet"

    @property
    def replay_results(self) -> Path:
        return self.root / "replay" / "results.parquet"

    @property
    def replay_artifact(self) -> Path:
        return self.root / "replay" / "artifact.parquet"

    @property
    def replay_fit(self) -> Path:
        return self.root / "replay" / "measured_fit.parquet"

    @property
    def replay_validation(self) -> Path:
        return self.root / "replay" / "validation.parquet"

    @property
    def collect_root(self) -> Path:
        return self.root / "collect"

    @property
    def hls_perf(self) -> Path:
        """The HLS stage's per-token latency table (read by the replay's ``hls`` profile)."""
        return self.root / "hls" / "perf.parquet"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def benchmark(self, name: str) -> Path:
        return self.root / "benchmarks" / f"{name}.tsv"
