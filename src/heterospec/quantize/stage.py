"""The ``quantize`` stage: W8A8 the draft, export it, and report what it costs in accuracy.

    python -m heterospec.quantize experiment=ci
    python -m heterospec.quantize models=config1 models.draft.path=/data/Qwen2.5-0.5B-Instruct quantize.alpha=0.5

Writes ``results/<run>/quantize/draft/`` (weights.safetensors, quantized.json, config.json, tokenizer) and
``results/<run>/quantize/quality.parquet``. ``quantized.json`` lists the export's files with their sizes and sha256,
checked on every load. ``heterospec.quantize.load_quantized_draft`` loads the export.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from heterospec import stage
from heterospec.config import dataset_config
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.quantize.w8a8 import MANIFEST_FILE
from heterospec.store import read_parquet, write_parquet

log = logging.getLogger("heterospec.quantize")


def quantize_draft(cfg, paths: RunPaths, overrides: list[str], out: Path, quality_out: Path,
                   manifest: Path | None = None) -> dict:
    """Quantise the run's draft (export manifest ``out``, in its own folder); write its quality row."""
    from heterospec.models.loading import load_causal_lm, load_tokenizer
    from heterospec.models.prompts import format_prompt
    from heterospec.models.role_manifest import read_manifest
    from heterospec.quantize.model import load_quantized_draft
    from heterospec.quantize.w8a8_quality import QUANTIZE_QUALITY_SCHEMA, compare, print_quality
    from heterospec.quantize.w8a8 import quantize_model, save_export
    from heterospec.tasks.synthetic import generate_problems, held_out_problems

    q = cfg.quantize
    t0 = time.time()
    out_dir = Path(out).parent
    if Path(out).name != MANIFEST_FILE:
        raise UserError(f"--out {out}: name the export's manifest, <folder>/{MANIFEST_FILE}")
    src = read_manifest(manifest or paths.model_manifest("draft"))["path"]
    device = cfg.system.torch_devices["draft"]
    model = load_causal_lm(src, device=device, dtype="float32", role="draft")
    tok = load_tokenizer(src, "draft")
    synthetic = dataset_config(cfg, "synthetic", overrides)
    style = cfg.models.prompt
    calib = generate_problems(synthetic.generator, q.calibration_prompts, q.calibration_seed)
    batches = [torch.tensor([tok(format_prompt(style, p.question, tok) + p.solution)["input_ids"]]) for p in calib]
    log.info("calibrating on %d synthetic prompts (alpha %s)", len(batches), q.alpha)
    tensors, info = quantize_model(model, batches, float(q.alpha), int(q.rope_positions))
    info["calibration_prompts"] = int(q.calibration_prompts)
    save_export(out_dir, tensors, info, src, tok, paths.root.parent)
    log.info("W8A8 export: %s (%s int8 weight bytes)", out_dir, f"{info['int8_weight_bytes']:,}")

    n = q.eval_problems if q.eval_problems > 0 else (synthetic.limit if cfg.eval_limit < 0
                                                      else min(cfg.eval_limit, synthetic.limit))
    problems = held_out_problems(synthetic.generator, n)
    qmodel = load_quantized_draft(out_dir, device)
    res = compare(model, qmodel, tok, problems, [format_prompt(style, p.question, tok) for p in problems],
                  int(q.max_new_tokens))
    row = dict(run=cfg.name, experiment=cfg.experiment, models=cfg.models.name, alpha=float(q.alpha),
               calibration_prompts=int(q.calibration_prompts), problems=n, **res,
               int8_weight_bytes=info["int8_weight_bytes"],
               fp_weight_bytes=4 * sum(p.numel() for p in model.parameters()),
               meets_bar=res["accuracy_drop"] <= float(q.max_accuracy_drop))
    row["wall_s"] = time.time() - t0
    write_parquet([row], quality_out, QUANTIZE_QUALITY_SCHEMA)
    print_quality(read_parquet(quality_out, QUANTIZE_QUALITY_SCHEMA).to_pylist()[0])
    return row


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.quantize", "W8A8 quantisation of the draft, its export and quality report.")
    p.add_argument("--draft", type=Path, help="the draft's model manifest (default: results/<run>/models/draft/)")
    p.add_argument("--out", type=Path, help="export manifest (default: results/<run>/quantize/draft/quantized.json)")
    p.add_argument("--quality", type=Path, help="quality table (default: results/<run>/quantize/quality.parquet)")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    # one intra-op thread, as the job's one core: on the tiny draft a second thread only spins
    # (quantising the ci draft took 24 s of CPU with two threads, 0.3 s with one)
    torch.set_num_threads(1)
    quantize_draft(cfg, paths, args.overrides, args.out or paths.quantized_draft, args.quality or paths.quantize_quality,
                   args.draft)
