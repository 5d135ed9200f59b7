"""Quality of the trained trio on held-out synthetic problems.

Greedy accuracy of the draft and the target (graded like every benchmark, on the last
``\\boxed{}``), and the PRM's step-level AUROC: on each test problem, the correct steps are the
positives and one corrupted step after a correct prefix is the negative.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable

import torch

from heterospec.grading import grade
from heterospec.models.generate import greedy_generate_batch
from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
from heterospec.tasks.synthetic import corrupt_step, format_prompt, held_out_problems


def auroc(scores: list[float], labels: list[int]) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    n_pos = sum(1 for y in labels if y == 1)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r_pos = sum(r for r, y in zip(ranks, labels) if y == 1)
    return (r_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def lm_accuracy(model, tokenizer, problems, max_new_tokens: int = 96, batch_size: int = 50) -> dict:
    """Greedy accuracy and mean generated tokens on ``problems``."""
    correct, tokens = 0, 0
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        outs = greedy_generate_batch(model, tokenizer, [format_prompt(p.question) for p in chunk], max_new_tokens)
        for p, (text, n) in zip(chunk, outs):
            correct += grade(text, p.answer)
            tokens += n
    return {"accuracy": correct / len(problems), "mean_tokens": tokens / len(problems)}


def prm_auroc(prm, problems, seed: int = 0, batch_size: int = 50) -> dict:
    """Step-level AUROC: correct steps vs one corrupted step per problem at a random position."""
    rng = random.Random(seed)
    items, labels = [], []
    for p in problems:
        items.append((p.question, p.steps))
        labels.append([1] * len(p.steps))
        k = rng.randrange(len(p.steps))
        items.append((p.question, p.steps[:k] + [corrupt_step(p, p.steps[:k], p.steps[k], rng)]))
        labels.append([None] * k + [0])  # its correct prefix is already counted above
    scores, ys = [], []
    for i in range(0, len(items), batch_size):
        for rewards, lab in zip(prm.score_batch(items[i : i + batch_size]), labels[i : i + batch_size]):
            for r, y in zip(rewards, lab):
                if y is not None:
                    scores.append(r)
                    ys.append(y)
    pos = [s for s, y in zip(scores, ys) if y == 1]
    neg = [s for s, y in zip(scores, ys) if y == 0]
    return {"auroc": auroc(scores, ys), "n_pos": len(pos), "n_neg": len(neg),
            "pos_accept@0.7": sum(s >= 0.7 for s in pos) / len(pos),
            "neg_reject@0.7": sum(s < 0.7 for s in neg) / len(neg)}


def evaluate_quality(models_cfg: Any, dataset_cfg: Any, model_dirs: dict[str, Path], n: int = 200,
                     log: Callable[[str], None] = print) -> dict:
    """Draft / target greedy accuracy and PRM step AUROC on ``n`` held-out problems."""
    problems = held_out_problems(dataset_cfg.generator, n)
    res: dict[str, Any] = {"n": n}
    for role in ("draft", "target"):
        if role not in model_dirs:
            continue
        t0 = time.time()
        rcfg = models_cfg[role]
        model = load_causal_lm(model_dirs[role], dtype=rcfg.dtype, role=role)
        acc = lm_accuracy(model, load_tokenizer(model_dirs[role], role), problems)
        res[f"{role}_accuracy"], res[f"{role}_mean_tokens"] = acc["accuracy"], acc["mean_tokens"]
        log(f"[quality] {role}: accuracy {acc['accuracy']:.3f} on {n} problems ({time.time() - t0:.1f}s)")
    if "prm" in model_dirs:
        t0 = time.time()
        a = prm_auroc(load_prm(model_dirs["prm"], dtype=models_cfg.prm.dtype), problems)
        res.update({f"prm_{k}": v for k, v in a.items()})
        log(f"[quality] prm: step AUROC {a['auroc']:.3f} ({a['n_pos']} correct / {a['n_neg']} corrupted steps; "
            f"accept@0.7 {a['pos_accept@0.7']:.2f}, reject@0.7 {a['neg_reject@0.7']:.2f}; {time.time() - t0:.1f}s)")
    if "draft_accuracy" in res and "target_accuracy" in res:
        res["gap"] = res["target_accuracy"] - res["draft_accuracy"]
    return res
