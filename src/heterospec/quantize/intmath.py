"""The numerics of the W8A8 draft, defined once so torch and the generated C++ compute the same bits.

Where the design is integer (exact, order-free, so any summation order gives the same bits):

* every linear layer: int8 activations x int8 weights -> int32 accumulators;
* the attention scores: int8 q x int8 k -> int32; the attention output: 15-bit softmax weights x int8 v
  -> int64, and the softmax denominator as an int64 sum of those weights;
* the RMSNorm statistic: sum of squares of the residual quantised to int16 per token -> int64.

Where it is float32, only element-wise IEEE operations appear (+ - * /, sqrt, floor, min/max; never a
fused multiply-add, never a float reduction), each written in one fixed order below and in the C++
templates (sqrt through :func:`sqrt_ieee`: ``torch.sqrt`` is not correctly rounded on every CPU):
dequantisation ``(float(acc) * a) * w_scale (+ bias)``, RoPE with tables computed in float64
and rounded once, the residual adds, SiLU, and ``exp`` as a polynomial in the basic operations
(:func:`exp_det`). Reductions over floats are only ``max``, which is exact. The same inputs therefore give
the same bits on any IEEE machine, which is what makes the C simulation bit-exact.
"""
from __future__ import annotations

import numpy as np
import torch

# 2^f on [0, 1): degree-6 least-squares fit on Chebyshev nodes, rounded to float32 (max rel. error 8.2e-8)
EXP2_POLY = tuple(float.fromhex(h) for h in (
    "0x1.cacdf6p-13", "0x1.44bd44p-10", "0x1.3d5826p-7", "0x1.c67ee4p-5",
    "0x1.ebfdf8p-3", "0x1.62e428p-1", "0x1.0p+0"))
LOG2E = float(torch.tensor(1.4426950408889634, dtype=torch.float32))
EXP_LO, EXP_HI = -87.0, 88.0          # 2^n stays a normal float32 for n in [-126, 126]
ACT_MAX = 127.0                       # symmetric int8: [-127, 127]
STAT_MAX = 32767.0                    # int16 residual for the RMSNorm statistic
SOFTMAX_ONE = 32767.0                 # exp(0) as a 15-bit fixed-point softmax weight

_F32 = torch.float32


def f32(x: float) -> float:
    """``x`` rounded to float32 (the value the C++ literal holds)."""
    return float(torch.tensor(x, dtype=_F32))


def exp_det(x: torch.Tensor) -> torch.Tensor:
    """exp(x) from basic float32 operations: 2^n by exponent bits, 2^f by Horner's rule."""
    x = torch.clamp(x, EXP_LO, EXP_HI)
    t = x * torch.tensor(LOG2E, dtype=_F32)
    n = torch.floor(t)
    f = t - n
    p = torch.full_like(f, EXP2_POLY[0])
    for c in EXP2_POLY[1:]:
        p = p * f
        p = p + torch.tensor(c, dtype=_F32)
    two_n = ((n.to(torch.int32) + 127) << 23).view(_F32)
    return p * two_n


def quantize_rows(x: torch.Tensor, qmax: float = ACT_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row (last dim) quantisation: (integer-valued float32 q, scale [...])."""
    amax = x.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax, torch.ones_like(amax)) / torch.tensor(qmax, dtype=_F32)
    q = torch.clamp(torch.round(x / scale.unsqueeze(-1)), -qmax, qmax)
    return q, scale


def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 with a fixed scale (broadcast against ``x``), clamped to [-127, 127]."""
    return torch.clamp(torch.round(x / scale), -ACT_MAX, ACT_MAX)


def int_matmul(a: torch.Tensor, b_t: torch.Tensor, bound: float) -> torch.Tensor:
    """Exact ``a @ b_t.T`` of integer-valued tensors whose every partial sum is below ``bound``.

    Float32 BLAS is exact while every partial sum stays under 2^24 (on CPU); float64 under 2^53.
    Returns an integer-valued float64 tensor.
    """
    if bound < 2 ** 24 and a.device.type == "cpu":
        return (a.to(_F32) @ b_t.to(_F32).transpose(-1, -2)).to(torch.float64)
    if bound >= 2 ** 53:
        raise ValueError(f"accumulator bound {bound:.3g} exceeds float64's exact range")
    return a.to(torch.float64) @ b_t.to(torch.float64).transpose(-1, -2)


def sqrt_ieee(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 square root. ``torch.sqrt`` on CPU may be off by one ulp (a vectorised
    approximation); numpy's float32 sqrt is the IEEE operation, as is C's ``std::sqrt``."""
    # asarray: numpy returns a scalar, not an array, for a 0-dim input
    return torch.from_numpy(np.asarray(np.sqrt(x.detach().to("cpu", _F32).numpy()))).to(x.device)


def norm_scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1/rms(x) per row from the int16 statistic: r = 1 / sqrt(((float(ss) * s16) * s16) / H + eps)."""
    x16, s16 = quantize_rows(x, STAT_MAX)
    ss = (x16.to(torch.int64) ** 2).sum(dim=-1)                    # exact
    var = ((ss.to(_F32) * s16) * s16) / torch.tensor(float(x.shape[-1]), dtype=_F32)
    return torch.tensor(1.0, dtype=_F32) / sqrt_ieee(var + torch.tensor(eps, dtype=_F32))


def silu(g: torch.Tensor) -> torch.Tensor:
    """g / (1 + exp(-g)), with :func:`exp_det`."""
    return g / (torch.tensor(1.0, dtype=_F32) + exp_det(-g))
