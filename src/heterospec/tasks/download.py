"""Fetch a benchmark's JSONL where the machine has internet (the ``download_dataset`` rule).

    python -m heterospec.tasks.download --dataset gsm8k experiment=paper_config1

The file is checked with the benchmark's own loader before it is moved into place, so a
truncated or wrong download never looks finished.
"""
from __future__ import annotations

import os
import urllib.request
from pathlib import Path

from heterospec import stage
from heterospec.config import dataset_config
from heterospec.errors import UserError
from heterospec.tasks.benchmarks import load_benchmark


def download(kind: str, url: str, out: Path, timeout: float = 60.0) -> int:
    """Download ``url`` to ``out`` atomically after validating it; returns the number of problems."""
    if not url:
        raise UserError(f"dataset {kind}: no url configured; put the file at {out} by hand")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.download")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, tmp.open("wb") as fh:
            while chunk := resp.read(1 << 16):
                fh.write(chunk)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"downloading {kind} from {url} failed ({getattr(e, 'reason', e)}); "
                        f"put the file at {out} by hand or point paths.datasets at a copy") from None
    try:
        n = len(load_benchmark(kind, tmp))
    except UserError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return n


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.tasks.download", "Download a benchmark's test set.")
    p.add_argument("--dataset", required=True, help="math500 | gsm8k | gaokao2023en | olympiadbench")
    p.add_argument("--out", type=Path, help="default: the dataset config's path")
    args = stage.parse(p, argv)
    cfg, _ = stage.compose(args)
    ds = dataset_config(cfg, args.dataset, args.overrides)
    out = args.out or Path(ds.path)
    n = download(ds.kind, ds.url, out)
    print(f"[download] {args.dataset}: {n} problems -> {out}")


if __name__ == "__main__":
    stage.run(main)
