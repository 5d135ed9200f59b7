"""The ``evaluate`` stage: draft-only and target-only greedy decoding on a dataset, and the target alone decoding with
token-level speculation (``target_sd``: the run's draft drafts, strategy ``algorithm.target_sd``; greedy
verification writes exactly target-only's tokens, in other time).

    python -m heterospec.evaluate --dataset synthetic --method target_only experiment=ci

One Parquet row per problem (schema ``evaluation/v1``); these are the single-model
baselines of the paper's Table III.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import pyarrow as pa

from heterospec import stage
from heterospec.config import dataset_config
from heterospec.errors import UserError
from heterospec.grading import grade, last_boxed
from heterospec.paths import EVAL_METHODS, EVAL_ROLES, RunPaths
from heterospec.progress import progress
from heterospec.store import versioned, write_parquet

log = logging.getLogger("heterospec.evaluate")

EVALUATION_SCHEMA = versioned("evaluation", 1, [
    pa.field("run", pa.string()),            # results/<run>/
    pa.field("experiment", pa.string()),
    pa.field("models", pa.string()),         # models config name (tiny, config1, ...)
    pa.field("dataset", pa.string()),
    pa.field("method", pa.string()),         # draft_only | target_only | target_sd
    pa.field("problem_id", pa.string()),
    pa.field("answer", pa.string()),         # reference answer
    pa.field("prediction", pa.string()),     # last \boxed{} of the output (null if none)
    pa.field("correct", pa.bool_()),
    pa.field("output", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("output_tokens", pa.int32()),
    pa.field("wall_s", pa.float64()),
])


def evaluate(cfg, paths: RunPaths, dataset: str, method: str, overrides: list[str], out: Path) -> list[dict]:
    """Greedy-decode every problem with one model (``target_sd``: the target verifying the draft's tokens) and grade
    it; write the rows to ``out``."""
    import torch
    from heterospec.models.loading import load_tokenizer
    from heterospec.models.prompts import format_prompt
    from heterospec.models.role_manifest import read_manifest
    from heterospec.speculative.stepwise import check_strategy
    from heterospec.tasks import load_problems

    if method not in EVAL_METHODS:
        raise UserError(f"--method {method}: expected one of {list(EVAL_METHODS)}")
    if method == "target_sd":
        check_strategy(str(cfg.algorithm.target_sd), "algorithm.target_sd")    # before anything is read
    role = EVAL_ROLES[method][0]
    ds = dataset_config(cfg, dataset, overrides)
    problems = load_problems(ds, cfg.eval_limit)
    manifests = {r: read_manifest(paths.model_manifest(r))["path"] for r in EVAL_ROLES[method]}
    tokenizer = load_tokenizer(manifests[role])
    if method == "target_sd":     # a tree too wide, another tokenizer: one line here, before any model loads
        generate = speculative_generator(cfg, manifests["draft"], manifests["target"])
    else:
        generate = plain_generator(cfg, role, manifests[role], tokenizer)
    torch.manual_seed(cfg.seed)
    rows = []
    bar = progress(problems, desc=f"evaluate {dataset}/{method}", unit="problem")
    for prob in bar:
        prompt = format_prompt(cfg.models.prompt, prob.question, tokenizer)
        t0 = time.perf_counter()
        text, n_out = generate(prompt)
        wall = time.perf_counter() - t0
        ok = grade(text, prob.answer)
        rows.append(dict(run=cfg.name, experiment=cfg.experiment, models=cfg.models.name, dataset=dataset,
                         method=method, problem_id=prob.id, answer=prob.answer, prediction=last_boxed(text),
                         correct=ok, output=text, prompt_tokens=len(tokenizer(prompt)["input_ids"]),
                         output_tokens=n_out, wall_s=wall))
        bar.set_postfix(acc=f"{100 * sum(r['correct'] for r in rows) / len(rows):.1f}%")
    write_parquet(rows, out, EVALUATION_SCHEMA)
    acc = 100 * sum(r["correct"] for r in rows) / max(1, len(rows))
    log.info("%s/%s: %.1f%% of %d problems correct -> %s", dataset, method, acc, len(rows), out)
    return rows


def plain_generator(cfg, role: str, path: str, tokenizer):
    """prompt -> (text, tokens): greedy decoding with one model."""
    from heterospec.models.generate import greedy_generate
    from heterospec.models.loading import load_causal_lm

    model = load_causal_lm(path, device=cfg.system.torch_devices[role], dtype=cfg.models[role].dtype)
    return lambda prompt: greedy_generate(model, tokenizer, prompt, cfg.eval_max_new_tokens)


def speculative_generator(cfg, draft_path: str, target_path: str):
    """prompt -> (text, tokens): the target's greedy decoding by token-level speculation with the draft (strategy
    ``algorithm.target_sd``, knobs from ``token_speculation``), both on the target's device; the strategy starts afresh per
    problem, as in a collect run."""
    from omegaconf import OmegaConf

    from heterospec.speculative.decoder import SpeculativeDecoder, load_pair
    from heterospec.speculative.stepwise import speculative_recipe
    from heterospec.speculative.strategies import make_strategy

    recipe = speculative_recipe(cfg, str(cfg.algorithm.target_sd), "algorithm.target_sd", draft_path, target_path)
    device = str(cfg.system.torch_devices["target"])
    pair = load_pair(draft_path, target_path, cfg.models.target.dtype, (device, device))
    decoder = SpeculativeDecoder(pair, 0.0, cfg.seed, recipe.draft_decoder)
    knobs = OmegaConf.create(recipe.knobs)

    def generate(prompt: str) -> tuple[str, int]:
        ids = pair.tokenizer(prompt)["input_ids"]
        new, _ = decoder.generate(ids, make_strategy(recipe.strategy, knobs, recipe.lanes), cfg.eval_max_new_tokens)
        return pair.tokenizer.decode(new, skip_special_tokens=True), len(new)
    return generate


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.evaluate", "Draft-only / target-only greedy decoding (target_sd: token-level speculation) on a dataset.")
    p.add_argument("--dataset", required=True, help="a dataset config name (synthetic, math500, ...)")
    p.add_argument("--method", required=True, choices=EVAL_METHODS)
    p.add_argument("--out", type=Path)
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    evaluate(cfg, paths, args.dataset, args.method, args.overrides, args.out or paths.evaluation(args.dataset, args.method))


if __name__ == "__main__":
    stage.run(main)
