"""Batched call prices of a run's trio, measured on one torch device: each role's forward pass at several batch sizes
and context lengths, timed, in :data:`~heterospec.replay.profiles.batch_prices.BATCH_PRICES_SCHEMA`.

    python -m heterospec.replay.profiles.price_sweep --device cpu --batches 1,2,4 --contexts 32,96 experiment=ci
    python -m heterospec.replay.profiles.price_sweep --device cuda:0 --out prices.parquet experiment=ci   (batch 1..64)

A point is one pass: ``decode`` feeds one token per sequence after ``context`` cached tokens (draft, target),
``score`` feeds a step of ``--step-tokens`` tokens per sequence after ``context`` cached ones (the PRM, as its
prefix cache does), ``prefill`` feeds ``context`` tokens to an empty cache (every role). Token ids are drawn at
random: the models' cost does not depend on which tokens they read.
"""
from __future__ import annotations

import logging
import platform
import statistics
import time
from pathlib import Path

from heterospec import stage
from heterospec.errors import UserError
from heterospec.paths import ROLES, RunPaths
from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.store import write_parquet

log = logging.getLogger("heterospec.replay.profiles.price_sweep")

GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GPU_CONTEXTS = (32, 96, 192)
# the phases the load replay prices per role: drafting and target decoding token by token, the PRM scoring a step
ROLE_PHASES = {"draft": ("prefill", "decode"), "prm": ("prefill", "score"), "target": ("prefill", "decode")}


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): positive integers, or one line naming the flag."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {text}: expected comma-separated positive integers, e.g. 1,2,4") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} {text}: expected comma-separated positive integers, e.g. 1,2,4")
    return values


def device_name(device: str) -> str:
    """What the pass ran on, in words: the GPU's name, or the CPU's model name."""
    import torch
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def _cache_arg(model) -> str:
    import inspect
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def time_pass(model, device: str, batch: int, context: int, tokens: int, repeats: int, seed: int = 0) -> list[float]:
    """Wall times (ms) of ``repeats`` passes of ``batch`` x ``tokens`` new tokens after ``batch`` x ``context``
    cached ones, after one untimed warm-up pass; the cache is cut back to ``context`` after every pass."""
    import torch
    import transformers
    from transformers import DynamicCache

    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    arg = _cache_arg(model)
    new = torch.randint(0, vocab, (batch, tokens), generator=gen).to(device)
    # transformers 5 cuts a cache by a negative count of tokens to drop; 4.x to a length (as models.prefix_cache does)
    cut = -tokens if int(transformers.__version__.split(".")[0]) >= 5 else context
    times = []
    with torch.no_grad():
        cache = DynamicCache()
        if context:
            model(input_ids=torch.randint(0, vocab, (batch, context), generator=gen).to(device), use_cache=True,
                  **{arg: cache})
        for i in range(repeats + 1):
            _sync(device)
            t0 = time.perf_counter()
            model(input_ids=new, use_cache=True, **{arg: cache})
            _sync(device)
            if i:                                   # the first pass warms up kernels and allocator
                times.append(1000 * (time.perf_counter() - t0))
            if context:
                cache.crop(cut)
            else:
                cache = DynamicCache()
    return times


def load_role(cfg, paths: RunPaths, role: str, device: str):
    """The role's model (the PRM's bare network: a step's score is one forward pass) on ``device``."""
    from heterospec.models.loading import load_causal_lm, load_prm
    from heterospec.models.role_manifest import read_manifest

    path = read_manifest(paths.model_manifest(role))["path"]
    dtype = str(cfg.models[role].dtype)
    if role == "prm":
        return load_prm(path, device=device, dtype=dtype, prompt=cfg.models.prompt,
                        step_token=cfg.models.prm_step_token).model
    return load_causal_lm(path, device=device, dtype=dtype, role=role)


def sweep(cfg, paths: RunPaths, device: str, batches=GPU_BATCHES, contexts=GPU_CONTEXTS, step_tokens: int = 16,
          repeats: int = 5, roles=ROLES, say=print) -> list[dict]:
    """The price rows of ``roles`` on ``device``: every phase of :data:`ROLE_PHASES` at every batch and context."""
    from heterospec.reasoning.workers import check_device

    for role in roles:
        check_device(role, device)
    name = device_name(device)
    rows = []
    for role in roles:
        model = load_role(cfg, paths, role, device)
        limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        longest = max(max(contexts) + step_tokens, max(contexts))
        if limit and longest > limit:
            raise UserError(f"--contexts {','.join(map(str, contexts))}: the {role} model holds {limit} positions; "
                            f"context + step tokens must stay within it ({longest})")
        t0 = time.perf_counter()
        for phase in ROLE_PHASES[role]:
            for context in contexts:
                for batch in batches:
                    ctx, new = {"prefill": (0, context), "decode": (context, 1), "score": (context, step_tokens)}[phase]
                    ms = time_pass(model, device, batch, ctx, new, repeats)
                    rows.append(dict(run=cfg.name, device=device, device_name=name, role=role, phase=phase,
                                     batch=batch, context=ctx, tokens=new, ms=statistics.median(ms), ms_min=min(ms),
                                     ms_max=max(ms), repeats=repeats, dtype=str(cfg.models[role].dtype)))
        mine = [r for r in rows if r["role"] == role]
        say(f"[price sweep] {role}: {len(mine)} points on {device} in {time.perf_counter() - t0:.1f} s; batch "
            f"{batches[0]} -> {batches[-1]} decode/score at context {contexts[-1]}: "
            + ", ".join(f"{r['ms']:.2f}" for r in mine if r["context"] == contexts[-1] and r["phase"] != "prefill")
            + " ms")
        del model
    return rows


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.replay.profiles.price_sweep",
                     "Batched call prices of the run's trio on one device (BATCH_PRICES_SCHEMA).")
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda:N")
    p.add_argument("--batches", default=",".join(map(str, GPU_BATCHES)), help="sequences per pass")
    p.add_argument("--contexts", default=",".join(map(str, GPU_CONTEXTS)), help="cached tokens per sequence")
    p.add_argument("--step-tokens", type=int, default=16, help="tokens of a step the PRM scores")
    p.add_argument("--repeats", type=int, default=5, help="timed passes per point (the median counts)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument("--out", type=Path, help="default: results/<run>/replay/batch_prices.parquet")
    args = stage.parse(p, argv)
    if args.repeats < 1 or args.step_tokens < 1:
        raise UserError("--repeats and --step-tokens must be 1 or more")
    batches, contexts = parse_ints(args.batches, "--batches"), parse_ints(args.contexts, "--contexts")
    cfg, paths = stage.compose(args)
    import torch
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rows = sweep(cfg, paths, args.device, batches, contexts, args.step_tokens, args.repeats)
    out = write_parquet(rows, args.out or paths.batch_prices, BATCH_PRICES_SCHEMA)
    log.info("%d price points in %.1f s -> %s", len(rows), time.perf_counter() - t0, out)


if __name__ == "__main__":
    stage.run(main)
