"""The DFVG stage: collect generations and round traces per method, replay them, benchmark.

    python -m heterospec.dfvg collect --method target_greedy experiment=dfvg   plain target greedy (the reference)
    python -m heterospec.dfvg collect --method tree experiment=dfvg            a strategy: rounds + generations
    python -m heterospec.dfvg collect --method hf_assisted experiment=dfvg     target.generate(assistant_model=draft)
    python -m heterospec.dfvg replay experiment=dfvg                           FPGA+GPU vs GPU-only vs plain
    python -m heterospec.dfvg bench experiment=dfvg                            the numbers (benchmarks/dfvg_bench.py)
"""
from __future__ import annotations

import logging

import pyarrow as pa
import torch
from omegaconf import DictConfig

from heterospec import stage
from heterospec.dfvg.methods import METHODS, open_pair, prompts, run_method, strategy
from heterospec.speculative.strategies import STRATEGIES
from heterospec.dfvg.schemas import DFVG_GENERATIONS_SCHEMA, DFVG_REPLAY_SCHEMA, DFVG_ROUNDS_SCHEMA
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store import read_parquet, write_parquet

log = logging.getLogger("heterospec.dfvg")

def collect(cfg: DictConfig, paths: RunPaths, method: str, overrides: list[str]) -> None:
    torch.set_num_threads(int(cfg.dfvg.threads))
    if method in STRATEGIES:
        strategy(cfg, method)                        # bad tree bounds fail before the models load
    pair = open_pair(cfg, paths)
    items = prompts(cfg, pair.tokenizer, overrides)
    reference = None
    ref_path = paths.dfvg_generations("target_greedy")
    if method != "target_greedy" and cfg.dfvg.temperature == 0 and ref_path.exists():
        reference = {r["prompt_id"]: r["token_ids"] for r in read_parquet(ref_path, DFVG_GENERATIONS_SCHEMA).to_pylist()}
    gens, rounds = run_method(pair, cfg, method, items, reference)
    write_parquet(rounds, paths.dfvg_rounds(method), DFVG_ROUNDS_SCHEMA)        # empty for the baselines
    write_parquet(gens, paths.dfvg_generations(method), DFVG_GENERATIONS_SCHEMA)
    tok = sum(g["new_tokens"] for g in gens)
    wall = sum(g["wall_s"] for g in gens)
    line = f"[dfvg] {method}: {len(gens)} prompts, {tok} tokens, {wall:.2f} s ({tok / max(wall, 1e-9):.0f} tok/s)"
    if rounds:
        line += f", tau {sum(r['accepted'] + 1 for r in rounds) / len(rounds):.2f}"
    checked = [g["identical"] for g in gens if g["identical"] is not None]
    if checked:
        line += f", identical to target greedy: {sum(checked)}/{len(checked)}"
    log.info(line)


def replay_run(cfg: DictConfig, paths: RunPaths) -> None:
    from heterospec.dfvg.replay import replay, summary
    from heterospec.text_table import format_table
    rounds = pa.concat_tables([read_parquet(paths.dfvg_rounds(s), DFVG_ROUNDS_SCHEMA) for s in cfg.dfvg.strategies])
    gens = read_parquet(paths.dfvg_generations("target_greedy"), DFVG_GENERATIONS_SCHEMA)
    perf = paths.hls_perf if "hls" in cfg.dfvg.replay.profiles else None
    table = replay(rounds, gens, cfg, cfg.name, perf)
    write_parquet(table, paths.dfvg_replay, DFVG_REPLAY_SCHEMA)
    rows = summary(table)
    print(format_table(list(rows[0]), [tuple(r.values()) for r in rows]) if rows else "(no rounds)")


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.dfvg", "DFVG token-level speculative decoding: collect, replay, bench, and "
                     "what a faster draft buys (buys).")
    p.add_argument("command", choices=["collect", "replay", "bench", "buys"])
    p.add_argument("--method", default="tree", help=f"collect: one of {', '.join(METHODS)}")
    p.add_argument("--repeats", type=int, default=3, help="bench: timed repetitions (the fastest counts)")
    p.add_argument("--prompts", type=int, default=0, help="bench: prompts (0: dfvg.prompts)")
    p.add_argument("--designs", default="serial_u280,default", help="buys: hls configs to compare")
    p.add_argument("--offsets", default="0,512,1024,2048,4096", help="buys: tokens added to every prompt")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    if args.command == "collect":
        collect(cfg, paths, args.method, args.overrides)
    elif args.command == "replay":
        replay_run(cfg, paths)
    elif args.command == "buys":
        from heterospec.dfvg.faster_draft import dfvg_sweep, print_sweep
        try:
            offsets = [int(x) for x in args.offsets.split(",")]
        except ValueError:
            raise UserError(f"dfvg buys: --offsets={args.offsets!r}; expected comma-separated integers") from None
        print_sweep(dfvg_sweep(cfg, paths, args.overrides, args.designs.split(","), offsets))
    else:
        from heterospec.dfvg.bench import bench
        bench(cfg, paths, args.overrides, args.repeats, args.prompts)
