"""Quantiles of a latency sample, by two estimators applied alike to the measured and the replayed side.

* :func:`sample_quantile`: linear between the two order statistics around ``q (n - 1)`` (numpy's default, DuckDB's
  ``quantile_cont``). Two values decide it; where the sample forms clusters (BRSD's per-problem latencies cluster by
  the number of target writes; a served run's by problem) and the quantile falls in a gap between two, a small shift
  of either side moves it across the gap.
* :func:`harrell_davis`: the Harrell–Davis estimator (Biometrika 69, 1982), a weighted mean of every order statistic
  with the weights a Beta(q (n + 1), (1 - q)(n + 1)) distribution gives the ``i``-th of ``n`` positions. It reads the
  whole neighbourhood of the quantile, so it moves smoothly when a cluster shifts, and it is the estimator the
  validations' bars judge (docs/validation.md, docs/serving.md); the sample quantile is reported beside it.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import betainc


def sample_quantile(values, q: float) -> float:
    """The ``q`` quantile (0 <= q <= 1), linear between order statistics; nan for no values."""
    v = np.asarray(values, float)
    return float(np.quantile(v, q)) if v.size else float("nan")


@lru_cache(maxsize=256)      # a bootstrap asks for the same n and q thousands of times
def harrell_davis_weights(n: int, q: float) -> np.ndarray:
    """The weight of each of ``n`` order statistics in the Harrell–Davis ``q`` quantile: W_i = I(i/n) - I((i-1)/n),
    I the regularised incomplete beta function of a = q (n + 1), b = (1 - q)(n + 1). They sum to 1."""
    if n < 1:
        raise ValueError("harrell_davis: no values")
    if not 0 < q < 1:
        raise ValueError(f"harrell_davis: q must lie strictly between 0 and 1, got {q}")
    cdf = betainc(q * (n + 1), (1 - q) * (n + 1), np.arange(n + 1) / n)
    weights = np.diff(cdf)
    weights.flags.writeable = False
    return weights


def harrell_davis(values, q: float) -> float:
    """The Harrell–Davis estimate of the ``q`` quantile (0 < q < 1) of ``values``; nan for no values."""
    v = np.sort(np.asarray(values, float))
    return float(harrell_davis_weights(v.size, q) @ v) if v.size else float("nan")


# the estimators by name, as the validations' tables name their statistics (p50 / p50_hd, ...)
ESTIMATORS = {"": sample_quantile, "_hd": harrell_davis}
