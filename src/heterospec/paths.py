"""Where each stage's outputs live inside ``results/<run name>/``.

The Snakefile and the stages' own command lines both use these, so a stage run by hand
writes exactly what Snakemake would.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heterospec.trio import ROLES

EVAL_METHODS = ("draft_only", "target_only", "target_sd")
# the trained roles each evaluate method loads, the one whose tokens it writes first (target_sd: the draft drafts)
EVAL_ROLES = {"draft_only": ("draft",), "target_only": ("target",), "target_sd": ("target", "draft")}
DUCKDB_FILE = Path("results") / "heterospec.duckdb"


def prm_learns_from(prm) -> set[str]:
    """The trained roles a PRM trained here reads: the draft for its steps (prm_draft_samples) and the LM it
    starts from (prm_init_from). ``prm`` is ``models.prm``, as a DictConfig or a plain dict."""
    if prm.get("source") != "train":
        return set()
    train = prm["train"]
    needs = {"draft"} if train.get("prm_draft_samples", 0) > 0 else set()
    return needs | ({train.get("prm_init_from", "scratch")} & {"draft", "target"})


def model_key(cfg, role: str, synthetic) -> str:
    """Short hash of everything that shapes one role's model: its own settings, the settings the trio shares
    (prompt, tokenizer) and the synthetic task it trains on; the PRM's also the roles it learns from
    (:func:`prm_learns_from`). Runs with equal keys share the model."""
    from omegaconf import OmegaConf

    models = OmegaConf.to_container(cfg.models, resolve=True)
    keyed = {role} | (prm_learns_from(models["prm"]) if role == "prm" else set())
    for other in ROLES:
        if other not in keyed:
            models.pop(other, None)
            continue
        models[other] = _keyed_layout(models[other])
        if isinstance(models[other].get("train"), dict):
            models[other]["train"] = _applies_to(other, models[other]["train"])
    text = OmegaConf.to_yaml(OmegaConf.create({"models": models, "task": synthetic.generator}))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _keyed_layout(role: dict) -> dict:
    """A role's settings in the layout its key hashes. ``quantized`` (always false) stays where it was, after
    ``dtype``: the draft implementation moved to ``collect.draft``, and models trained before keep their keys."""
    out = {}
    for k, v in role.items():
        out[k] = v
        if k == "dtype":
            out["quantized"] = False
    return out


# training settings that shape only one kind of role: an LM's key leaves out the PRM's and the reverse, so a setting
# added for one kind keeps the other kind's models
_PRM_ONLY = ("stop_at_auroc",)
_LM_ONLY = ("stop_at_step_error", "validate_every_near", "validate_again_below")


def _applies_to(role: str, train: dict) -> dict:
    """``role``'s training settings without those that only the other kind of role reads."""
    if role == "prm":
        return {k: v for k, v in train.items() if k not in _LM_ONLY}
    return {k: v for k, v in train.items() if not k.startswith("prm_") and k not in _PRM_ONLY}


def model_dir(results: Path, role: str, key: str) -> Path:
    """``results/_models/<role>/<key>/``: a role's model, shared by every run whose settings give this key."""
    return Path(results) / "_models" / role / key


# the manifests that list files another stage loads, under the results tree: models (shared, or inside an unkeyed
# run), the W8A8 export, the kernels' sources
_RUN_MANIFESTS = ("models/*/manifest.json", "quantize/*/quantized.json", "hls/*/src/kernel.json")


def artifact_manifests(results: Path, run: str | None = None) -> list[Path]:
    """Every manifest under ``results`` (``heterospec check``), or one run's and the shared models'."""
    runs = "*" if run is None else run
    found = set(Path(results).glob("_models/*/*/manifest.json"))
    found |= {m for pattern in _RUN_MANIFESTS for m in Path(results).glob(f"{runs}/{pattern}")}
    return sorted(found)


