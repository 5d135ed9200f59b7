"""Train one role of the tiny trio (draft, PRM or target) on the synthetic task.

draft / target: ``Qwen2ForCausalLM`` on ``prompt + solution + eos``, loss on the solution only.
prm: ``Qwen2ForTokenClassification`` (2 labels), its input built by the PRM protocol
(:mod:`heterospec.models.prm`): prompt, then each step followed by ``<extra_0>``; separator positions
carry the step's label (1 = correct, 0 = wrong, after which the sequence stops). A wrong step is a
synthetic corruption or, with ``prm_draft_samples``, the trained draft's own step after a correct
prefix, labelled by the task's checker (process supervision from the draft's rollouts). Training is
deterministic: seeded data order, deterministic torch algorithms, a fixed thread count. Models are saved with
``save_pretrained`` next to the character tokenizer, atomically: a temp directory is renamed
into place only once everything is written.
"""
from __future__ import annotations

import logging

import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

from heterospec.errors import UserError
from heterospec.models.early_stop import EarlyStop, Validation
from heterospec.models.prm import PrmProtocol
from heterospec.models.rollouts import StepSample, every_position, random_positions, sample_steps
from heterospec.models.tokenizer import STEP, build_tokenizer, char_encoder
from heterospec.tasks.synthetic import Problem, corrupt_step, format_prompt, training_stream
from heterospec.trio import ROLES

PRM_INITS = ("scratch", "draft", "target")
IGNORE = -100


def qwen2_config(arch: Any, tokenizer, role: str) -> Qwen2Config:
    """A Qwen2 config from an ArchConfig; the PRM gets a 2-label token-classification head."""
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if role == "prm":
        cfg.num_labels = 2
        cfg.step_token_id = tokenizer.convert_tokens_to_ids(STEP)
        cfg.id2label, cfg.label2id = {0: "wrong", 1: "correct"}, {"wrong": 0, "correct": 1}
    return cfg


# ----------------------------------------------------------------------------- batches
def lm_example(tokenizer, encode, p: Problem) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of bos + prompt + solution + eos; the prompt is not a target."""
    prompt = [tokenizer.bos_token_id] + encode(format_prompt(p.question))
    sol = encode(p.solution) + [tokenizer.eos_token_id]
    return prompt + sol, [IGNORE] * len(prompt) + sol


def prm_example(protocol: PrmProtocol, question: str, steps: list[str], labels: list[int], good: list[str],
                dense: bool) -> tuple[list[int], list[int]]:
    """A labelled PRM sequence: ``steps`` with one label per step at its separator.

    With ``dense``, every character of a step is labelled too: 1 while the step still agrees with
    the correct one (``good``), 0 from the first wrong character on. That supervises each lookup and
    sum, as next-token loss does for the LMs; without it the PRM sees one label per step and learns
    far too slowly for a few-minute budget. Only the separator's reward is ever read.
    """
    ids = protocol.ids(question, steps)
    lab = [IGNORE] * len(ids)
    seps = [i for i, t in enumerate(ids) if t == protocol.sep]
    assert len(seps) == len(steps)
    for i, (step, y) in enumerate(zip(steps, labels)):
        lab[seps[i]] = y
        if dense:  # one token per character: the step's characters sit just before its separator
            start = seps[i] - len(step)
            ok = True
            for j, ch in enumerate(step):
                ok = ok and (y == 1 or (j < len(good[i]) and ch == good[i][j]))
                lab[start + j] = int(ok)
    return ids, lab


def solution_example(protocol: PrmProtocol, p: Problem, rng: random.Random, neg_frac: float,
                     dense: bool) -> tuple[list[int], list[int]]:
    """The correct steps, or (``neg_frac`` of the time) a correct prefix then one corrupted step."""
    steps, labels = list(p.steps), [1] * len(p.steps)
    if rng.random() < neg_frac:
        k = rng.randrange(len(p.steps))
        steps = p.steps[:k] + [corrupt_step(p, p.steps[:k], p.steps[k], rng)]
        labels = [1] * k + [0]
    return prm_example(protocol, p.question, steps, labels, p.steps, dense)


def sample_example(protocol: PrmProtocol, s: StepSample, dense: bool) -> tuple[list[int], list[int]]:
    """A correct prefix, then the draft's own step labelled by the checker."""
    return prm_example(protocol, s.problem.question, s.steps, [1] * s.k + [int(s.correct)],
                       s.problem.steps, dense)


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example."""
    T = max(len(x) for x, _ in examples)
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    lab = torch.full((len(examples), T), IGNORE, dtype=torch.long)
    att = torch.zeros((len(examples), T), dtype=torch.long)
    for i, (x, y) in enumerate(examples):
        ids[i, : len(x)], lab[i, : len(y)], att[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    return {"input_ids": ids, "labels": lab, "attention_mask": att}


def batches(tokenizer, gen: Any, role: str, train: Any,
            samples: list[StepSample] = ()) -> Iterator[dict[str, torch.Tensor]]:
    """Endless training batches in a seeded order; the PRM's mix draft steps (``samples``) into each batch."""
    stream = training_stream(gen, int(gen.train_seed) * 1000 + int(train.seed))
    rng = random.Random(int(train.seed) + 7)
    neg_frac, dense = float(train.prm_neg_frac), bool(train.prm_dense_labels)
    encode = char_encoder(tokenizer)
    protocol = PrmProtocol(tokenizer, STEP)
    pool = _cycle(list(samples), rng)
    size, buckets = int(train.batch_size), max(1, int(train.length_buckets))
    while True:
        if role == "prm":
            ex = [sample_example(protocol, next(pool), dense) if samples and rng.random() < train.prm_draft_share
                  else solution_example(protocol, next(stream), rng, neg_frac, dense) for _ in range(size * buckets)]
        else:
            ex = [lm_example(tokenizer, encode, next(stream)) for _ in range(size * buckets)]
        if buckets == 1:
            yield collate(ex, tokenizer.pad_token_id)
            continue
        # similar lengths share a batch, so less of each batch is padding; the batches' order is shuffled
        ex.sort(key=lambda e: len(e[0]))
        group = [ex[i : i + size] for i in range(0, len(ex), size)]
        rng.shuffle(group)
        for b in group:
            yield collate(b, tokenizer.pad_token_id)


