"""The ``roofline`` latency profile: each call's time from the device's datasheet and the model's shape.

One forward pass over ``n`` new tokens with ``kv`` tokens already cached reads every weight once and the KV cache
of ``kv + n`` tokens, and computes ``2 * matmul_params`` FLOPs per token plus attention over its context:

    pass(kv, n) = max(bytes / bandwidth, FLOPs / peak) + call_overhead

Decode is one pass per token (memory-bound at batch 1); prefill, PRM scoring and the target's re-read of its
context are one pass over many tokens (compute-bound). Precision: the role's dtype, or int8 for a W8A8 export
(``quantized``); a draft on an FPGA is always the W8A8 design (the HLS kernel is int8), and T1's prefill of the
draft's prompt on the target GPU runs the draft's own dtype. Per-token sums are in closed form: bytes and FLOPs are both
linear in the context length, so their maximum switches side at most once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from heterospec.config.hardware import ROLES, Device, System
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.precision import WEIGHT_BYTES
from heterospec.replay.profiles.role_shapes import ModelShape, model_shape, precision

# Fixed cost of one forward pass by device kind (ms): kernel launches / the FPGA's command queue. Assumed, not
# measured; overridable per kind in the replay config (replay.call_overhead_ms).
CALL_OVERHEAD_MS = {"gpu": 0.03, "fpga": 0.01, "cpu": 0.05, "soc": 0.05}


@dataclass(frozen=True)
class Roofline:
    """One model on one device: time of a forward pass over ``n`` new tokens after ``kv`` cached ones (ms)."""
    weight_ms: float        # all weights once / bandwidth
    kv_ms: float            # one token's KV bytes / bandwidth
    flop_ms: float          # one token's matmul FLOPs / peak
    attn_ms: float          # one token's attention FLOPs per context token / peak
    overhead_ms: float

    @classmethod
    def of(cls, shape: ModelShape, prec: str, hw: Device, overhead_ms: float, who: str) -> "Roofline":
        peak = hw.peak(prec, f"roofline profile for the {who} ({prec})")
        bw_bytes_ms, peak_flop_ms = hw.memory.bandwidth_gbs * 1e6, peak * 1e9   # per millisecond
        return cls(weight_ms=shape.matmul_params * WEIGHT_BYTES[prec] / bw_bytes_ms,
                   kv_ms=shape.kv_bytes_per_token(prec) / bw_bytes_ms,
                   flop_ms=2 * shape.matmul_params / peak_flop_ms,
                   attn_ms=shape.attn_flops_per_ctx / peak_flop_ms, overhead_ms=overhead_ms)

    def forward(self, kv: int, n: int) -> float:
        """One pass over ``n`` tokens: reads weights and the KV of kv + n tokens; attention over the causal triangle."""
        if n <= 0:
            return 0.0
        mem = self.weight_ms + self.kv_ms * (kv + n)
        comp = n * self.flop_ms + self.attn_ms * (n * kv + n * (n + 1) / 2)
        return max(mem, comp) + self.overhead_ms

    def batch_forward(self, batch: int, kv: float, n: float) -> float:
        """One pass over ``batch`` sequences of ``n`` new tokens after ``kv`` cached each: the weights are read once,
        every sequence's KV and compute are its own (:meth:`forward` at ``batch`` 1)."""
        if n <= 0:
            return 0.0
        mem = self.weight_ms + self.kv_ms * (kv + n) * batch
        comp = (n * self.flop_ms + self.attn_ms * (n * kv + n * (n + 1) / 2)) * batch
        return max(mem, comp) + self.overhead_ms

    def decode(self, kv: int, n: int) -> float:
        """``n`` single-token passes at contexts c = kv+1 .. kv+n: sum of max(a1 + b1 c, a2 + b2 c) + overhead."""
        if n <= 0:
            return 0.0
        a1, b1 = self.weight_ms, self.kv_ms
        a2, b2 = self.flop_ms, self.attn_ms
        lo, hi = kv + 1, kv + n
        total = n * self.overhead_ms
        if b1 == b2:
            return total + _linsum(max(a1, a2), b1, lo, hi)
        try:   # the context length where memory and compute time are equal
            cross = (a2 - a1) / (b1 - b2)
        except OverflowError:
            cross = math.inf if (a2 - a1) * (b1 - b2) > 0 else -math.inf
        mem_above = b1 > b2
        # contexts lo..split lie on the low side, split+1..hi on the high side
        split = lo - 1 if cross < lo else hi if cross >= hi else int(cross)
        low_mem, high_mem = (not mem_above), mem_above
        total += _linsum(a1 if low_mem else a2, b1 if low_mem else b2, lo, split)
        total += _linsum(a1 if high_mem else a2, b1 if high_mem else b2, split + 1, hi)
        return total


def _linsum(a: float, b: float, lo: int, hi: int) -> float:
    """sum_{c=lo..hi} (a + b c)."""
    if hi < lo:
        return 0.0
    k = hi - lo + 1
    return k * a + b * (lo + hi) * k / 2


class RooflineProfile(LatencyProfile):
    """Latency from the system's hardware configs and the run's models (shape and precision)."""

    context_includes_prompt = True

    def __init__(self, system: System, models: Any, overheads: dict | None = None, checkpoints: dict | None = None,
                 name: str = "roofline", prefix_cache: bool = True):
        self.name = name
        self.prefix_cache = prefix_cache
        over = {**CALL_OVERHEAD_MS, **(overheads or {})}
        self.shapes: dict[str, ModelShape] = {}
        self.devices: dict[str, Roofline] = {}
        for role in ROLES:
            hw = system.devices[role]
            shape = model_shape(role, models[role], (checkpoints or {}).get(role))
            prec = "int8" if (role == "draft" and hw.kind == "fpga") else precision(role, models[role])
            self.shapes[role] = shape
            self.devices[role] = Roofline.of(shape, prec, hw, over.get(hw.kind, 0.0), role)
            if role == "draft":
                self.draft_kv_bytes_per_token = shape.kv_bytes_per_token(prec)
                draft_shape = shape
        # T1's disaggregated prefill: the draft model's prompt prefill on the target's GPU, in the draft's own dtype
        self.draft_on_target = Roofline.of(draft_shape, precision("draft", models["draft"]), system.target,
                                           over.get(system.target.kind, 0.0), "draft's prefill")

    def draft_decode(self, kv: int, n: int) -> float:
        return self.devices["draft"].decode(kv, n)

    def draft_prefill(self, kv: int, n: int) -> float:
        return self.devices["draft"].forward(kv, n)

    def draft_prefill_disaggregated(self, n: int) -> float:
        return self.draft_on_target.forward(0, n)

    def prm_score(self, n: int, new: int | None = None) -> float:
        return self._read("prm", n, new)

    def target_prefill(self, kv: int, new: int | None = None) -> float:
        return self._read("target", kv, new)

    def _read(self, role: str, context: int, new: int | None) -> float:
        """One pass over the context's tokens not in the cache (all of them without a prefix cache)."""
        if not self.prefix_cache or new is None:
            return self.devices[role].forward(0, context)
        new = min(max(new, 0), context)
        return self.devices[role].forward(context - new, new)

    def target_decode(self, kv: int, g: int) -> float:
        return self.devices["target"].decode(kv, g)

    def target_verify(self, kv: int, n: int) -> float:
        return self.devices["target"].forward(kv, n)
