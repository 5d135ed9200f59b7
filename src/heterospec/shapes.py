"""Model shapes: a Qwen2 decoder's dimensions and what follows from them (parameters, KV bytes per token), and the
published shapes of the paper's models. The one place both the HLS performance model and the replay's roofline read
a model's shape from; no weights are needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from heterospec.precision import kv_bytes_per_token


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


def published_shape(name: str) -> ModelShape | None:
    """A published shape by Hugging Face id or name (case-insensitive; an ``-Instruct`` suffix is the same shape)."""
    return PUBLISHED.get(name.lower().removesuffix("-instruct"))
