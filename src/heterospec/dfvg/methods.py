"""DFVG's methods on the run's draft + target pair: the baselines (plain target greedy, Hugging Face assisted
generation) and each drafting strategy, run over the same prompts; the collect stage and the bench both use them."""
from __future__ import annotations

import time

from omegaconf import DictConfig

from heterospec.dfvg.baselines import hf_generate, target_greedy
from heterospec.speculative.decoder import Pair, SpeculativeDecoder, load_pair
from heterospec.speculative.strategies import STRATEGIES, draft_lanes, make_strategy
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.progress import progress

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
    from heterospec.models.role_manifest import read_manifest
    draft = read_manifest(paths.model_manifest("draft"))["path"]
    target = read_manifest(paths.model_manifest("target"))["path"]
    dev = cfg.system.torch_devices
    return load_pair(draft, target, cfg.models.target.dtype, (dev.get("draft", "cpu"), dev.get("target", "cpu")))


def strategy(cfg: DictConfig, name: str):
    from heterospec.config.hardware import device
    hw = device(cfg.dfvg.draft_hardware, cfg)
    return make_strategy(name, cfg.token_speculation, draft_lanes(hw), cfg.dfvg.draft_hardware)


def run_method(pair: Pair, cfg: DictConfig, method: str, items: list[tuple[str, list[int]]],
               reference: dict[str, list[int]] | None = None) -> tuple[list[dict], list[dict]]:
    """Decode every prompt with ``method``; (generation rows, round rows)."""
    if method not in METHODS:
        raise UserError(f"unknown DFVG method '{method}'; choose one of {list(METHODS)}")
    d = cfg.dfvg
    decoder = SpeculativeDecoder(pair, d.temperature, d.seed, cfg.token_speculation.draft_decoder) if method in STRATEGIES else None
    gens, rounds = [], []
    for pid, ids in progress(items, desc=f"dfvg {method}", unit="prompt"):
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
        rounds += [r.row(**base, strategy=method) for r in rs]
    return gens, rounds

