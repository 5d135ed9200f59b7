"""Shared fixtures: the repository root, the ../shared folder (skip when absent), a fresh work dir, Snakemake
dry runs shared by every test that reads the same plan, and the ci models trained and quantised once a session."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATASETS = SHARED / "datasets"


@pytest.fixture
def shared_datasets() -> Path:
    if not (DATASETS / "math500" / "test.jsonl").exists():
        pytest.skip(f"benchmark copies not found at {DATASETS}")
    return DATASETS


def run_cmd(args: list[str], cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
            base_env: dict | None = None):
    """Run a command with the test interpreter's environment (or ``base_env``, a copy taken elsewhere: a background
    thread must not read os.environ while pytest sets PYTEST_CURRENT_TEST in it); returns CompletedProcess (text)."""
    full_env = {**(os.environ if base_env is None else base_env), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd or ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def heterospec(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    return run_cmd([sys.executable, "-m", "heterospec", *args], cwd=cwd, env=env, timeout=timeout)


def snakemake(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 1200,
              base_env: dict | None = None):
    return run_cmd([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args],
                   cwd=cwd, env=env, timeout=timeout, base_env=base_env)


class DryRuns:
    """Snakemake dry runs (``snakemake -n``), each distinct call run once per session and shared by every test that
    reads its plan. The calls a test module lists in ``DRY_RUNS`` start in a background thread as the session
    starts: most tests keep one core busy, and a plan takes seconds of config composition on the other."""

    def __init__(self):
        self.root, self.pool, self.runs = None, None, {}

    def start(self, *config: str, profile: str | None = None, env: dict | None = None,
              targets: tuple[str, ...] = ()) -> Future:
        key = (config, profile, tuple(sorted((env or {}).items())), targets)
        if key not in self.runs:
            if self.pool is None:
                self.root = Path(tempfile.mkdtemp(prefix="heterospec-dry-runs-"))
                self.pool = ThreadPoolExecutor(max_workers=1)
            args = ["-n", *targets, "--directory", tempfile.mkdtemp(dir=self.root), "--config", *config]
            if profile:
                args = ["--profile", str(ROOT / "workflow" / "profiles" / profile), *args]
            # the environment copied here, in the calling thread (the pool's thread runs while tests change it)
            self.runs[key] = self.pool.submit(snakemake, *args, env=env, base_env=dict(os.environ))
        return self.runs[key]

    def __call__(self, *config: str, **kwargs):
        """``dry_run(*config, profile=None, env=None, targets=())``: ``snakemake -n [targets] --config *config``."""
        return self.start(*config, **kwargs).result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            shutil.rmtree(self.root, ignore_errors=True)
        self.root, self.pool, self.runs = None, None, {}


DRY_RUNS = DryRuns()


def pytest_collection_finish(session):
    """Start the dry runs that the modules of the selected tests list, in the order they list them."""
    modules = {item.module: None for item in session.items if "dry_run" in getattr(item, "fixturenames", ())}
    for module in modules:
        for config, kwargs in getattr(module, "DRY_RUNS", ()):
            DRY_RUNS.start(*config, **kwargs)


def pytest_sessionfinish(session):
    DRY_RUNS.close()


@pytest.fixture(scope="session")
def dry_run() -> DryRuns:
    return DRY_RUNS


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op torch thread in the test process: on a busy 2-core machine a second one spins on the tiny models'
    ops of microseconds (quantising the ci draft: 24 s of CPU with two threads, 0.3 s with one)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class TrainedModels:
    """A session's ``results/`` folder whose models are keyed by their settings, as Snakemake keys them: each
    ``run(overrides)`` is a fresh run folder in it, and the models stage trains only the roles whose key has no
    model yet, so the tests share one training per distinct model (the ci trio's draft and target are also
    test_dfvg's first pair)."""

    def __init__(self, results: Path):
        self.results = results

    def run(self, overrides: list[str], roles: tuple[str, ...] = ("draft", "target", "prm")):
        """``(cfg, paths)`` of a new run under these overrides, its ``roles`` trained (or found) by ``prepare_role``
        in this order (the PRM may learn from the draft or start from the target)."""
        from heterospec.config import compose_config   # here, not at collection: it loads torch and transformers
        from heterospec.models.stage import prepare_role
        from heterospec.paths import RunPaths

        cfg = compose_config(overrides)
        keys = RunPaths.for_run(cfg, overrides).model_keys
        self.results.mkdir(parents=True, exist_ok=True)
        paths = RunPaths(Path(tempfile.mkdtemp(prefix=f"{cfg.name}-", dir=self.results)), keys)
        for role in roles:
            if not paths.model_manifest(role).exists():
                prepare_role(cfg, paths, role, overrides, paths.model_manifest(role))
        return cfg, paths


@pytest.fixture(scope="session")
def trained_models(tmp_path_factory) -> TrainedModels:
    return TrainedModels(tmp_path_factory.mktemp("trained_models") / "results")


QUANTIZED = ["experiment=ci", "eval_limit=12", "quantize.calibration_prompts=8"]


@pytest.fixture(scope="session")
def ci_quantized(trained_models):
    """``(cfg, paths, quality row)``: the ci draft quantised once by the quantize stage under ``QUANTIZED``."""
    from heterospec.quantize.stage import quantize_draft

    cfg, paths = trained_models.run(QUANTIZED)
    return cfg, paths, quantize_draft(cfg, paths, QUANTIZED, paths.quantized_draft, paths.quantize_quality)


def copy_quantized(quantized, paths) -> None:
    """Put the session's W8A8 export where ``paths``' run expects its own."""
    shutil.copytree(quantized[1].quantized_draft.parent, paths.quantized_draft.parent)



@pytest.fixture(scope="module")
def tiny():
    """A randomly initialised one-layer Qwen2 over the character tokenizer (no training needed)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from heterospec.models.tokenizer import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    return Qwen2ForCausalLM(cfg).eval(), tok


def collect_and_serve(cfg, paths, overrides: list[str]) -> dict:
    """In the run's tree: the sequential BRSD collect the serving outputs must equal, the serving run (worker
    processes) and its validation; the serving tables."""
    from heterospec.collect import merge, run_shard
    from heterospec.reasoning.serving_schemas import SERVING_TABLES
    from heterospec.replay.validation.against_serving import validate
    from heterospec.serve import run_stage
    from heterospec.store import read_parquet

    cwd = os.getcwd()
    os.chdir(paths.root.parent.parent)
    try:
        run_shard(cfg, paths, overrides, "synthetic", "brsd", "sequential", "0of1", processes=False)
        merge(paths, "synthetic", "brsd", "sequential", 1)
        run_stage(cfg, paths, overrides, processes=True)
        validate(cfg, paths)
    finally:
        os.chdir(cwd)
    return {t: read_parquet(paths.serving_table(t), s) for t, s in SERVING_TABLES.items()}


CONFIG1 = SHARED / "heteroreason_ae" / "Hardware" / "inputs" / "Config1"


def artifact_run(tmp_path_factory, name: str, overrides: list[str]):
    """A run named ``name`` with the artifact's Config1 traces of both sets imported, in a scratch folder: (its root,
    its paths, its overrides); skipped when the shared artifact is absent."""
    from heterospec.config import compose_config
    from heterospec.paths import RunPaths
    from heterospec.replay.grid.stage import import_stage
    if not CONFIG1.is_dir():
        pytest.skip(f"{CONFIG1} absent (shared artifact traces)")
    root = tmp_path_factory.mktemp(name)
    over = [f"name={name}", f"replay.traces={CONFIG1}", *overrides]
    cfg = compose_config(over)
    paths = RunPaths(root / "results" / name)
    for ts in ("with_bt", "no_bt"):
        import_stage(cfg, paths, ts)
    return root, paths, over
