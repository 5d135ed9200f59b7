"""``heterospec gpu bundle|check`` (also ``python -m heterospec.gpu``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from heterospec import stage
from heterospec.errors import UserError


def _ints(text: str, flag: str) -> tuple[int, ...]:
    from heterospec.replay.profiles.price_sweep import parse_ints
    return parse_ints(text, flag)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="heterospec gpu", description="The GPU path on an offline GPU node.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bundle", help="build the bundle an offline node runs the check from (needs a package index)")
    b.add_argument("--python-version", default="3.12", help="the node's Python, major.minor (default 3.12)")
    b.add_argument("--platform", default="manylinux2014_x86_64",
                   help="the node's newest manylinux tag (its glibc); older ones are taken too")
    b.add_argument("--run", default="ci", help="the experiment whose trained trio travels (results/_models)")
    b.add_argument("--node-has", type=Path, help="the node's `python3 -m pip list --format=freeze` (default: the "
                   "typical node's list, heterospec/gpu/typical_node.txt)")
    b.add_argument("--out", type=Path, default=Path("heterospec-gpu.tar.gz"))
    c = sub.add_parser("check", help="collect, evaluate, DFVG bench and batched prices on one device")
    c.add_argument("--device", default="cuda:0", help="torch device: cuda:N, or cpu")
    c.add_argument("--out", type=Path, default=Path("gpu-check"), help="the folder every output goes to")
    c.add_argument("--models", type=Path, default=Path("results/_models"), help="a _models folder with the run's trio")
    c.add_argument("--run", default="ci", help="the experiment the check runs (default ci)")
    c.add_argument("--limit", type=int, help="problems per collect and evaluate (default: the experiment's)")
    c.add_argument("--batches", help="price sweep: sequences per pass (default 1,2,4,8,16,32,64)")
    c.add_argument("--contexts", help="price sweep: cached tokens per sequence (default 32,96,192)")
    c.add_argument("--bench-prompts", type=int, default=20, help="DFVG bench: prompts")
    c.add_argument("--bench-repeats", type=int, default=2, help="DFVG bench: timed repetitions (the fastest counts)")
    args = p.parse_args(argv)
    if args.command == "bundle":
        from heterospec.gpu.bundle import build
        from heterospec.gpu.node import project_root
        build(project_root(), args.python_version, args.platform, args.run, args.out, args.node_has)
        return
    from heterospec.gpu.check import check
    if args.limit is not None and args.limit < 1 or args.bench_prompts < 1 or args.bench_repeats < 1:
        raise UserError("--limit, --bench-prompts and --bench-repeats must be 1 or more")
    check(args.device, args.out, args.models, args.run, args.limit,
          _ints(args.batches, "--batches") if args.batches else None,
          _ints(args.contexts, "--contexts") if args.contexts else None, args.bench_prompts, args.bench_repeats)


if __name__ == "__main__":
    stage.run(main)
