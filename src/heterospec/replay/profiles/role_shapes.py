"""Model shapes for hardware-derived latency: parameters, bytes read per forward pass, FLOPs, KV bytes per token.

Qwen2-architecture decoders only (the tiny trio and the Qwen2.5 family). A shape comes from a checkpoint's
``config.json`` when one is at hand, else from the published shapes (:mod:`heterospec.shapes`, no weights needed), else from the
run's ``ArchConfig`` for a model trained here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from heterospec.errors import UserError
from heterospec.precision import DTYPE_PRECISION
from heterospec.shapes import PUBLISHED, ModelShape, published_shape



def _published(path: str) -> ModelShape | None:
    return published_shape(Path(path).name)


def from_hf_config(config: dict, name: str) -> ModelShape:
    """From a checkpoint's config.json (Qwen2 keys)."""
    try:
        archs = config.get("architectures") or []
        head = "prm" if any("ProcessRewardModel" in a for a in archs) else \
            "token_cls" if any("TokenClassification" in a for a in archs) else "lm"
        return ModelShape(name, int(config["hidden_size"]), int(config["num_hidden_layers"]),
                          int(config["num_attention_heads"]),
                          int(config.get("num_key_value_heads") or config["num_attention_heads"]),
                          int(config["intermediate_size"]), int(config["vocab_size"]),
                          bool(config.get("tie_word_embeddings", False)), head)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{name}: config.json lacks a Qwen2 shape field ({e})") from None


def model_shape(role: str, role_cfg: Any, checkpoint: str | Path | None = None) -> ModelShape:
    """The shape of one role's model: its checkpoint's config.json, the published shape of a hub id, or (a model
    trained here) its ArchConfig with the character tokenizer's vocabulary."""
    candidates = []
    if checkpoint is not None:
        candidates.append(Path(checkpoint) / "config.json")
    if role_cfg.source == "hub" and role_cfg.path:
        candidates.append(Path(role_cfg.path) / "config.json")
    for c in candidates:
        if c.is_file():
            return from_hf_config(json.loads(c.read_text()), str(c.parent))
    if role_cfg.source == "hub":
        shape = _published(role_cfg.path)
        if shape is None:
            raise UserError(f"models.{role}.path '{role_cfg.path}': shape unknown; point it at a local checkpoint "
                            f"with a config.json (published shapes: {sorted(PUBLISHED)})")
        return shape
    from heterospec.models.tokenizer import CHARS, SPECIALS   # the tiny trio's vocabulary
    a = role_cfg.arch
    return ModelShape(f"tiny-{role}", a.hidden_size, a.num_hidden_layers, a.num_attention_heads,
                      a.num_key_value_heads, a.intermediate_size, len(SPECIALS) + len(CHARS), tied=True,
                      head="token_cls" if role == "prm" else "lm")


def precision(role: str, role_cfg: Any) -> str:
    """fp32 / fp16 / bf16 from the role's dtype, or int8 for the W8A8 export (``quantized``)."""
    if getattr(role_cfg, "quantized", False):
        return "int8"
    try:
        return DTYPE_PRECISION[role_cfg.dtype]
    except KeyError:
        raise UserError(f"models.{role}.dtype '{role_cfg.dtype}': expected one of {sorted(DTYPE_PRECISION)}") from None
