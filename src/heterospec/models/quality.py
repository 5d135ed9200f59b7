"""Quality of the trained trio on held-out synthetic problems.

Greedy accuracy of the draft and the target (graded like every benchmark, on the last
``\\boxed{}``), and the PRM judged where it matters: on the draft's own greedy step after each
correct prefix, labelled by the task's checker (AUROC, false rejects and misses at the acceptance
threshold). A second AUROC uses synthetic corruptions: correct steps against one corrupted step per
problem.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable


from heterospec.grading import grade
from heterospec.models.generate import greedy_generate_batch
from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
from heterospec.models.rollouts import StepSample, every_position, sample_steps
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
    return {"auroc": auroc(scores, ys), "n_pos": ys.count(1), "n_neg": ys.count(0)}


def prm_on_samples(prm, samples: list[StepSample], threshold: float, batch_size: int = 100) -> dict:
    """The PRM on draft steps: AUROC (correct vs wrong), false rejects (correct < threshold), misses (wrong >= it)."""
    scores: list[float] = []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i : i + batch_size]
        scores += [r[-1] for r in prm.score_batch([(s.problem.question, s.steps) for s in chunk])]
    good = [x for x, s in zip(scores, samples) if s.correct]
    bad = [x for x, s in zip(scores, samples) if not s.correct]
    return {"auroc": auroc(scores, [int(s.correct) for s in samples]), "n_correct": len(good), "n_wrong": len(bad),
            "false_reject": sum(x < threshold for x in good) / len(good) if good else float("nan"),
            "miss": sum(x >= threshold for x in bad) / len(bad) if bad else float("nan")}


def evaluate_quality(models_cfg: Any, dataset_cfg: Any, model_dirs: dict[str, Path], n: int = 200,
                     threshold: float = 0.7, log: Callable[[str], None] = print) -> dict:
    """Draft / target greedy accuracy and the PRM's quality on the draft's steps and on corruptions."""
    problems = held_out_problems(dataset_cfg.generator, n)
    res: dict[str, Any] = {"n": n}
    draft = None
    for role in ("draft", "target"):
        if role not in model_dirs:
            continue
        t0 = time.time()
        rcfg = models_cfg[role]
        model, tok = load_causal_lm(model_dirs[role], dtype=rcfg.dtype, role=role), load_tokenizer(model_dirs[role], role)
        acc = lm_accuracy(model, tok, problems)
        res[f"{role}_accuracy"], res[f"{role}_mean_tokens"] = acc["accuracy"], acc["mean_tokens"]
        log(f"[quality] {role}: accuracy {acc['accuracy']:.3f} on {n} problems ({time.time() - t0:.1f}s)")
        if role == "draft":
            draft = (model, tok)
    if "prm" in model_dirs:
        t0 = time.time()
        prm = load_prm(model_dirs["prm"], dtype=models_cfg.prm.dtype, prompt=models_cfg.prompt,
                       step_token=models_cfg.prm_step_token)
        a = prm_auroc(prm, problems)
        res.update({f"prm_{k}": v for k, v in a.items()})
        log(f"[quality] prm on corruptions: step AUROC {a['auroc']:.3f} ({a['n_pos']} correct / {a['n_neg']} "
            f"corrupted steps; {time.time() - t0:.1f}s)")
        if draft is not None:
            t0 = time.time()
            samples = sample_steps(*draft, every_position(problems), prompt=models_cfg.prompt,
                                   delimiter=models_cfg.step_separator)
            d = prm_on_samples(prm, samples, threshold)
            res.update({f"prm_draft_{k}": v for k, v in d.items()})
            log(f"[quality] prm on the draft's greedy steps: AUROC {d['auroc']:.3f} ({d['n_correct']} correct / "
                f"{d['n_wrong']} wrong); at threshold {threshold}: false reject {d['false_reject']:.3f}, "
                f"miss {d['miss']:.3f} ({time.time() - t0:.1f}s)")
    if "draft_accuracy" in res and "target_accuracy" in res:
        res["gap"] = res["target_accuracy"] - res["draft_accuracy"]
    return res
