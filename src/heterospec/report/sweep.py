"""Sweeps in Hydra's syntax: ``--config sweep="algorithm.threshold=0.5,0.7,0.9"`` becomes one run per value, and
``sweep/points.parquet`` records which run holds which value (the ``sweep`` view joins it to the runs' results)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.store.parquet import versioned, write_parquet

SWEEP_POINTS_SCHEMA = versioned("sweep_points", 1, [
    pa.field("run", pa.string(), nullable=False),          # the sweep's own folder under results/
    pa.field("point_run", pa.string(), nullable=False),    # the run that holds this value's results
    pa.field("parameter", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
])


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``key=v1,v2,...`` (Hydra's multirun syntax, one key) as (key, values); one line naming what is wrong."""
    key, sep, values = str(text).strip().partition("=")
    items = [v.strip() for v in values.split(",")]
    if not sep or not key.strip() or " " in key.strip() or not all(items):
        raise UserError(f"--config sweep={text!r}: expected one Hydra key and its values, "
                        "e.g. sweep=\"algorithm.threshold=0.5,0.7,0.9\"")
    if len(set(items)) != len(items):
        raise UserError(f"--config sweep={text!r}: a value is listed twice")
    return key.strip(), items


def sweep_name(base: str, text: str) -> str:
    """The sweep's folder: the base run's name plus a hash of what it sweeps."""
    return f"{base}.sweep+{hashlib.sha1(str(text).strip().encode()).hexdigest()[:8]}"


def write_points(out: Path, points: list[list[str]]) -> None:
    """``points`` are [point run, key=value] pairs; the sweep's name is the folder above ``sweep/``."""
    sweep = Path(out).parent.parent.name
    rows = []
    for point in points:
        if len(point) != 2 or "=" not in point[1]:
            raise UserError(f"--point {' '.join(point)}: expected RUN KEY=VALUE")
        key, _, value = point[1].partition("=")
        rows.append({"run": sweep, "point_run": point[0], "parameter": key, "value": value})
    write_parquet(rows, out, SWEEP_POINTS_SCHEMA)
