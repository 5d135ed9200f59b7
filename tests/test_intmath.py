"""The W8A8 numerics at their limits, against exact references: int64 products, float64 math, hand-worked rows.

The all-127 product is the worst case of a real layer: with K = 1101 its sum 1101 * 127^2 = 17 758 029 is odd and
above 2^24, so float32 cannot even represent it; the float64 path must be taken (Qwen2.5's K is 896 to 4864)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from heterospec.quantize.intmath import (ACT_MAX, EXP_HI, EXP_LO, LOG2E, STAT_MAX, exp_det, f32, int_matmul, norm_scale,
                                         quantize_rows, quantize_static, silu, sqrt_ieee)
from heterospec.quantize.w8a8 import accumulator_bound


@pytest.mark.parametrize("k", [1040, 1041, 1101, 4864])
def test_all_127_product_is_exact_past_2_to_the_24(k):
    a = torch.full((2, k), 127.0)
    w = torch.full((3, k), 127, dtype=torch.int8)
    w[1] = -127
    got = int_matmul(a, w, accumulator_bound(k))
    assert got.dtype == torch.float64
    assert got[0].tolist() == [k * 16129, -k * 16129, k * 16129]


def test_the_float32_path_is_used_below_2_to_the_24_only():
    a = torch.full((1, 1040), 127.0)
    w = torch.full((1, 1040), 127.0)
    assert int_matmul(a, w, 2 ** 24 - 1).item() == 1040 * 16129          # float32 is exact here
    odd = torch.tensor([[2.0 ** 24 + 1, 1.0]], dtype=torch.float64)
    assert int_matmul(odd, torch.tensor([[1.0, 1.0]]), 2 ** 24).item() == 2 ** 24 + 2   # float64: exact
    with pytest.raises(ValueError, match="exceeds float64's exact range"):
        int_matmul(a, w, 2.0 ** 53)
    assert int_matmul(a, w, 2.0 ** 53 - 1).item() == 1040 * 16129


def test_quantize_rows_by_hand():
    q, s = quantize_rows(torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [-254.0, 127.0, 1.0]]))
    assert s.tolist() == pytest.approx([2 / 127, 1 / 127, 2.0])
    assert q.tolist() == [[64.0, -127.0, 32.0], [0.0, 0.0, 0.0], [-127.0, 64.0, 0.0]]   # round half to even: 63.5->64
    q16, s16 = quantize_rows(torch.tensor([[3.0, -1.5]]), STAT_MAX)
    assert q16.tolist() == [[32767.0, -16384.0]] and s16.item() == pytest.approx(3 / 32767)


def test_quantize_static_rounds_and_clamps():
    x = torch.tensor([0.24, 0.26, -0.26, 100.0, -100.0, 12.5])
    assert quantize_static(x, torch.tensor(0.5)).tolist() == [0.0, 1.0, -1.0, ACT_MAX, -ACT_MAX, 25.0]


def test_exp_det_against_float64_exp_and_its_clamps():
    x = torch.linspace(EXP_LO, EXP_HI, 20001)
    rel = (exp_det(x).double() - torch.exp(x.double())).abs() / torch.exp(x.double())
    assert rel.max().item() < 1.2e-5                                    # |x| * 2^-24 from rounding x * log2(e)
    small = torch.linspace(-1, 1, 2001)
    rel = (exp_det(small).double() - torch.exp(small.double())).abs() / torch.exp(small.double())
    assert rel.max().item() < 4e-7
    assert exp_det(torch.tensor([0.0])).item() == 1.0
    assert exp_det(torch.tensor([-1000.0])).item() == exp_det(torch.tensor([EXP_LO])).item() > 0
    assert exp_det(torch.tensor([1000.0])).item() == exp_det(torch.tensor([EXP_HI])).item() < math.inf
    assert LOG2E == f32(1 / math.log(2))


def test_sqrt_ieee_is_correctly_rounded():
    v = torch.tensor([2.0, 3.0, 1e-30, 1e30, 0.0, 0.5])
    want = [float(np.float32(math.sqrt(float(np.float32(t))))) for t in v.tolist()]
    assert sqrt_ieee(v).tolist() == want and sqrt_ieee(v).dtype == torch.float32


def test_norm_scale_against_float64_rms():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 64, generator=g) * torch.tensor([[0.01], [0.1], [1.0], [10.0], [100.0], [1000.0]])
    ref = 1 / torch.sqrt((x.double() ** 2).mean(-1) + 1e-6)
    got = norm_scale(x, 1e-6).double()
    assert torch.allclose(got, ref, rtol=2e-4, atol=0)
    assert norm_scale(torch.zeros(1, 8), 1e-6).item() == pytest.approx(1000.0, rel=1e-6)   # 1 / sqrt(eps)


def test_silu_against_float64():
    g = torch.linspace(-20, 20, 4001)
    ref = g.double() * torch.sigmoid(g.double())
    assert torch.allclose(silu(g).double(), ref, rtol=2e-6, atol=1e-12)


def test_f32_rounds_to_single_precision():
    assert f32(0.1) == float(np.float32(0.1)) != 0.1 and f32(1.5) == 1.5


def test_rows_are_the_last_dimension_of_a_batch():
    """[batch, tokens, hidden] as the model calls them: every row is quantised and normalised on its own."""
    x = torch.tensor([[[0.5, -0.25, 0.0], [4.0, 1.0, 2.0]], [[0.0, 0.0, 0.0], [-3.0, 6.0, 1.5]]])   # [2, 2, 3]
    q, s = quantize_rows(x)
    assert torch.allclose(s, torch.tensor([[0.5 / 127, 4 / 127], [1 / 127, 6 / 127]]))   # amax below 1: its own scale
    assert q.tolist() == [[[127.0, -64.0, 0.0], [127.0, 32.0, 64.0]],                     # -63.5 -> -64 (even)
                          [[0.0, 0.0, 0.0], [-64.0, 127.0, 32.0]]]
    r = norm_scale(x, 1e-6)
    assert r.shape == (2, 2)
    want = 1 / torch.sqrt((x.double() ** 2).mean(-1) + 1e-6)
    assert torch.allclose(r.double(), want, rtol=2e-4)


def test_sqrt_ieee_returns_float32_for_any_input():
    x = torch.tensor([2.0, 10.0], dtype=torch.float64)
    assert sqrt_ieee(x).dtype == torch.float32 and sqrt_ieee(x).tolist() == [f32(math.sqrt(2.0)), f32(math.sqrt(10.0))]


def test_norm_scale_is_bit_exact_against_a_numpy_reference():
    """The documented formula in numpy float32 with an exact Python-integer sum of squares, at Qwen's width."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 896, generator=g) * 40.0
    eps = 1e-6
    got = norm_scale(x, eps)
    f = np.float32
    for row, r in zip(x, got.tolist()):
        q, s = quantize_rows(row[None], STAT_MAX)
        ss = sum(int(v) ** 2 for v in q[0].tolist())                     # exact, up to 896 * 32767^2
        s16 = f(s.item())
        var = f(f(f(ss) * s16) * s16) / f(896.0)
        assert r == float(f(1.0) / f(np.sqrt(f(var + f(eps)))))


