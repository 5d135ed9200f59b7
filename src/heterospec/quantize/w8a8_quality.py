"""How much the W8A8 draft loses: accuracy before/after on the held-out synthetic problems, greedy agreement,
perplexity. One Parquet row per run (``quantize_quality/v1``)."""
from __future__ import annotations

import logging

import math
import time
from typing import Callable

import pyarrow as pa
import torch

from heterospec.grading import grade
from heterospec.models.generate import greedy_generate_batch
from heterospec.store import versioned

QUANTIZE_QUALITY_SCHEMA = versioned("quantize_quality", 1, [
    pa.field("run", pa.string()),
    pa.field("experiment", pa.string()),
    pa.field("models", pa.string()),
    pa.field("alpha", pa.float64()),                  # smoothing strength
    pa.field("calibration_prompts", pa.int32()),
    pa.field("problems", pa.int32()),                 # held-out synthetic problems
    pa.field("accuracy_fp", pa.float64()),            # % correct, greedy, unquantised draft
    pa.field("accuracy_int8", pa.float64()),          # % correct, greedy, W8A8 draft
    pa.field("accuracy_drop", pa.float64()),          # points lost (fp - int8)
    pa.field("sequence_match", pa.float64()),         # % of problems whose greedy outputs are identical
    pa.field("top1_agreement", pa.float64()),         # % of the fp draft's greedy tokens the int8 draft also picks (teacher-forced)
    pa.field("ppl_fp", pa.float64()),                 # perplexity on the reference solutions
    pa.field("ppl_int8", pa.float64()),
    pa.field("ppl_change_pct", pa.float64()),
    pa.field("int8_weight_bytes", pa.int64()),
    pa.field("fp_weight_bytes", pa.int64()),
    pa.field("meets_bar", pa.bool_()),                # accuracy_drop <= quantize.max_accuracy_drop
    pa.field("wall_s", pa.float64()),
])


@torch.no_grad()
def _teacher_forced(model, seqs: list[list[int]], starts: list[int], device) -> tuple[list[torch.Tensor], float, int]:
    """Per sequence the argmax predictions from ``start`` on, plus summed NLL and count of those targets."""
    preds, nll, count = [], 0.0, 0
    for ids, s in zip(seqs, starts):
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x, use_cache=False).logits[0, s - 1:-1].double()
        tgt = x[0, s:]
        nll += float(torch.nn.functional.cross_entropy(logits, tgt, reduction="sum"))
        count += int(tgt.numel())
        preds.append(logits.argmax(-1).cpu())
    return preds, nll, count


def compare(fp_model, q_model, tokenizer, problems, prompts: list[str], max_new_tokens: int,
            log: Callable[[str], None] = logging.getLogger("heterospec.quantize").info,
            batch_size: int = 50) -> dict:
    """Accuracy of both drafts, greedy agreement and perplexity on ``problems`` (prompts already formatted)."""
    t0 = time.time()
    outs = {}
    for name, model in (("fp", fp_model), ("int8", q_model)):
        res = []
        for i in range(0, len(prompts), batch_size):
            res += greedy_generate_batch(model, tokenizer, prompts[i:i + batch_size], max_new_tokens)
        outs[name] = res
        log(f"{name} draft generated {len(res)} answers ({time.time() - t0:.1f}s)")
    acc = {k: 100.0 * sum(grade(t, p.answer) for (t, _), p in zip(v, problems)) / len(problems) for k, v in outs.items()}
    enc = [tokenizer(p)["input_ids"] for p in prompts]
    dev = next(fp_model.parameters()).device
    # greedy agreement, teacher-forced on the fp draft's own greedy continuations
    fp_seqs = [e + tokenizer(t, add_special_tokens=False)["input_ids"] for e, (t, _) in zip(enc, outs["fp"])]
    keep = [i for i, s in enumerate(fp_seqs) if len(s) > len(enc[i])]
    pf, _, _ = _teacher_forced(fp_model, [fp_seqs[i] for i in keep], [len(enc[i]) for i in keep], dev)
    pq, _, _ = _teacher_forced(q_model, [fp_seqs[i] for i in keep], [len(enc[i]) for i in keep], dev)
    same = sum(int((a == b).sum()) for a, b in zip(pf, pq))
    total = sum(int(a.numel()) for a in pf)
    # perplexity on the reference solutions
    eos = tokenizer.eos_token_id
    ref = [e + tokenizer(p.solution, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])
           for e, p in zip(enc, problems)]
    _, nll_fp, n = _teacher_forced(fp_model, ref, [len(e) for e in enc], dev)
    _, nll_q, _ = _teacher_forced(q_model, ref, [len(e) for e in enc], dev)
    ppl_fp, ppl_q = math.exp(nll_fp / n), math.exp(nll_q / n)
    return {"accuracy_fp": acc["fp"], "accuracy_int8": acc["int8"], "accuracy_drop": acc["fp"] - acc["int8"],
            "sequence_match": 100.0 * sum(a == b for a, b in zip(outs["fp"], outs["int8"])) / len(problems),
            "top1_agreement": 100.0 * same / max(total, 1), "ppl_fp": ppl_fp, "ppl_int8": ppl_q,
            "ppl_change_pct": 100.0 * (ppl_q / ppl_fp - 1.0), "wall_s": time.time() - t0}


def print_quality(row: dict) -> None:
    """The report as a few lines, the accuracy bar marked."""
    ok = "ok" if row["meets_bar"] else "MISSED"
    print(f"W8A8 draft quality for run {row['run']} (models={row['models']}, alpha={row['alpha']}, "
          f"{row['calibration_prompts']} calibration prompts, {row['problems']} held-out problems)")
    print(f"  accuracy        fp {row['accuracy_fp']:5.1f} %   int8 {row['accuracy_int8']:5.1f} %   "
          f"drop {row['accuracy_drop']:+.1f} points   {ok}")
    print(f"  greedy          top-1 agreement {row['top1_agreement']:.1f} %   identical outputs {row['sequence_match']:.1f} %")
    print(f"  perplexity      fp {row['ppl_fp']:.4f}   int8 {row['ppl_int8']:.4f}   ({row['ppl_change_pct']:+.2f} %)")
    print(f"  weights         int8 {row['int8_weight_bytes']:,} B   fp32 {row['fp_weight_bytes']:,} B")
