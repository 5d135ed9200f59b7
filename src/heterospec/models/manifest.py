"""A role's manifest, ``models/<role>/manifest.json``: the file every later stage reads to find the role's
checkpoint. Written last and atomically by the models stage, so it never points at a half-written model."""
from __future__ import annotations

import json
import os
from pathlib import Path

from heterospec.errors import UserError


def write_manifest(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def read_manifest(path: Path) -> dict:
    """A role's manifest; a missing or stale one is a clear error, not a traceback."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: model manifest not found; run the models stage first "
                        f"(snakemake --cores all, or python -m heterospec.models train --role ROLE)") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg})") from None
    if not Path(data.get("path", "")).exists():
        raise UserError(f"{path}: points at {data.get('path')!r}, which does not exist; retrain or re-resolve the model")
    return data
