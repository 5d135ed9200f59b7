"""Speculative target writes reason exactly like plain ones (issue 23's bar), problem by problem, on a run's problems.

    python benchmarks/speculative_identity.py experiment=default     # after snakemake --cores all (its plain collects)
    python benchmarks/speculative_identity.py --strategies chain,tree --executors sequential experiment=ci

For each DFVG strategy, RSD and BRSD are collected with token-level speculative target writes (the collect variants
``rsd_sd`` / ``brsd_sd`` with that strategy, in a run of their own named ``<run>-sd-<strategy>``; a finished collect
is kept and not redone) under each executor, then compared with the run's plain ``rsd`` / ``brsd`` collects by
``heterospec collect compare``: the same answers and paths, controller steps, PRM calls and (sequential) KVMU log.
Under greedy decoding every count must equal the number of problems; the last line says whether it did.
"""
from __future__ import annotations

import argparse
import sys

from heterospec import stage
from heterospec.config import compose_config
from heterospec.paths import DUCKDB_FILE, RunPaths
from heterospec.speculative.strategies import STRATEGIES
from heterospec.text_table import format_table


def main(argv: list[str]) -> None:
    from heterospec.aggregate import main as aggregate
    from heterospec.collect import merge, run_shard
    from heterospec.store.compare import COLUMNS, compare_collects

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--algorithms", default="rsd,brsd")
    p.add_argument("--executors", default="sequential,step_ahead")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    cfg = compose_config(args.overrides)
    base = RunPaths.for_run(cfg, args.overrides)
    algorithms, executors = args.algorithms.split(","), args.executors.split(",")
    rows, differ = [], 0
    for dataset in cfg.datasets:
        for a in algorithms:
            for e in executors:
                if not base.collect_table(dataset, a, e, "problems").exists():
                    sys.exit(f"speculative_identity: {base.collect_table(dataset, a, e, 'problems')} missing; run "
                             f"the plain collects first (snakemake --cores all)")
    for s in args.strategies.split(","):
        ov = [*args.overrides, f"name={cfg.name}-sd-{s}",
              *(f"collect.variants.{a}_sd.overrides.target_decoding={s}" for a in algorithms)]
        scfg = compose_config(ov)
        paths = RunPaths.for_run(scfg, ov)
        for dataset in scfg.datasets:
            for a in algorithms:
                for e in executors:
                    if not paths.collect_table(dataset, f"{a}_sd", e, "problems").exists():
                        run_shard(scfg, paths, ov, dataset, f"{a}_sd", e, "0of1")
                        merge(paths, dataset, f"{a}_sd", e, 1)
        aggregate(["--db", str(DUCKDB_FILE)])
        for a in algorithms:
            _, got = compare_collects(DUCKDB_FILE, (cfg.name, a), (scfg.name, f"{a}_sd"))
            for r in got:
                if r[1] in executors:
                    rows.append((s, a, *r))
                    differ += any(v is not None and v != r[2] for v in r[3:])
            print(format_table(["strategy", "algorithm", *COLUMNS], rows[-len(got):]), flush=True)
    print(format_table(["strategy", "algorithm", *COLUMNS], rows))
    print(f"{'every problem alike' if not differ else f'{differ} strategy/algorithm/executor rows differ'} "
          f"({len(rows)} rows, run {cfg.name})")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    stage.run(main, sys.argv[1:])
