"""Shared fixtures: the repository root, the ../shared folder (skip when absent), a fresh work dir."""
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
