"""The quantize stage on the session's tiny ci draft: export, loader interface, integer exactness, quality report,
and one-line errors for unsupported models."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from conftest import QUANTIZED, run_cmd
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.models.generate import greedy_generate, greedy_generate_batch
from heterospec.models.loading import load_tokenizer
from heterospec.quantize import load_quantized_draft
from heterospec.quantize.intmath import exp_det, int_matmul, sqrt_ieee
from heterospec.quantize.w8a8_quality import QUANTIZE_QUALITY_SCHEMA
from heterospec.quantize.w8a8 import check_supported
from heterospec.store import read_parquet
from heterospec.tasks.synthetic import format_prompt, held_out_problems

CI = QUANTIZED     # the session's quantize run: experiment=ci, eval_limit=12, quantize.calibration_prompts=8


def test_export_loads_as_a_causal_lm_and_generates(ci_quantized):
    cfg, paths, _ = ci_quantized
    export = paths.quantized_draft.parent
    assert {p.name for p in export.iterdir()} >= {"weights.safetensors", "quantized.json", "config.json"}
    model, tok = load_quantized_draft(export), load_tokenizer(export)
    assert model.embed.dtype == torch.int8 and model.layers[0].qkv.weight.dtype == torch.int8
    p = held_out_problems(compose_config(CI).dataset.generator, 3)
    text, n = greedy_generate(model, tok, format_prompt(p[0].question), 40)   # the workflow's own decoder
    assert 0 < n <= 40
    # left-padded batches give the same tokens as one prompt at a time (integer attention ignores the pads)
    batch = greedy_generate_batch(model, tok, [format_prompt(q.question) for q in p], 40)
    assert batch[0] == (text, n)
    assert [greedy_generate(model, tok, format_prompt(q.question), 40) for q in p] == batch
    ids = torch.tensor([tok(format_prompt(p[1].question))["input_ids"]])
    assert model.generate(ids, max_new_tokens=5).shape == (1, ids.shape[1] + 5)


def test_quality_report_row(ci_quantized):
    cfg, paths, row = ci_quantized
    t = read_parquet(paths.quantize_quality, QUANTIZE_QUALITY_SCHEMA).to_pylist()[0]
    assert t["problems"] == 12 and t["calibration_prompts"] == 8 and t["alpha"] == 0.5
    assert abs(t["accuracy_drop"] - (t["accuracy_fp"] - t["accuracy_int8"])) < 1e-9
    assert t["top1_agreement"] > 90.0                     # int8 picks the fp draft's greedy token almost always
    assert abs(t["ppl_change_pct"]) < 5.0
    assert t["int8_weight_bytes"] * 3.5 < t["fp_weight_bytes"]


def test_integer_parts_are_exact():
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.integers(-127, 128, (5, 900)), dtype=torch.float32)
    w = torch.tensor(rng.integers(-127, 128, (7, 900)), dtype=torch.int8)
    exact = a.to(torch.int64) @ w.to(torch.int64).T
    assert torch.equal(int_matmul(a, w, 900 * 127 * 127 + 1).to(torch.int64), exact)
    big = torch.tensor(rng.integers(-127, 128, (2, 5000)), dtype=torch.float32)
    wb = torch.tensor(rng.integers(-127, 128, (3, 5000)), dtype=torch.int8)
    assert torch.equal(int_matmul(big, wb, 5000 * 127 * 127 + 1).to(torch.int64),
                       big.to(torch.int64) @ wb.to(torch.int64).T)
    x = torch.linspace(-80, 20, 10001)
    assert torch.allclose(exp_det(x).double(), torch.exp(x.double()), rtol=1e-5, atol=0)   # |x| * 2^-24 from x * log2(e)
    v = torch.rand(100000) * 10
    want = torch.tensor([float(np.float32(np.sqrt(np.float64(t)))) for t in v.tolist()])
    assert torch.equal(sqrt_ieee(v), want)                 # correctly rounded, unlike torch.sqrt on some CPUs


def test_unsupported_architecture_is_one_line():
    from transformers import LlamaConfig
    with pytest.raises(UserError) as e:
        check_supported(LlamaConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, intermediate_size=64))
    assert "llama" in str(e.value) and "Qwen2ForCausalLM" in str(e.value) and "\n" not in str(e.value)


def test_missing_draft_is_one_line(tmp_path):
    r = run_cmd([sys.executable, "-m", "heterospec.quantize", "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "manifest not found" in r.stderr
