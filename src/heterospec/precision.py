"""Bytes per weight and per KV-cache element for each precision: the one table the replay's roofline and the HLS
performance model both price memory traffic with.

``int8`` is the W8A8 draft as the FPGA kernel and its torch twin store it (hls/templates/draft_kernel.cpp,
quantize/model.py ``Int8Cache``): int8 weights with an fp32 scale per output row, int8 K with an fp32 scale per
token and KV head, int8 V with a static per-head scale (not per token, so not counted per token).
"""
from __future__ import annotations

from heterospec.errors import UserError

DTYPE_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}   # a model config's torch dtype
WEIGHT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}     # per weight (int8's row scales: the HLS model's)
KV_ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}  # per K or V element
KV_SCALE_BYTES = {"fp32": 0, "fp16": 0, "bf16": 0, "int8": 4}    # per token and KV head: int8 K's fp32 scale
KV_BITS = {16: "fp16", 8: "int8"}                                 # hls.pipeline.kv_bits -> precision


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, precision: str) -> int:
    """K and V of one token over every layer and KV head, with int8 K's per-token scales."""
    if precision not in KV_ELEMENT_BYTES:
        raise UserError(f"KV-cache precision '{precision}': expected one of {sorted(KV_ELEMENT_BYTES)}")
    return layers * kv_heads * (2 * head_dim * KV_ELEMENT_BYTES[precision] + KV_SCALE_BYTES[precision])
