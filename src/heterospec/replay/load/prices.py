"""Batched prices: what a pass over b sequences costs next to the same pass over one, per device.

The single-request profiles price every call at batch 1; under load a device runs several requests' calls in one
pass. A :class:`BatchCurve` gives the ratio ``pass(b sequences) / pass(1 sequence)`` at the batch's mean context
(1 at b = 1, so batch 1 prices every call exactly as the profile does); the batching policies
(:mod:`.batching`) multiply a batch's batch-1 work by it. Where each curve comes from:

* ``roofline`` (:func:`roofline_curve`): the weights are read once per pass, every sequence's KV cache and compute
  are its own, whichever of memory and compute bounds the pass (:meth:`heterospec.replay.profiles.roofline.Roofline.
  batch_forward`);
* ``hls`` (:func:`hls_curve`): an FPGA draft's batch-B pass from the HLS performance model
  (:func:`heterospec.hls.perf.token_ms` with ``batch``);
* ``measured`` (:func:`measured_curve`): a fit of batched calls measured on this machine
  (:mod:`heterospec.replay.profiles.batch_prices`);
* ``published`` (:func:`published_curve`): a published step time against the tokens in the pass (Vidur's profiled
  operator sums, ``load.paper_batch_curves``), with the attention's KV read per sequence from the roofline. Past
  the curve's last point (256 tokens) a pass costs the last point plus, per further token, the larger of the last
  segment's slope and the roofline's compute-bound cost per token (``2 x params`` FLOPs over the device's peak,
  :attr:`heterospec.replay.profiles.roofline.Roofline.flop_ms`): a pass of thousands of tokens is compute-bound.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
import pyarrow as pa

from heterospec.errors import UserError
from heterospec.replay.profiles.roofline import Roofline


@dataclass(frozen=True)
class BatchCurve:
    """``curve(b, context)``: a pass over ``b`` sequences at mean ``context`` / the same pass over one (1 at b = 1);
    ``source`` says where it comes from (result tables carry it)."""
    ratio: Callable[[int, float], float]
    source: str

    def __call__(self, b: int, context: float) -> float:
        return 1.0 if b <= 1 else self.ratio(b, context)


def roofline_curve(rf: Roofline, tokens: float = 1.0, source: str = "roofline") -> BatchCurve:
    """Passes of ``tokens`` new tokens per sequence (1: a decode iteration; a PRM step's length: its score)."""
    return BatchCurve(lambda b, c: rf.batch_forward(b, c, tokens) / rf.batch_forward(1, c, tokens), source)


def hls_curve(pass_ms: Callable[[int, int], float], source: str = "hls perf model") -> BatchCurve:
    """From ``pass_ms(batch, context)``, the HLS model's pass (contexts rounded to 64 tokens: the model is smooth)."""
    @lru_cache(maxsize=4096)
    def at(b: int, c: int) -> float:
        return pass_ms(b, c) / pass_ms(1, c)
    return BatchCurve(lambda b, c: at(b, int(c) // 64 * 64), source)


def published_curve(tokens: list[float], ms: list[float], scale: float, kv_ms_per_token: float, per_seq: float = 1.0,
                    source: str = "published", compute_ms_per_token: float = 0.0) -> BatchCurve:
    """A measured step time ``ms`` at ``tokens`` tokens in the pass (linear between points), times ``scale``
    (another device: its bandwidth's ratio); past the last point, per further token the larger of the last
    segment's (scaled) slope and ``compute_ms_per_token`` (the device's compute-bound cost of a token); plus per
    sequence its KV read at ``kv_ms_per_token`` per context token. Sequences bring ``per_seq`` new tokens each."""
    if len(tokens) < 2 or len(tokens) != len(ms) or any(b <= a for a, b in zip(tokens, tokens[1:])):
        raise UserError(f"{source}: a batch curve needs two or more points with increasing tokens "
                        f"(tokens {tokens}, ms {ms})")
    last_slope = scale * (ms[-1] - ms[-2]) / (tokens[-1] - tokens[-2])
    beyond = max(last_slope, compute_ms_per_token)

    def step(n: float) -> float:
        if n > tokens[-1]:
            return scale * ms[-1] + (n - tokens[-1]) * beyond
        i = min(max(bisect.bisect_left(tokens, n), 1), len(tokens) - 1)
        x0, x1, y0, y1 = tokens[i - 1], tokens[i], ms[i - 1], ms[i]
        return scale * (y0 + (n - x0) * (y1 - y0) / (x1 - x0))

    def ratio(b: int, c: float) -> float:
        att = kv_ms_per_token * (c + per_seq)
        return (step(b * per_seq) + b * att) / (step(per_seq) + att)
    return BatchCurve(ratio, source)


# ----------------------------------------------------------------------------- measured batched calls
BATCH_FEATURES = ("1", "b", "b*n", "b*c")   # a pass: its fixed cost, per sequence, per token, per context token


def batch_features(batch, context, tokens) -> np.ndarray:
    b, c, n = (np.asarray(x, dtype=float) for x in (batch, context, tokens))
    return np.stack([np.ones_like(b), b, b * n, b * c], axis=-1)


def fit_batch_prices(table: pa.Table, where: str = "batch prices") -> dict[tuple[str, str], np.ndarray]:
    """Per (role, phase) of a ``BATCH_PRICES_SCHEMA`` table: non-negative least-absolute-deviation coefficients of
    ``ms = a + b' batch + c' batch tokens + d' batch context`` (:data:`BATCH_FEATURES`; the measured profile's fit,
    :func:`heterospec.replay.profiles.measured.lad`)."""
    from heterospec.replay.profiles.measured import lad
    rows = table.select(["role", "phase", "batch", "context", "tokens", "ms"]).to_pylist()
    groups: dict[tuple[str, str], list] = {}
    for r in rows:
        groups.setdefault((r["role"], r["phase"]), []).append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        if len({r["batch"] for r in rs}) < 2:
            raise UserError(f"{where}: {key[0]} {key[1]} has rows at one batch size only; a batching curve needs two "
                            f"or more")
        X = batch_features([r["batch"] for r in rs], [r["context"] for r in rs], [r["tokens"] for r in rs])
        out[key] = lad(X, np.asarray([r["ms"] for r in rs], dtype=float))
    return out


def measured_curve(coef: np.ndarray, tokens: float = 1.0, source: str = "measured batches") -> BatchCurve:
    """The fitted pass (:func:`fit_batch_prices`) over b sequences / over one, ``tokens`` new tokens each."""
    def at(b: float, c: float) -> float:
        return float(batch_features(b, c, tokens) @ coef)

    def ratio(b: int, c: float) -> float:
        one = at(1, c)
        if one <= 0:
            raise UserError(f"{source}: the fitted batch-1 pass costs {one:.3g} ms at context {c:.0f}; the batch "
                            f"prices must make a pass cost more than nothing")
        return at(b, c) / one
    return BatchCurve(ratio, source)
