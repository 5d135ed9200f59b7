"""Model shapes for hardware-derived latency: parameters, bytes read per forward pass, FLOPs, KV bytes per token.

Qwen2-architecture decoders only (the tiny trio and the Qwen2.5 family). A shape comes from a checkpoint's
``config.json`` when one is at hand, else from the published shapes below (no weights needed), else from the
run's ``ArchConfig`` for a model trained here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heterospec.errors import UserError
from heterospec.precision import kv_bytes_per_token

DTYPE_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class ModelShape:
    """A Qwen2 decoder's shape; ``head`` is what sits on the last hidden state."""
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = True            # LM head shares the embedding matrix
    head: str = "lm"             # lm: vocab logits | prm: Qwen2.5-Math-PRM score head | token_cls: Linear(h, 2)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        h, kvd = self.hidden, self.kv_heads * self.head_dim
        attn = 2 * h * h + 2 * h * kvd + h + 2 * kvd        # q, o; k, v; q/k/v biases
        return attn + 3 * h * self.intermediate + 2 * h     # gate, up, down; two RMSNorms

    @property
    def head_params(self) -> int:
        h = self.hidden
        if self.head == "prm":                              # Linear(h, h) -> ReLU -> Linear(h, 2)
            return h * h + h + 2 * h + 2
        if self.head == "token_cls":
            return 2 * h
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.vocab * self.hidden + self.layers * self.layer_params + self.hidden + self.head_params

    @property
    def matmul_params(self) -> int:
        """Weights every token multiplies by: the layers and the head (a tied LM head reads the embedding)."""
        head = self.vocab * self.hidden if (self.head == "lm" and self.tied) else self.head_params
        return self.layers * self.layer_params + head

    def kv_bytes_per_token(self, precision: str) -> int:
        """K and V of one token over all layers, in the model's precision (:mod:`heterospec.precision`)."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, precision)

    @property
    def attn_flops_per_ctx(self) -> int:
        """FLOPs one new token spends per context token: QK^T and AV over every layer's query heads."""
        return 4 * self.layers * self.heads * self.head_dim


# Published config.json shapes of the paper's models (Hugging Face ids, case-insensitive).
PUBLISHED = {
    "qwen2.5-0.5b": ModelShape("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, tied=True),
    "qwen2.5-1.5b": ModelShape("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, tied=True),
    "qwen2.5-7b": ModelShape("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, tied=False),
    "qwen2.5-math-prm-7b": ModelShape("Qwen2.5-Math-PRM-7B", 3584, 28, 28, 4, 18944, 152064, tied=False, head="prm"),
}


def _published(path: str) -> ModelShape | None:
    key = Path(path).name.lower().removesuffix("-instruct")
    return PUBLISHED.get(key)


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
