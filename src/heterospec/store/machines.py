"""The machine and the code each job of a run ran on: ``results/<run>/machines/<job>.parquet``, one row a job.

Float kernels differ by CPU (torch's CPU kernels dispatch on the vector width the CPU reports), so a run's numbers
are reproducible on machines of one kind, not across them (docs/models.md, Reproducibility): a results page names the
machines a run's jobs recorded. Every stage records its job when it composes the run's config
(:func:`heterospec.stage.compose`); a trained role's record is kept in its manifest (``"machine"``), so a run that
reuses a model trained by another run names the machine that trained it (the trio's quality report copies it).
The ``machines`` view holds the rows, ``run_machines`` and ``run_commits`` one row per run and machine / commit.
"""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from heterospec.store.parquet import versioned, write_parquet

MACHINES_DIR = "machines"   # inside results/<run>/

MACHINES_SCHEMA = versioned("machines", 1, [
    pa.field("run", pa.string()),
    pa.field("stage", pa.string()),          # the stage's module: models, collect, evaluate, replay, serve, ...
    pa.field("job", pa.string()),            # its command line without the run's overrides
    pa.field("recorded_at", pa.string()),    # UTC, ISO 8601: when the job composed its config
    pa.field("host", pa.string()),           # the node's name (a run may span a cluster's nodes)
    pa.field("cpu_model", pa.string()),      # /proc/cpuinfo "model name", else platform.processor()
    pa.field("cpu_id", pa.string()),         # x86: family, model, stepping (a VM may call different CPUs alike)
    pa.field("vector_isa", pa.string()),     # the widest vector extension the CPU reports: avx512, avx2, sve, ...
    pa.field("logical_cores", pa.int32()),   # os.cpu_count()
    pa.field("usable_cores", pa.int32()),    # os.sched_getaffinity: the cores the job may use (taskset, SLURM)
    pa.field("arch", pa.string()),           # platform.machine()
    pa.field("python", pa.string()),
    pa.field("torch", pa.string()),          # the installed torch's version; NULL without torch
    pa.field("commit", pa.string()),         # git HEAD of the checkout the code ran from; NULL outside a git checkout
    pa.field("dirty", pa.bool_()),           # that checkout had uncommitted changes to tracked files
])

# the row's fields that describe the machine and the code (the rest name the job): a manifest's "machine"
MACHINE_FIELDS = tuple(f.name for f in MACHINES_SCHEMA if f.name not in ("run", "stage", "job"))

# widest first; the flag names of /proc/cpuinfo (x86 "flags", arm64 "Features")
_VECTOR_FLAGS = (("avx512", "avx512f"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4_2"), ("sve", "sve"),
                 ("neon", "asimd"))


def cpu_info(text: str | None = None) -> dict:
    """``cpu_model``, ``cpu_id`` and ``vector_isa`` from ``/proc/cpuinfo``'s first processor (``text``: its
    contents); where it cannot be read, the model from :func:`platform.processor` (or the architecture), the
    others None."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break                        # the first processor's block is enough
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu") or \
        platform.processor() or platform.machine() or None
    if "cpu family" in fields and "model" in fields:
        cpu_id = f"family {fields['cpu family']} model {fields['model']}"
        cpu_id += f" stepping {fields['stepping']}" if "stepping" in fields else ""
    elif "cpu implementer" in fields and "cpu part" in fields:
        cpu_id = f"implementer {fields['cpu implementer']} part {fields['cpu part']}"
    else:
        cpu_id = None
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    isa = next((name for name, flag in _VECTOR_FLAGS if flag in flags), None)
    return {"cpu_model": model, "cpu_id": cpu_id, "vector_isa": isa}


def usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # macOS, Windows: no affinity call
        return os.cpu_count()


def code_commit(where: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD, uncommitted changes to tracked files) of the git checkout holding ``where`` (default: this package's
    source); (None, None) outside a git checkout or without git."""
    where = Path(where) if where is not None else Path(__file__).resolve().parent
    # the checkout found from ``where``, not one a caller's environment names (a git hook sets these)
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=60, env=env)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None, None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None


def _torch_version() -> str | None:
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _this_machine() -> tuple:
    commit, dirty = code_commit()
    m = {"host": platform.node() or None, **cpu_info(), "logical_cores": os.cpu_count(),
         "usable_cores": usable_cores(), "arch": platform.machine() or None, "python": platform.python_version(),
         "torch": _torch_version(), "commit": commit, "dirty": dirty}
    return tuple(m.items())


def this_machine() -> dict:
    """The fields of :data:`MACHINE_FIELDS` for this process, ``recorded_at`` now."""
    return {"recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **dict(_this_machine())}


def job_name(stage: str, job: str) -> str:
    """The file a job's row goes to, ``<stage>-<hash of its command line>``: a rerun of the job replaces it."""
    return f"{stage}-{hashlib.sha1(job.encode()).hexdigest()[:12]}"


def record(run_root: str | Path, run: str, stage: str, job: str, machine: dict | None = None,
           name: str | None = None) -> Path:
    """Write the job's row, ``run_root/machines/<name>.parquet`` (``machine``: a recorded one, e.g. a manifest's;
    missing fields stay NULL; default this machine, now)."""
    machine = this_machine() if machine is None else machine
    row = {"run": run, "stage": stage, "job": job, **{k: machine.get(k) for k in MACHINE_FIELDS}}
    return write_parquet([row], Path(run_root) / MACHINES_DIR / f"{name or job_name(stage, job)}.parquet",
                         MACHINES_SCHEMA)


def describe(cpu_model: str | None, cpu_id: str | None, vector_isa: str | None, logical_cores: int | None,
             usable_cores: int | None) -> str:
    """One machine in words: ``AMD EPYC (family 25 model 17 stepping 1, avx512), 2 logical cores``."""
    if cpu_model is None and logical_cores is None:
        return "machine not recorded"
    detail = ", ".join(x for x in (cpu_id, vector_isa) if x)
    text = (cpu_model or "unknown CPU") + (f" ({detail})" if detail else "")
    if logical_cores is not None:
        text += f", {logical_cores} logical cores"
        if usable_cores is not None and usable_cores != logical_cores:
            text += f" ({usable_cores} usable)"
    return text


def commit_text(commit: str | None, dirty: bool | None) -> str:
    if commit is None:
        return "not recorded (outside a git checkout)"
    return commit + (" with uncommitted changes" if dirty else "")