def test_batched_int_matmul_transposes_the_last_two_dimensions():
    a = torch.tensor([[[1.0, 2.0, 3.0]], [[-1.0, 0.0, 4.0]]])                 # [2, 1, 3]
    b = torch.tensor([[[1.0, 0.0, 1.0], [2.0, 2.0, 2.0]], [[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]])   # [2, 2, 3]
    want = [[[4.0, 12.0]], [[0.0, 3.0]]]
    assert int_matmul(a, b, 100).tolist() == want and int_matmul(a, b, 2 ** 30).tolist() == want


def test_float32_bits_do_not_depend_on_the_default_dtype_or_rank():
    """Constants are float32 by declaration, not by torch's default dtype: a library that switches the default to
    float64, or a single value (a 0-dim tensor, which type promotion treats like its constants), gets the same bits."""
    vals = [-3.7, -0.2, 0.0, 0.9, 5.1]
    x = torch.tensor(vals)
    exp_ref, silu_ref, norm_ref = exp_det(x), silu(x), norm_scale(x, 1e-6)
    q_ref, s_ref = quantize_rows(x)
    f32_ref = [f32(v) for v in vals]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for i, v in enumerate(vals):
            one = torch.tensor(v, dtype=torch.float32)
            for fn, ref in ((exp_det, exp_ref), (silu, silu_ref)):
                out = fn(one)
                assert out.dtype == torch.float32 and out.item() == ref[i].item(), (fn.__name__, v)
            assert f32(v) == f32_ref[i]
        r = norm_scale(x, 1e-6)                               # one row: its statistic is a 0-dim tensor
        assert r.dtype == torch.float32 and r.item() == norm_ref.item()
        q, s = quantize_rows(x)
        assert s.dtype == torch.float32 and s.item() == s_ref.item() and torch.equal(q, q_ref)
    finally:
        torch.set_default_dtype(before)


def test_sqrt_ieee_of_a_single_value():
    assert sqrt_ieee(torch.tensor(2.0)).item() == f32(math.sqrt(2.0))
