"""The DFVG stage: collect generations and round traces per method, replay them, benchmark.

    python -m heterospec.dfvg collect --method target_greedy experiment=dfvg   plain target greedy (the reference)
    python -m heterospec.dfvg collect --method tree experiment=dfvg            a strategy: rounds + generations
    python -m heterospec.dfvg collect --method hf_assisted experiment=dfvg     target.generate(assistant_model=draft)
    python -m heterospec.dfvg replay experiment=dfvg                           FPGA+GPU vs GPU-only vs plain
    python -m heterospec.dfvg bench experiment=dfvg                            the numbers (benchmarks/dfvg_bench.py)
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from heterospec import stage
from heterospec.dfvg.engine import Pair, SpeculativeDecoder, hf_generate, load_pair, target_greedy
from heterospec.dfvg.strategies import STRATEGIES, draft_lanes, make_strategy
from heterospec.dfvg.traces import GENERATIONS_SCHEMA, REPLAY_SCHEMA, ROUNDS_SCHEMA
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.store import read_parquet, write_parquet

log = logging.getLogger("heterospec.dfvg")

BASELINES = ("target_greedy", "hf_assisted")
METHODS = BASELINES + STRATEGIES


def prompts(cfg: DictConfig, tokenizer, overrides: list[str] = ()) -> list[tuple[str, list[int]]]:
    """(problem id, prompt ids) of the first ``dfvg.prompts`` held-out synthetic problems."""
    from heterospec.config import dataset_config
    from heterospec.models.prompts import format_prompt
    from heterospec.tasks import load_problems
    ds = dataset_config(cfg, "synthetic", overrides)
    probs = load_problems(ds, cfg.dfvg.prompts)
    return [(p.id, tokenizer(format_prompt(cfg.models.prompt, p.question, tokenizer))["input_ids"]) for p in probs]


def open_pair(cfg: DictConfig, paths: RunPaths) -> Pair:
    from heterospec.models.manifest import read_manifest
    draft = read_manifest(paths.model_manifest("draft"))["path"]
    target = read_manifest(paths.model_manifest("target"))["path"]
    dev = cfg.system.torch_devices
    return load_pair(draft, target, cfg.models.target.dtype, (dev.get("draft", "cpu"), dev.get("target", "cpu")))


def strategy(cfg: DictConfig, name: str):
    from heterospec.config.hardware import device
    hw = device(cfg.dfvg.draft_hardware, cfg)
    return make_strategy(name, cfg.dfvg, draft_lanes(hw), cfg.dfvg.draft_hardware)


def run_method(pair: Pair, cfg: DictConfig, method: str, items: list[tuple[str, list[int]]],
               reference: dict[str, list[int]] | None = None) -> tuple[list[dict], list[dict]]:
    """Decode every prompt with ``method``; (generation rows, round rows)."""
    if method not in METHODS:
        raise UserError(f"unknown DFVG method '{method}'; choose one of {list(METHODS)}")
    d = cfg.dfvg
    decoder = SpeculativeDecoder(pair, d.temperature, d.seed, d.draft_kernel) if method in STRATEGIES else None
    gens, rounds = [], []
    for pid, ids in tqdm(items, desc=f"dfvg {method}", unit="prompt", file=sys.stderr, mininterval=2):
        t0 = time.perf_counter()
        rs: list[dict] = []
        if method == "target_greedy":
            new = target_greedy(pair, ids, d.max_new_tokens)
        elif method == "hf_assisted":
            new = hf_generate(pair, ids, d.max_new_tokens, assisted=True)
        else:
            new, rs = decoder.generate(ids, strategy(cfg, method), d.max_new_tokens)
        wall = time.perf_counter() - t0
        same = None if reference is None or pid not in reference else new == reference[pid]
        base = dict(run=cfg.name, models=cfg.models.name, temperature=float(d.temperature), prompt_id=pid)
        gens.append(dict(base, method=method, prompt_tokens=len(ids), new_tokens=len(new), rounds=len(rs),
                         wall_s=wall, identical=same, output=pair.tokenizer.decode(new, skip_special_tokens=True),
                         token_ids=new))
        rounds += [dict(base, strategy=method, **r) for r in rs]
    return gens, rounds



def collect(cfg: DictConfig, paths: RunPaths, method: str, overrides: list[str]) -> None:
    torch.set_num_threads(int(cfg.dfvg.threads))
    if method in STRATEGIES:
        strategy(cfg, method)                        # bad tree bounds fail before the models load
    pair = open_pair(cfg, paths)
    items = prompts(cfg, pair.tokenizer, overrides)
    reference = None
    ref_path = paths.dfvg_generations("target_greedy")
    if method != "target_greedy" and cfg.dfvg.temperature == 0 and ref_path.exists():
        reference = {r["prompt_id"]: r["token_ids"] for r in read_parquet(ref_path, GENERATIONS_SCHEMA).to_pylist()}
    gens, rounds = run_method(pair, cfg, method, items, reference)
    write_parquet(rounds, paths.dfvg_rounds(method), ROUNDS_SCHEMA)        # empty for the baselines
    write_parquet(gens, paths.dfvg_generations(method), GENERATIONS_SCHEMA)
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
    from heterospec.tables import format_table
    rounds = pa.concat_tables([read_parquet(paths.dfvg_rounds(s), ROUNDS_SCHEMA) for s in cfg.dfvg.strategies])
    gens = read_parquet(paths.dfvg_generations("target_greedy"), GENERATIONS_SCHEMA)
    perf = paths.hls_perf if "hls" in cfg.dfvg.replay.profiles else None
    table = replay(rounds, gens, cfg, cfg.name, perf)
    write_parquet(table, paths.dfvg_replay, REPLAY_SCHEMA)
    rows = summary(table)
    print(format_table(list(rows[0]), [tuple(r.values()) for r in rows]) if rows else "(no rounds)")


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.dfvg", "DFVG token-level speculative decoding: collect, replay, bench.")
    p.add_argument("command", choices=["collect", "replay", "bench"])
    p.add_argument("--method", default="tree", help=f"collect: one of {', '.join(METHODS)}")
    p.add_argument("--repeats", type=int, default=3, help="bench: timed repetitions (the fastest counts)")
    p.add_argument("--prompts", type=int, default=0, help="bench: prompts (0: dfvg.prompts)")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    if args.command == "collect":
        collect(cfg, paths, args.method, args.overrides)
    elif args.command == "replay":
        replay_run(cfg, paths)
    else:
        from heterospec.dfvg.bench import bench
        bench(cfg, paths, args.overrides, args.repeats, args.prompts)
