"""A role's manifest, ``models/<role>/manifest.json``: the file every later stage reads to find the role's
checkpoint. Written last and atomically by the models stage, so it never points at a half-written model.

A trained role's checkpoint sits beside its manifest and is recorded relative to it (``"path": "checkpoint"``), so
a results tree can be moved or copied whole; a checkpoint given by path (``source: hub``) is recorded as given.
``files`` lists the checkpoint's files with their size and sha256 (sizes only for a checkpoint not written here);
:func:`read_manifest` checks them on every load (:mod:`heterospec.manifests`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from heterospec.manifests import listed_folder, rebuild_command, verify
from heterospec.errors import UserError
from heterospec.store.machines import record as record_machine


def write_manifest(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def rebuild_hint(path: Path, data: dict) -> str:
    """How to rebuild the role a damaged manifest describes."""
    role = data.get("role", "ROLE")
    if data.get("source") == "train":
        return (f"{rebuild_command(path)} (or python -m heterospec.models train --role {role} with the run's "
                f"overrides)")
    return f"restore the checkpoint (models.{role}.path), or record it anew: {rebuild_command(path)}"


def read_manifest(path: Path, check: bool = True) -> dict:
    """A role's manifest with ``path`` resolved to its checkpoint folder; a missing, stale or damaged one (a
    checkpoint file truncated or changed, see ``files``) is one clear line, not a traceback."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        # named to --forcerun: Snakemake does not rerun a job for a missing intermediate file alone
        raise UserError(f"{path}: model manifest not found; run the models stage first "
                        f"(snakemake --cores all --forcerun {path}, or python -m heterospec.models train --role "
                        f"ROLE)") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg})") from None
    if not data.get("path"):
        raise UserError(f"{path}: no 'path' to a checkpoint; {rebuild_hint(path, data)}")
    checkpoint = listed_folder(path, data)
    if not checkpoint.exists():
        raise UserError(f"{path}: points at {str(checkpoint)!r}, which does not exist; {rebuild_hint(path, data)}")
    if check:
        verify(checkpoint, data.get("files"), rebuild_hint(path, data))
    return {**data, "path": str(checkpoint)}


def record_training_machine(run_root: Path, run: str, manifest: dict) -> Path:
    """A trained role's row in the run's ``machines`` table, ``results/<run>/machines/models-train-<role>.parquet``:
    the machine and commit its manifest records (the training job writes it; the trio's quality report copies it
    into a run that reuses the model). A manifest written before manifests recorded them gives a row of NULLs."""
    role = manifest.get("role", "ROLE")
    machine = manifest.get("machine") or {"recorded_at": manifest.get("created")}
    return record_machine(run_root, run, "models", f"models train --role {role}", machine, f"models-train-{role}")