def _cycle(items: list, rng: random.Random) -> Iterator:
    """The items in a fresh seeded order each pass."""
    while items:
        order = items[:]
        rng.shuffle(order)
        yield from order


def draft_samples(draft_dir: Path, gen: Any, train: Any, log: Callable[[str], None]) -> list[StepSample]:
    """The trained draft's next steps on training problems: half greedy, half at ``prm_draft_temperature``."""
    from heterospec.models.loading import load_causal_lm, load_tokenizer

    n = int(train.prm_draft_samples)
    t0 = time.time()
    model, tok = load_causal_lm(draft_dir, role="draft"), load_tokenizer(draft_dir, "draft")
    seed = int(gen.train_seed) * 1000 + 500 + int(train.seed)   # problems apart from every role's training stream
    stream = training_stream(gen, seed)
    at = random_positions([next(stream) for _ in range(n)], seed)
    out = (sample_steps(model, tok, at[: n // 2], seed=seed)
           + sample_steps(model, tok, at[n // 2:], temperature=float(train.prm_draft_temperature), seed=seed))
    wrong = sum(not s.correct for s in out)
    log(f"[train prm] {len(out)} draft steps from {draft_dir} ({wrong} wrong by the checker) in {_fmt_s(time.time() - t0)}")
    return out


# ----------------------------------------------------------------------------- training
def lr_at(step: int, train: Any) -> float:
    """Linear warmup, then cosine decay to 10 % of the peak."""
    if step < train.warmup:
        return train.lr * (step + 1) / train.warmup
    t = (step - train.warmup) / max(1, train.steps - train.warmup)
    return train.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def _prm_loss(model, batch: dict[str, torch.Tensor], lm_weight: float) -> torch.Tensor:
    """Step-label cross-entropy, plus next-token loss on the correct text through the tied embeddings.

    The auxiliary LM loss teaches the backbone to look values up and add them (what a real
    PRM inherits from the LM it is fine-tuned from); the head then only has to compare. It
    needs no extra weights, so the saved model is a plain Qwen2ForTokenClassification.
    """
    ids, lab = batch["input_ids"], batch["labels"]
    h = model.model(input_ids=ids, attention_mask=batch["attention_mask"]).last_hidden_state  # [B, T, H]
    logits = model.score(h)                                                                   # [B, T, 2]
    sep = ids == model.config.step_token_id
    loss = h.new_zeros(())
    # separators and step characters as two terms, each class-balanced: wrong steps are rare
    # (~15 % of separators, ~3 % of characters) and would otherwise barely move the head
    for where in (sep, ~sep):
        y = torch.where(where, lab, torch.full_like(lab, IGNORE))
        counts = torch.stack([(y == 0).sum(), (y == 1).sum()]).float()
        if counts.sum() == 0:
            continue
        weight = torch.where(counts > 0, counts.sum() / (2 * counts.clamp(min=1)), torch.zeros_like(counts))
        loss = loss + torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), weight=weight,
                                                        ignore_index=IGNORE)
    if lm_weight > 0:
        # predict token t+1 from position t wherever token t+1 is labelled right (correct prefix chars, separators)
        tgt = torch.where(lab[:, 1:] == 1, ids[:, 1:], torch.full_like(ids[:, 1:], IGNORE))  # [B, T-1]
        lm_logits = h[:, :-1] @ model.model.embed_tokens.weight.T                          # [B, T-1, V]
        loss = loss + lm_weight * torch.nn.functional.cross_entropy(
            lm_logits.flatten(0, 1), tgt.flatten(), ignore_index=IGNORE)
    return loss


def _validation_problems(gen: Any, train: Any) -> list[Problem]:
    """The validation problems: a stream of their own, apart from every training stream and the test set."""
    stream = training_stream(gen, int(gen.train_seed) * 1000 + 900)
    return [next(stream) for _ in range(int(train.validation_problems))]


def _validator(role: str, train: Any, gen: Any, tokenizer, draft_dir: Path | None) -> Validation | None:
    """The role's measured stop, or None: an LM's greedy step error (``stop_at_step_error``), the PRM's
    AUROC on the draft's greedy steps (``stop_at_auroc``), both on the validation problems.

    Where an LM learns the task depends on the seed (it sits near a cliff); stopping at a measured
    error keeps the draft's quality near the bar on each seed. Likewise the PRM stops once it judges the
    draft's steps well enough, rather than after a fixed count that suits one seed.
    """
    every = int(train.validate_every)
    if role == "prm":
        if float(train.stop_at_step_error) > 0:
            raise UserError("models.prm.train.stop_at_step_error: only the draft and the target stop at a step error "
                            "(the PRM stops at stop_at_auroc)")
        bar = float(train.stop_at_auroc)
        if bar <= 0:
            return None
        if draft_dir is None:
            raise UserError("models.prm.train.stop_at_auroc: the PRM is judged on the draft's steps, so the draft "
                            "must be trained first")
        from heterospec.models.loading import load_causal_lm, load_tokenizer
        from heterospec.models.prm import PRM
        from heterospec.models.quality import prm_on_samples

        draft = load_causal_lm(Path(draft_dir), role="draft"), load_tokenizer(Path(draft_dir), "draft")
        samples = sample_steps(*draft, every_position(_validation_problems(gen, train)))
        protocol = PrmProtocol(tokenizer, STEP)
        return Validation("AUROC on the draft's validation steps", "validation_auroc", bar,
                          lambda model: prm_on_samples(PRM(model, protocol), samples, 0.5)["auroc"],
                          reached=lambda v: v >= bar, every=every)
    if float(train.stop_at_auroc) > 0:
        raise UserError(f"models.{role}.train.stop_at_auroc: only the PRM stops at an AUROC")
    bar = float(train.stop_at_step_error)
    if bar <= 0:
        return None
    at = every_position(_validation_problems(gen, train))

    def step_error(model) -> float:
        out = sample_steps(model, tokenizer, at)
        return sum(not s.correct for s in out) / len(out)
    return Validation("step error on the validation problems", "validation_step_error", bar, step_error,
                      reached=lambda v: v <= bar, every=every, every_near=int(train.validate_every_near),
                      again_below=float(train.validate_again_below))


def _fmt_s(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def train_role(models_cfg: Any, dataset_cfg: Any, role: str, out_dir: Path,
               log: Callable[[str], None] = logging.getLogger("heterospec.models").info,
               draft_dir: Path | None = None, target_dir: Path | None = None) -> dict:
    """Train ``role`` with ``models_cfg[role].arch/.train`` and save model + tokenizer to ``out_dir``.

    The PRM learns from the draft's own steps when ``prm_draft_samples`` > 0 (``draft_dir``: the trained
    draft) and starts from the draft's or the target's weights with ``prm_init_from`` (``target_dir``: the
    trained target).
    """
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}; use one of {ROLES}")
    gen = dataset_cfg.generator
    if gen is None:
        raise UserError(f"dataset {dataset_cfg.name!r} has no generator: tiny models train on dataset=synthetic")
    rcfg = models_cfg[role]
    arch, train = rcfg.arch, rcfg.train
    out_dir = Path(out_dir)
    if role == "prm" and train.prm_draft_samples > 0 and draft_dir is None:
        raise UserError("models.prm.train.prm_draft_samples > 0: the PRM learns from the draft's steps, "
                        "so the draft must be trained first")
    init = str(train.prm_init_from) if role == "prm" else "scratch"
    if init not in PRM_INITS:
        raise UserError(f"models.prm.train.prm_init_from={init}: expected one of {list(PRM_INITS)}")
    init_dir = {"scratch": None, "draft": draft_dir, "target": target_dir}[init]
    if init != "scratch" and init_dir is None:
        raise UserError(f"models.prm.train.prm_init_from={init}: the PRM starts from the {init}'s weights, "
                        f"so the {init} must be trained first")
    threads_before, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(int(train.threads))
    torch.use_deterministic_algorithms(True)
    try:
        return _train(role, arch, train, gen, out_dir, log, draft_dir, init_dir)
    finally:
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(deterministic)


@dataclass
class TrainingProgress:
    """Where training stands: optimiser steps taken, tokens trained on, the last batch's loss and its moving
    average (what the log shows)."""
    step: int = 0
    tokens: int = 0
    loss_ema: float | None = None
    loss: float = float("nan")

    def add(self, batch: dict[str, torch.Tensor], loss: float) -> None:
        self.step += 1
        self.tokens += int(batch["attention_mask"].sum())
        self.loss = loss
        self.loss_ema = loss if self.loss_ema is None else 0.95 * self.loss_ema + 0.05 * loss

    def snapshot(self) -> "TrainingProgress":
        return replace(self)

    def restore(self, earlier: "TrainingProgress") -> None:
        self.step, self.tokens, self.loss_ema, self.loss = earlier.step, earlier.tokens, earlier.loss_ema, earlier.loss


def _train(role: str, arch: Any, train: Any, gen: Any, out_dir: Path, log: Callable[[str], None],
           draft_dir: Path | None, init_dir: Path | None) -> dict:
    """The training loop: a fresh (or LM-initialised) model, seeded batches, an optimiser step each, a progress line
    every ``log_every`` steps, the early stop's checks; then the model saved with its metrics."""
    torch.manual_seed(int(train.seed))
    tokenizer = build_tokenizer()
    model, arch = _initial_model(role, arch, train, tokenizer, init_dir, log)
    n_params = sum(p.numel() for p in model.parameters())
    opt = _optimiser(model, train)
    log(f"[train {role}] {n_params:,} params, {train.steps} steps x {train.batch_size} seqs, "
        f"{train.threads} thread(s), hidden {arch.hidden_size} x {arch.num_hidden_layers} layers")

    t0, cpu0 = time.time(), time.process_time()   # the draft's samples count in the PRM's training time
    samples = draft_samples(Path(draft_dir), gen, train, log) if role == "prm" and train.prm_draft_samples > 0 else []
    data = batches(tokenizer, gen, role, train, samples)
    validation = _validator(role, train, gen, tokenizer, draft_dir)
    stop = EarlyStop(validation, int(train.steps), lambda s: log(f"[train {role}] {s}")) if validation else None
    run = TrainingProgress()
    while run.step < train.steps:
        batch = stop.next_batch(data) if stop else next(data)
        run.add(batch, _optimiser_step(model, opt, batch, lr_at(run.step, train), role, float(train.prm_lm_weight)))
        if run.step % train.log_every == 0 or run.step == train.steps:
            el = time.time() - t0
            log(f"[train {role}] step {run.step}/{train.steps} loss {run.loss_ema:.4f} {run.tokens / el:,.0f} tok/s "
                f"elapsed {_fmt_s(el)} eta {_fmt_s(el / run.step * (train.steps - run.step))}")
        if stop and stop.due(run.step) and stop.check(model, opt, run):
            break

    wall = time.time() - t0
    metrics = {"role": role, "final_loss": run.loss_ema, "last_batch_loss": run.loss, "params": n_params,
               "steps": run.step, "wall_s": round(wall, 2), "tokens": run.tokens,
               "cpu_s": round(time.process_time() - cpu0, 2),   # what the wall time would be on a free core
               "tokens_per_s": round(run.tokens / wall, 1)}
    if samples:
        metrics.update(draft_steps=len(samples), draft_steps_wrong=sum(not s.correct for s in samples))
    if stop:
        metrics.update(stop.fields())
    model.eval()
    _save_atomic(out_dir, model, tokenizer, metrics)
    log(f"[train {role}] saved to {out_dir} in {_fmt_s(wall)} (loss {run.loss_ema:.4f})")
    return metrics


def _initial_model(role: str, arch: Any, train: Any, tokenizer, init_dir: Path | None, log: Callable[[str], None]):
    """The model training starts from, and its shape: fresh from ``arch``, or (a PRM) on a trained LM's layers."""
    if init_dir is not None:
        model = _prm_from_lm(Path(init_dir), int(train.prm_extra_layers), tokenizer)
        log(f"[train prm] starting from the {train.prm_init_from}'s weights in {init_dir}"
            f" (+ {train.prm_extra_layers} fresh layers)")
        arch = model.config
    else:
        model = (Qwen2ForTokenClassification if role == "prm" else Qwen2ForCausalLM)(qwen2_config(arch, tokenizer, role))
    model.train()
    return model, arch


def _optimiser(model, train: Any) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms and biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": train.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=train.lr, betas=(0.9, 0.95))


def _optimiser_step(model, opt, batch: dict[str, torch.Tensor], lr: float, role: str, prm_lm_weight: float) -> float:
    """One step on ``batch`` at learning rate ``lr`` (gradients clipped to norm 1); the batch's loss."""
    for g in opt.param_groups:
        g["lr"] = lr
    loss = _prm_loss(model, batch, prm_lm_weight) if role == "prm" else model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def _prm_from_lm(lm_dir: Path, extra_layers: int, tokenizer) -> Qwen2ForTokenClassification:
    """A PRM on a trained LM's backbone: its layers, ``extra_layers`` fresh ones on top, a fresh 2-label head.

    The fresh layers' output projections start at zero, so at step 0 they pass the LM's hidden states
    through unchanged and the PRM starts from what the LM knows.
    """
    lm = Qwen2ForCausalLM.from_pretrained(str(lm_dir))
    cfg = lm.config
    cfg.num_hidden_layers += extra_layers
    cfg.layer_types = None   # recomputed for the new depth
    cfg.architectures = None
    cfg.num_labels = 2
    cfg.id2label, cfg.label2id = {0: "wrong", 1: "correct"}, {"wrong": 0, "correct": 1}
    cfg.step_token_id = tokenizer.convert_tokens_to_ids(STEP)
    model = Qwen2ForTokenClassification(Qwen2Config(**cfg.to_dict()))
    model.model.load_state_dict(lm.model.state_dict(), strict=False)
    with torch.no_grad():
        for layer in model.model.layers[len(lm.model.layers):]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # the LMs never read <extra_0> (their steps are joined by "\n\n"): start the separator where a
        # step boundary already sits in their embedding space, not at an untrained row
        emb = model.model.embed_tokens.weight
        emb[cfg.step_token_id] = emb[tokenizer("\n", add_special_tokens=False)["input_ids"][0]]
    return model


def _save_atomic(out_dir: Path, model, tokenizer, metrics: dict) -> None:
    """Write into a sibling temp dir, then rename: a killed run never leaves a finished-looking model."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / "heterospec_train.json").write_text(json.dumps(metrics, indent=2) + "\n")
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
