"""The report's own input beside the stages' outputs, the paper's Table III (our collect traces replayed on the
paper's systems are the replay's: :mod:`heterospec.replay.grid.ours`).

* ``results/<run>/report/paper_table3.parquet``: the artifact's Table III (``table3_accuracy_reference.json`` under
  ``paths.heteroreason_ae``), one row per config x method x dataset; empty when no artifact checkout is configured.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store.parquet import versioned, write_parquet

log = logging.getLogger("heterospec.report")

PAPER_TABLE3 = Path("AE_alg") / "Algorithm" / "reference_results" / "table3_accuracy_reference.json"
PAPER_METHODS = {"RSD (baseline)": "rsd", "BRSD": "brsd", "BRSD + optimizations": "brsd_opt"}

PAPER_TABLE3_SCHEMA = versioned("paper_table3", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("config", pa.string(), nullable=False),        # the paper's model configuration: Config1, Config2
    pa.field("models", pa.string(), nullable=False),        # what it names, e.g. "0.5B draft - 7B PRM - 7B target"
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),        # rsd, brsd, brsd_opt
    pa.field("accuracy", pa.float64(), nullable=False),     # %
    pa.field("source", pa.string(), nullable=False),        # the reference file, relative to the artifact checkout
])


def paper_table3_path(paths: RunPaths) -> Path:
    return paths.root / "report" / "paper_table3.parquet"


def paper_table3(cfg: Any, paths: RunPaths) -> list[dict]:
    """The artifact's Table III as rows (none without an artifact checkout); a malformed file is one line."""
    root = Path(str(cfg.paths.heteroreason_ae))
    ref = root / PAPER_TABLE3
    rows = []
    if ref.is_file():
        try:
            doc = json.loads(ref.read_text())
            for config, c in doc["configurations"].items():
                for method, m in c["methods"].items():
                    if method not in PAPER_METHODS:
                        raise UserError(f"{ref}: method '{method}' unknown; expected one of {list(PAPER_METHODS)}")
                    rows += [dict(run=cfg.name, config=config, models=c["models"], dataset=d,
                                  method=PAPER_METHODS[method], accuracy=float(acc), source=str(PAPER_TABLE3))
                             for d, acc in m["datasets"].items()]
            if not rows:
                raise KeyError("no accuracy values")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{ref}: expected the artifact's Table III reference "
                            f"(configurations.<config>.methods.<method>.datasets.<dataset>: accuracy), {e!r}") from None
        log.info("paper Table III: %d values from %s", len(rows), ref)
    else:
        log.info("paper Table III: %s not found (no artifact checkout configured); table3 shows ours only", ref)
    write_parquet(rows, paper_table3_path(paths), PAPER_TABLE3_SCHEMA)
    return rows
