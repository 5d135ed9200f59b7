"""By how much a padded batched pass (heterospec.models.batching) moves a model's outputs: the run's target decoding
greedily and its PRM scoring, rows of different contexts in one pass against each row alone.

    python benchmarks/serving_padding.py --prompts 16 --tokens 60 experiment=default

Per model it prints the largest absolute difference of the logits (the target) or of the step rewards (the PRM) over
every row and step, and how many greedy tokens / PRM verdicts at ``--threshold`` differ. Needs the run's trained
trio (``snakemake --cores all``, or ``python -m heterospec.models train``).
"""
from __future__ import annotations

import argparse
import sys

import torch

from heterospec import stage
from heterospec.models.batching import feed_batch
from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
from heterospec.models.prefix_cache import PrefixCache
from heterospec.models.prompts import format_prompt
from heterospec.tasks import load_problems


def target(cfg, paths, problems, tokens: int) -> tuple[float, int, int]:
    """(max |logit difference|, greedy tokens that differ, tokens): every prompt decoded alone and all in one batch."""
    path = str(paths.model_checkpoint("target"))
    tok, model = load_tokenizer(path, "target"), load_causal_lm(path, role="target")
    prompts = [tok(format_prompt(cfg.models.prompt, p.question, tok))["input_ids"] for p in problems]
    alone = []
    for ids in prompts:
        c = PrefixCache(model)
        logits, out = c.advance(ids)[0], []
        for _ in range(tokens):
            out.append(logits)
            logits = c.feed([int(logits.argmax())])
        alone.append(out)
    caches = [PrefixCache(model) for _ in prompts]
    logits = feed_batch(caches, [list(p) for p in prompts])       # rows of different lengths: left-padded caches
    worst, differ = 0.0, 0
    for t in range(tokens):
        worst = max(worst, max(float((a[t] - b).abs().max()) for a, b in zip(alone, logits)))
        differ += sum(int(a[t].argmax()) != int(b.argmax()) for a, b in zip(alone, logits))
        logits = feed_batch(caches, [[int(a[t].argmax())] for a in alone])   # the alone path's tokens, so rows align
    return worst, differ, tokens * len(prompts)


def prm(cfg, paths, problems, threshold: float) -> tuple[float, int, int]:
    """(max |reward difference|, verdicts that differ, rewards): each solution's steps scored one by one, alone and
    with every other solution's step in the same pass."""
    m = load_prm(str(paths.model_checkpoint("prm")), prompt=cfg.models.prompt, step_token=cfg.models.prm_step_token)
    sols = [(p.question, list(p.steps)) for p in problems]          # the reference solutions' steps
    alone, batched = [PrefixCache(m.model) for _ in sols], [PrefixCache(m.model) for _ in sols]
    worst, differ, n = 0.0, 0, 0
    for k in range(max(len(s) for _, s in sols)):
        rows = [i for i, (_, s) in enumerate(sols) if k < len(s)]
        ids = [m.protocol.ids(sols[i][0], sols[i][1][:k + 1]) for i in rows]
        want = [m.protocol.reward(alone[i].advance(x)[0]) for i, x in zip(rows, ids)]
        feeds = [batched[i].prepare(x)[1] for i, x in zip(rows, ids)]
        got = [m.protocol.reward(lg) for lg in feed_batch([batched[i] for i in rows], feeds)]
        for a, b in zip(want, got):
            worst = max(worst, abs(float(a) - float(b)))
            differ += (float(a) >= threshold) != (float(b) >= threshold)
            n += 1
    return worst, differ, n


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--threshold", type=float, default=None, help="PRM verdict threshold (default algorithm.threshold)")
    args = stage.parse(p, argv)
    torch.set_num_threads(1)
    cfg, paths = stage.compose(args)
    problems = load_problems(cfg.dataset, args.prompts)
    worst, differ, n = target(cfg, paths, problems, args.tokens)
    print(f"target: max |logit difference| {worst:.3g} over {n} greedy tokens; {differ} tokens differ")
    worst, differ, n = prm(cfg, paths, problems, cfg.algorithm.threshold if args.threshold is None else args.threshold)
    print(f"prm:    max |reward difference| {worst:.3g} over {n} step rewards; {differ} verdicts differ")


if __name__ == "__main__":
    stage.run(main, sys.argv[1:])
