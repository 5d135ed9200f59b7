"""``heterospec dfvg bench``: DFVG's numbers on the run's pair, measured here.

1. τ (tokens committed per verification round: accepted drafted tokens + the target's own) per strategy, and
   the dynamic tree against the chain at the same number of drafted tokens per round;
2. CPU wall-clock of every method on the same prompts (methods interleaved, each timed ``repeats`` times, the
   fastest repetition counts), with the check that each produced exactly the target's greedy tokens;
3. the rounds replayed as draft-on-FPGA / verify-on-GPU against GPU-only speculative decoding and plain decoding.

It prints the three and returns the first two as ``{"tau": (columns, rows), "wall": (columns, rows)}``.
"""
from __future__ import annotations

import os
import time

import pyarrow as pa
import torch
from omegaconf import DictConfig, OmegaConf

from heterospec.text_table import format_table
from heterospec.dfvg.methods import open_pair, prompts, run_method
from heterospec.speculative.strategies import Chain, Tree
from heterospec.dfvg.schemas import DFVG_GENERATIONS_SCHEMA, DFVG_ROUNDS_SCHEMA
from heterospec.paths import RunPaths


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _tau_rows(rounds: list[dict], label: str) -> tuple:
    n = len(rounds)
    acc = sum(r["accepted"] for r in rounds)
    return (label, n, round((acc + n) / n, 3), round(acc / max(1, sum(r["depth"] for r in rounds)), 3),
            round(acc / max(1, sum(r["nodes"] for r in rounds)), 3), round(sum(r["nodes"] for r in rounds) / n, 2),
            round(sum(r["depth"] for r in rounds) / n, 2), round(sum(r["draft_passes"] for r in rounds) / n, 2))


def _decode(pair, cfg, items, strat):
    """Round traces of a strategy built outside the config (the equal-budget comparisons)."""
    from heterospec.speculative.decoder import SpeculativeDecoder
    dec = SpeculativeDecoder(pair, draft_decoder=cfg.token_speculation.draft_decoder)
    return [r.row() for _, ids in items for r in dec.generate(ids, strat(), cfg.dfvg.max_new_tokens)[1]]