@dataclass(frozen=True)
class RunPaths:
    root: Path
    model_keys: Mapping[str, str] | None = None  # role -> model_key; None keeps the models inside the run

    @classmethod
    def for_run(cls, cfg, overrides) -> "RunPaths":
        """The run's paths, its models keyed by their settings (what Snakemake and every stage use)."""
        from heterospec.config import dataset_config, run_dir

        synthetic = dataset_config(cfg, "synthetic", overrides)
        return cls(run_dir(cfg), {role: model_key(cfg, role, synthetic) for role in ROLES})

    def manifests(self, boards) -> list[Path]:
        """The run's manifests that exist: its models', its W8A8 export's, its kernels' for ``boards``."""
        found = [self.model_manifest(r) for r in ROLES] + [self.quantized_draft]
        return [m for m in found + [self.hls_codegen(b) for b in boards] if m.exists()]

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    def model_root(self, role: str) -> Path:
        if self.model_keys is None:
            return self.root / "models" / role
        return model_dir(self.root.parent, role, self.model_keys[role])

    def model_manifest(self, role: str) -> Path:
        return self.model_root(role) / "manifest.json"

    def model_checkpoint(self, role: str) -> Path:
        return self.model_root(role) / "checkpoint"

    @property
    def model_quality(self) -> Path:
        return self.root / "models" / "quality.parquet"

    def evaluation(self, dataset: str, method: str) -> Path:
        return self.root / "evaluate" / dataset / f"{method}.parquet"

    def collect_dir(self, dataset: str, algorithm: str, executor: str) -> Path:
        return self.root / "collect" / dataset / algorithm / executor

    def collect_shard(self, dataset: str, algorithm: str, executor: str, shard: str, table: str) -> Path:
        """One shard's table; ``shard`` reads ``<i>of<n>``. Its resume journal sits beside it."""
        return self.collect_dir(dataset, algorithm, executor) / f"shard-{shard}" / f"{table}.parquet"

    def collect_table(self, dataset: str, algorithm: str, executor: str, table: str) -> Path:
        return self.collect_dir(dataset, algorithm, executor) / f"{table}.parquet"

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

    # the load replay (heterospec.replay.load): per request, per load point, capacity at the SLO
    @property
    def load_requests(self) -> Path:
        return self.root / "load" / "requests.parquet"

    @property
    def load_points(self) -> Path:
        return self.root / "load" / "points.parquet"

    @property
    def load_capacity(self) -> Path:
        return self.root / "load" / "capacity.parquet"

    @property
    def load_design_space(self) -> Path:
        """The FPGA draft's design space under load (heterospec.replay.load.design_space)."""
        return self.root / "load" / "design_space.parquet"

    @property
    def replay_validation_aggregate(self) -> Path:
        """The replay's error on the mean, P50 and P90 latency per trace set and executor."""
        return self.root / "replay" / "validation_aggregate.parquet"

    @property
    def batch_prices(self) -> Path:
        """The run's trio's batched call prices on the CPU (replay.price_sweep; BATCH_PRICES_SCHEMA)."""
        return self.root / "replay" / "batch_prices.parquet"

    @property
    def collect_root(self) -> Path:
        return self.root / "collect"

    # serving: a serving run's tables (heterospec.serve) and its journal; the load replay validated against it
    def serving_table(self, table: str) -> Path:
        return self.root / "serving" / f"{table}.parquet"

    @property
    def serving_journal(self) -> Path:
        return self.root / "serving" / "journal"

    @property
    def serving_validation(self) -> Path:
        return self.root / "serving" / "validation.parquet"

    @property
    def serving_outputs(self) -> Path:
        """Each served request's outputs against the sequential collect's for the same problem."""
        return self.root / "serving" / "outputs.parquet"

    @property
    def hls_perf(self) -> Path:
        """The HLS stage's per-token latency table (read by the replay's ``hls`` profile)."""
        return self.root / "hls" / "perf.parquet"

    # quantize: the W8A8 draft export (a folder; its manifest is written last) and its quality report
    @property
    def quantized_draft(self) -> Path:
        return self.root / "quantize" / "draft" / "quantized.json"

    @property
    def quantize_quality(self) -> Path:
        return self.root / "quantize" / "quality.parquet"

    # hls: per board the generated kernel and its C simulation; the models; the KVMU RTL
    def hls_codegen(self, board: str) -> Path:
        return self.root / "hls" / board / "src" / "kernel.json"

    def hls_lib(self, board: str) -> Path:
        """The record of the board's kernel built as a shared library (the collect's kernel draft loads it)."""
        return self.root / "hls" / board / "lib" / "library.json"

    def hls_csim(self, board: str) -> Path:
        return self.root / "hls" / board / "csim.parquet"

    def hls_vendor(self, board: str) -> Path:
        return self.root / "hls" / board / "vendor.json"

    @property
    def hls_resources(self) -> Path:
        return self.root / "hls" / "resources.parquet"

    @property
    def hls_breakdown(self) -> Path:
        return self.root / "hls" / "breakdown.parquet"

    @property
    def kvmu_synth(self) -> Path:
        return self.root / "hls" / "kvmu" / "synth.parquet"

    # dfvg: per method (a strategy or a baseline) its generations and, for strategies, its rounds; the replay
    def dfvg_generations(self, method: str) -> Path:
        return self.root / "dfvg" / method / "generations.parquet"

    def dfvg_rounds(self, method: str) -> Path:
        return self.root / "dfvg" / method / "rounds.parquet"

    @property
    def dfvg_replay(self) -> Path:
        return self.root / "dfvg" / "replay.parquet"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def benchmark(self, name: str) -> Path:
        return self.root / "benchmarks" / f"{name}.tsv"
