"""The validations' quantile estimators (heterospec.replay.validation.quantiles) against hand-worked cases and a brute-force
oracle."""
from __future__ import annotations

import random

import numpy as np
import pytest

from heterospec.replay.validation.quantiles import harrell_davis, harrell_davis_weights, sample_quantile


def test_harrell_davis_weights_by_hand():
    # n = 3, q = 0.5: a = b = 2, I_x(2, 2) = 3x^2 - 2x^3, so I(1/3) = 7/27, I(2/3) = 20/27
    assert harrell_davis_weights(3, 0.5) == pytest.approx([7 / 27, 13 / 27, 7 / 27], abs=1e-12)
    # n = 2, q = 0.5: a = b = 1.5, symmetric: the mean of the two
    assert harrell_davis([1.0, 5.0], 0.5) == pytest.approx(3.0, abs=1e-12)
    # n = 2, q = 0.9: a = 2.7, b = 0.3; I_{1/2}(2.7, 0.3), integrated by hand on a fine grid (the midpoint rule)
    x = (np.arange(200_000) + 0.5) / 200_000
    pdf = x ** 1.7 * (1 - x) ** -0.7
    w_low = pdf[x < 0.5].sum() / pdf.sum()
    assert harrell_davis_weights(2, 0.9)[0] == pytest.approx(w_low, abs=2e-3)
    assert harrell_davis([7.0], 0.9) == 7.0


def test_harrell_davis_is_the_expected_order_statistic_at_a_beta_position():
    # brute force: draw U ~ Beta(q (n + 1), (1 - q)(n + 1)) and read the order statistic at position ceil(U n)
    rng = random.Random(3)
    values = sorted(rng.lognormvariate(0, 1) for _ in range(15))
    for q in (0.5, 0.9):
        a, b = q * 16, (1 - q) * 16
        draws = [values[min(14, int(rng.betavariate(a, b) * 15))] for _ in range(200_000)]
        assert harrell_davis(values, q) == pytest.approx(sum(draws) / len(draws), rel=0.01)


def test_a_shift_inside_a_gap_moves_the_sample_median_across_it_and_the_harrell_davis_median_a_little():
    # two clusters of ten, 100 and 200: the sample median is the midpoint of the gap's two edges
    low, high = [100.0] * 10, [200.0] * 10
    moved = low[:9] + [200.0] + high             # one value crosses the gap
    assert sample_quantile(low + high, 0.5) == 150.0
    assert sample_quantile(moved, 0.5) == 200.0  # +33 % from one of twenty values
    hd0, hd1 = harrell_davis(low + high, 0.5), harrell_davis(moved, 0.5)
    assert hd0 == pytest.approx(150.0, abs=1e-9)
    assert 0 < (hd1 - hd0) / hd0 < 0.15


def test_bad_arguments():
    with pytest.raises(ValueError, match="strictly between"):
        harrell_davis([1.0, 2.0], 1.0)
    assert np.isnan(harrell_davis([], 0.5)) and np.isnan(sample_quantile([], 0.5))