def bench(cfg: DictConfig, paths: RunPaths, overrides: list[str], repeats: int = 3, n_prompts: int = 0) -> dict:
    torch.set_num_threads(int(cfg.dfvg.threads))
    if n_prompts:
        cfg = OmegaConf.merge(cfg, {"dfvg": {"prompts": n_prompts}})
    pair = open_pair(cfg, paths)
    items = prompts(cfg, pair.tokenizer, overrides)
    print(f"DFVG bench — run {cfg.name}, models {cfg.models.name}, {len(items)} prompts, max {cfg.dfvg.max_new_tokens} "
          f"new tokens, {torch.get_num_threads()} thread(s); load average at start: {_load()}")
    methods = ["target_greedy", "hf_assisted", *cfg.dfvg.strategies]
    # the same strategies with the draft on Hugging Face's forward instead of the lean decoder: what the
    # algorithm gains without the lean decoder
    hf_kernel = OmegaConf.merge(cfg, {"token_speculation": {"draft_decoder": "hf"}})
    variants = {f"{s} (hf draft decoder)": s for s in ("chain", "tree") if s in cfg.dfvg.strategies}
    methods += list(variants)
    run_method(pair, cfg, "target_greedy", items[:3])                      # warm up both models
    ref_rows, _ = run_method(pair, cfg, "target_greedy", items)
    reference = {g["prompt_id"]: g["token_ids"] for g in ref_rows}
    best: dict[str, float] = {}
    results: dict[str, tuple[list[dict], list[dict]]] = {}
    for _ in range(repeats):
        for m in methods:
            t0 = time.perf_counter()
            if m in variants:
                gens, rounds = run_method(pair, hf_kernel, variants[m], items, reference)
            else:
                gens, rounds = run_method(pair, cfg, m, items, reference)
            wall = time.perf_counter() - t0
            if wall < best.get(m, float("inf")):
                best[m] = wall
            results[m] = (gens, rounds)

    # 1. tau
    print("\nτ per strategy (τ = tokens per verification round; acceptance = accepted / depth; "
          "efficiency = accepted / verified nodes)")
    rows = [_tau_rows(results[s][1], s) for s in cfg.dfvg.strategies]
    cols = ["strategy", "rounds", "tau", "acceptance", "draft_efficiency", "nodes", "depth", "draft_passes"]
    print(format_table(cols, rows))
    tau_table = (cols, rows)
    # the tree drafts a different number of tokens every round: compare it with the chains just shorter and
    # just longer than its mean, interpolated to the same mean number of drafted tokens
    t = cfg.token_speculation.tree
    tree_rows = results["tree"][1] if "tree" in results else _decode(pair, cfg, items, lambda: Tree(
        t.max_width, t.max_depth, t.max_nodes, t.top_k, t.min_confidence))
    n_tree = sum(r["nodes"] for r in tree_rows) / len(tree_rows)
    lo, hi = int(n_tree), int(n_tree) + 1
    chains = {k: _decode(pair, cfg, items, lambda k=k: Chain(k)) for k in (lo, hi)}
    tau = {k: (sum(r["accepted"] for r in rs) + len(rs)) / len(rs) for k, rs in chains.items()}
    tau_chain = tau[lo] + (n_tree - lo) * (tau[hi] - tau[lo])
    tau_tree = (sum(r["accepted"] for r in tree_rows) + len(tree_rows)) / len(tree_rows)
    capped = _decode(pair, cfg, items, lambda: Tree(t.max_width, 8, 8, t.top_k, 0.0))   # branching alone
    eq = [_tau_rows(tree_rows, "tree (token_speculation.tree)"), _tau_rows(chains[lo], f"chain {lo}"),
          _tau_rows(chains[hi], f"chain {hi}"), _tau_rows(results["chain"][1], "chain 8") if "chain" in results
          else None, _tau_rows(capped, "tree, <= 8 nodes, depth <= 8, no pruning")]
    print(f"\nEqual drafted tokens per round: the tree drafts {n_tree:.2f} on average; chains of {lo} and {hi} "
          f"interpolated to {n_tree:.2f} give τ {tau_chain:.3f}; the tree's τ is {tau_tree:.3f} "
          f"({100 * (tau_tree / tau_chain - 1):+.1f} %)")
    print(format_table(cols, [r for r in eq if r is not None]))

    # 2. wall clock
    tokens = {m: sum(g["new_tokens"] for g in results[m][0]) for m in methods}
    print(f"\nCPU wall clock (fastest of {repeats}, methods interleaved); load average now: {_load()}")
    rows = []
    for m in methods:
        gens = results[m][0]
        same = sum(bool(g["identical"]) for g in gens)
        rows.append((m, tokens[m], round(best[m], 3), round(tokens[m] / best[m], 1),
                     round(best["target_greedy"] / best[m], 3), round(best["hf_assisted"] / best[m], 3),
                     f"{same}/{len(gens)}" if m != "target_greedy" else "reference"))
    wall_table = (["method", "tokens", "wall_s", "tok_per_s", "speedup_vs_target", "speedup_vs_hf_assisted",
                   "identical"], rows)
    print(format_table(*wall_table))

    # 3. replay
    from heterospec.dfvg.replay import replay, summary
    rounds = pa.Table.from_pylist([r for s in cfg.dfvg.strategies for r in results[s][1]], schema=DFVG_ROUNDS_SCHEMA)
    gens = pa.Table.from_pylist(results["target_greedy"][0], schema=DFVG_GENERATIONS_SCHEMA)
    perf = paths.hls_perf if "hls" in cfg.dfvg.replay.profiles else None
    srows = summary(replay(rounds, gens, cfg, cfg.name, perf))
    r = cfg.dfvg.replay
    print(f"\nSimulated: draft on {r.fpga} / verify on {r.gpu} (fpga_gpu, overlapped) vs GPU-only speculative "
          f"decoding vs plain decoding, calls priced as models={r.models}")
    keep = ["profile", "strategy", "design", "tokens_per_s", "j_per_token", "speedup_vs_plain", "energy_gain_vs_plain",
            "speedup_vs_gpu_only", "guess_hit_pct"]
    print(format_table(keep, [tuple(x[k] for k in keep) for x in srows]))
    return {"tau": tau_table, "wall": wall_table}
