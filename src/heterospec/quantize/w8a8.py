"""SmoothQuant-style W8A8 quantisation of a Qwen2 causal LM, exported as int8 safetensors + a JSON manifest.

Weights: per-output-channel symmetric int8. Activations: per-token dynamic int8 (computed at run time, see
:mod:`heterospec.quantize.model`). Smoothing moves activation outliers into the weights, per input channel j:

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)        X <- X / s,  W <- W * s

folded where it costs nothing at run time: q/k/v and gate/up take it into the RMSNorm weight before them,
down takes it into the rows of up (h = silu(gate) * up is linear in up). o_proj is not smoothed: with
grouped-query attention one v channel feeds several heads' o_proj inputs, so no per-channel fold exists.
The LM head is the (tied) embedding table quantised per row, so one int8 table serves both.
V is stored with a static per-(layer, kv-head) scale calibrated on the same prompts (K is per token).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch

from heterospec.manifests import digest_files, portable, rebuild_command, verify
from heterospec.errors import UserError
from heterospec.quantize.intmath import ACT_MAX, EXP2_POLY

FORMAT = "heterospec-w8a8/v1"
WEIGHTS_FILE = "weights.safetensors"
MANIFEST_FILE = "quantized.json"


def check_supported(config: Any) -> dict:
    """The architecture numbers the quantiser and the HLS generator need; one line if unsupported."""
    archs = list(getattr(config, "architectures", None) or [])
    mtype = getattr(config, "model_type", "?")
    if mtype != "qwen2" or (archs and archs[0] != "Qwen2ForCausalLM"):
        raise UserError(f"model type {mtype!r} ({', '.join(archs) or 'no architectures'}) is not supported by the "
                        f"W8A8 quantiser / HLS generator; it supports Qwen2ForCausalLM (Qwen2 / Qwen2.5 decoders)")
    if getattr(config, "hidden_act", "silu") != "silu":
        raise UserError(f"hidden_act {config.hidden_act!r} is not supported (the generator implements SiLU)")
    if getattr(config, "use_sliding_window", False):
        raise UserError("sliding-window attention is not supported by the generator (use_sliding_window=true)")
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise UserError(f"RoPE type {rope.get('rope_type')!r} is not supported (the generator implements plain RoPE)")
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if heads % kv:
        raise UserError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}")
    return {
        "hidden": int(config.hidden_size), "layers": int(config.num_hidden_layers), "heads": int(heads),
        "kv_heads": int(kv), "head_dim": int(head_dim), "intermediate": int(config.intermediate_size),
        "vocab": int(config.vocab_size), "tied": bool(getattr(config, "tie_word_embeddings", False)),
        "rms_norm_eps": float(config.rms_norm_eps),
        "rope_theta": float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))),
        "max_positions": int(config.max_position_embeddings),
    }


@torch.no_grad()
def calibrate(model, token_batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-input-channel |max| of every smoothed linear's input, and per-kv-head |max| of v, over the batches."""
    stats: dict[str, torch.Tensor] = {}
    hooks = []

    def keep(name: str, value: torch.Tensor) -> None:
        stats[name] = torch.maximum(stats[name], value) if name in stats else value

    kv, d = model.config.num_key_value_heads, model.config.hidden_size // model.config.num_attention_heads
    d = getattr(model.config, "head_dim", None) or d
    for i, layer in enumerate(model.model.layers):
        for name, mod in (("qkv", layer.self_attn.q_proj), ("gate_up", layer.mlp.gate_proj),
                          ("down", layer.mlp.down_proj)):
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out, key=f"{i}.{name}": keep(key, inp[0].detach().abs().flatten(0, -2).amax(0).float())))
        hooks.append(layer.self_attn.v_proj.register_forward_hook(
            lambda m, inp, out, key=f"{i}.v": keep(key, out.detach().abs().unflatten(-1, (kv, d)).flatten(0, -3)
                                                      .amax(dim=(0, 2)).float())))
    try:
        for ids in token_batches:
            model(input_ids=ids.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return stats


def smoothing(act_max: torch.Tensor, weights: list[torch.Tensor], alpha: float) -> torch.Tensor:
    """SmoothQuant's per-input-channel factors for the linears that share one input."""
    w_max = torch.cat([w.abs().float() for w in weights], dim=0).amax(dim=0).clamp(min=1e-5)
    s = act_max.clamp(min=1e-5).double() ** alpha / w_max.double() ** (1 - alpha)
    return s.clamp(min=1e-5).float()


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (int8 [O, K], float32 scale [O])."""
    w = w.float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax, torch.ones_like(amax)) / ACT_MAX
    return torch.clamp(torch.round(w / scale[:, None]), -ACT_MAX, ACT_MAX).to(torch.int8), scale


def rope_tables(theta: float, head_dim: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [positions, head_dim] in the rotate-half layout, computed in float64, rounded once."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=1)
    return ang.cos().float(), ang.sin().float()


@torch.no_grad()
def quantize_model(model, token_batches: list[torch.Tensor], alpha: float, rope_positions: int,
                   log: Callable[[str], None] = print) -> tuple[dict[str, torch.Tensor], dict]:
    """Calibrate, smooth and quantise ``model``: (tensors for safetensors, manifest fields)."""
    arch = check_supported(model.config)
    t0 = time.time()
    stats = calibrate(model, token_batches)
    log(f"[quantize] calibrated on {sum(b.numel() for b in token_batches)} tokens ({time.time() - t0:.1f}s)")
    t: dict[str, torch.Tensor] = {}
    emb = model.model.embed_tokens.weight
    t["embed.weight"], t["embed.scale"] = quantize_weight(emb)
    if not arch["tied"]:
        t["lm_head.weight"], t["lm_head.scale"] = quantize_weight(model.lm_head.weight)
    t["norm.weight"] = model.model.norm.weight.float().clone()
    smooth_max = []
    for i, layer in enumerate(model.model.layers):
        att, mlp = layer.self_attn, layer.mlp
        qkv = [att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]
        s = smoothing(stats[f"{i}.qkv"], qkv, alpha)
        t[f"layers.{i}.attn_norm"] = layer.input_layernorm.weight.float() / s
        t[f"layers.{i}.qkv.weight"], t[f"layers.{i}.qkv.scale"] = quantize_weight(torch.cat(qkv, 0).float() * s)
        t[f"layers.{i}.qkv.bias"] = torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]).float()
        t[f"layers.{i}.o.weight"], t[f"layers.{i}.o.scale"] = quantize_weight(att.o_proj.weight)
        s2 = smoothing(stats[f"{i}.gate_up"], [mlp.gate_proj.weight, mlp.up_proj.weight], alpha)
        s3 = smoothing(stats[f"{i}.down"], [mlp.down_proj.weight], alpha)
        t[f"layers.{i}.mlp_norm"] = layer.post_attention_layernorm.weight.float() / s2
        up = mlp.up_proj.weight.float() / s3[:, None]
        t[f"layers.{i}.gate_up.weight"], t[f"layers.{i}.gate_up.scale"] = quantize_weight(
            torch.cat([mlp.gate_proj.weight.float(), up], 0) * s2)
        t[f"layers.{i}.down.weight"], t[f"layers.{i}.down.scale"] = quantize_weight(mlp.down_proj.weight.float() * s3)
        vmax = stats[f"{i}.v"]
        t[f"layers.{i}.v_scale"] = torch.where(vmax > 0, vmax, torch.ones_like(vmax)) / ACT_MAX
        smooth_max.append(float(max(s.max(), s2.max(), s3.max())))
    positions = min(arch["max_positions"], rope_positions)
    t["rope.cos"], t["rope.sin"] = rope_tables(arch["rope_theta"], arch["head_dim"], positions)
    t = {k: v.contiguous().cpu() for k, v in t.items()}
    int8_bytes = sum(v.numel() for k, v in t.items() if v.dtype == torch.int8)
    info = {"format": FORMAT, "arch": arch, "alpha": alpha, "rope_positions": positions,
            "calibration_tokens": int(sum(b.numel() for b in token_batches)),
            "int8_weight_bytes": int(int8_bytes),
            "float_bytes": int(sum(v.numel() * 4 for v in t.values() if v.dtype == torch.float32)),
            "numerics": {"weights": "int8 per output channel, symmetric", "activations": "int8 per token, dynamic",
                         "k_cache": "int8 per token and kv head, dynamic", "v_cache": "int8, static per kv head",
                         "softmax_weight_one": 32767, "rms_statistic": "int16 per token, int64 sum",
                         "exp2_poly": [float(c).hex() for c in EXP2_POLY]},
            "max_smoothing_factor": max(smooth_max) if smooth_max else 1.0}
    return t, info


def save_export(out_dir: Path, tensors: dict[str, torch.Tensor], info: dict, source: str | Path,
                tokenizer, tree: str | Path | None = None) -> Path:
    """Write weights, manifest, the source's config.json and the tokenizer into ``out_dir`` (atomically). The
    manifest lists every other file with its size and sha256, and records ``source`` relative to ``out_dir`` when
    both lie in the results ``tree``."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": FORMAT})
    src_cfg = Path(source) / "config.json"
    if src_cfg.is_file():
        shutil.copy(src_cfg, tmp / "config.json")
    tokenizer.save_pretrained(str(tmp))
    recorded = portable(source, out_dir, tree) if tree is not None else str(source)
    files = digest_files(tmp, skip=(MANIFEST_FILE,))
    (tmp / MANIFEST_FILE).write_text(json.dumps({**info, "source": recorded, "files": files}, indent=2,
                                                sort_keys=True))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def load_export(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, manifest) of an export directory, its files checked against the manifest's sizes and sha256; one
    clear line when it is missing, damaged or not ours."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    man = path / MANIFEST_FILE
    if not man.is_file() or not (path / WEIGHTS_FILE).is_file():
        raise UserError(f"{path}: not a W8A8 export (no {MANIFEST_FILE} / {WEIGHTS_FILE}); run the quantize stage")
    info = json.loads(man.read_text())
    if info.get("format") != FORMAT:
        raise UserError(f"{man}: format {info.get('format')!r}, expected {FORMAT!r}")
    rebuild = f"{rebuild_command(man)} (or python -m heterospec.quantize with the run's overrides)"
    verify(path, info.get("files"), rebuild)
    try:
        return load_file(str(path / WEIGHTS_FILE)), info
    except SafetensorError as e:  # an export written before manifests listed its files
        raise UserError(f"{path / WEIGHTS_FILE}: damaged ({str(e).splitlines()[0]}); rebuild it: {rebuild}") from None


def accumulator_bound(k: int) -> float:
    """Largest |int8 x int8| dot product over ``k`` terms."""
    return k * ACT_MAX * ACT_MAX + 1
