"""Shared fixtures: the repository root, the ../shared folder (skip when absent), a fresh work dir, and Snakemake
dry runs shared by every test that reads the same plan."""
from __future__ import annotations

import os
import subprocess
import sys
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


def run_cmd(args: list[str], cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    """Run a command with the test interpreter's environment; returns CompletedProcess (text)."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd or ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def heterospec(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    return run_cmd([sys.executable, "-m", "heterospec", *args], cwd=cwd, env=env, timeout=timeout)


def snakemake(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 1200):
    return run_cmd([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args],
                   cwd=cwd, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def dry_run(tmp_path_factory):
    """``dry_run(*config, profile=None, env=None, targets=())``: ``snakemake -n [targets] --config *config`` in a
    fresh directory, run once per session for each distinct call (planning an experiment takes seconds; the
    tests that read the same plan share it)."""
    plans = {}

    def plan(*config: str, profile: str | None = None, env: dict | None = None, targets: tuple[str, ...] = ()):
        key = (config, profile, tuple(sorted((env or {}).items())), targets)
        if key not in plans:
            args = ["-n", *targets, "--directory", str(tmp_path_factory.mktemp("dry_run")), "--config", *config]
            if profile:
                args = ["--profile", str(ROOT / "workflow" / "profiles" / profile), *args]
            plans[key] = snakemake(*args, env=env)
        return plans[key]

    return plan
