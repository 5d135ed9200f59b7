"""The ``measured`` latency profile: least squares per role and phase on our own traces' wall times.

Input: model-call rows (``CALLS_SCHEMA``, ``wall_ms`` not null). Each (role, phase) gets a linear model in the
features that its cost grows with — the call's fixed cost, its tokens, its context, and the attention term that
grows with both (the artifact's per-token-times-context shape, summed over the call):

* decode  (n = tokens_out, kv = kv_len):  1, n, kv, n*kv + n(n+1)/2
* prefill (n = tokens_in,  kv = kv_len):  1, n, kv, n*kv + n(n+1)/2
* score   (N = kv_len + tokens_in):       1, N, N^2

:func:`fit_calls` returns the coefficients with R^2 and MAPE on the rows (``FIT_SCHEMA``). A fit that predicts a
negative latency anywhere in the range of its own rows, or at a call the simulator asks about, is a UserError.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from heterospec.errors import UserError
from heterospec.replay.profiles import LatencyProfile
from heterospec.replay.steps import CALLS_SCHEMA
from heterospec.store.parquet import read_parquet, versioned, write_parquet

FEATURES = {"decode": ("1", "n", "kv", "n*kv+n(n+1)/2"), "prefill": ("1", "n", "kv", "n*kv+n(n+1)/2"),
            "score": ("1", "N", "N^2")}
NEEDED = (("draft", "decode"), ("prm", "score"), ("target", "decode"))   # prefills may be folded into decodes

FIT_SCHEMA = versioned("measured_fit", 1, [
    pa.field("run", pa.string(), nullable=False),             # results/<run>/ ("" outside a run)
    pa.field("role", pa.string(), nullable=False),
    pa.field("phase", pa.string(), nullable=False),
    pa.field("calls", pa.int32(), nullable=False),            # rows fitted
    pa.field("features", pa.list_(pa.string()), nullable=False),
    pa.field("coefficients", pa.list_(pa.float64()), nullable=False),   # ms per feature unit
    pa.field("r2", pa.float64(), nullable=False),
    pa.field("mape", pa.float64(), nullable=False),           # mean |pred - wall| / wall over the rows
    pa.field("wall_ms_mean", pa.float64(), nullable=False),
])


def features(phase: str, n, kv) -> np.ndarray:
    """Design matrix rows for calls of ``phase`` (``n``: tokens generated / ingested, or scored for ``score``)."""
    n, kv = np.asarray(n, dtype=float), np.asarray(kv, dtype=float)
    one = np.ones_like(n)
    if phase == "score":
        N = n + kv
        return np.stack([one, N, N * N], axis=-1)
    return np.stack([one, n, kv, n * kv + n * (n + 1) / 2], axis=-1)


def _call_arrays(rows: dict, phase: str):
    n = rows["tokens_out"] if phase == "decode" else rows["tokens_in"]
    return np.asarray(n, dtype=float), np.asarray(rows["kv_len"], dtype=float)


def fit_calls(calls: pa.Table, run: str = "") -> pa.Table:
    """Fit every (role, phase) present in ``calls``; one FIT_SCHEMA row each."""
    if calls.num_rows == 0 or calls.column("wall_ms").null_count == calls.num_rows:
        raise UserError("measured profile: no model calls with a measured wall_ms to fit")
    d = calls.select(["role", "phase", "tokens_in", "tokens_out", "kv_len", "wall_ms"]).to_pydict()
    groups: dict[tuple, dict] = {}
    for i, w in enumerate(d["wall_ms"]):
        if w is None:
            continue
        g = groups.setdefault((d["role"][i], d["phase"][i]), dict(tokens_in=[], tokens_out=[], kv_len=[], wall=[]))
        for k in ("tokens_in", "tokens_out", "kv_len"):
            g[k].append(d[k][i])
        g["wall"].append(w)
    for need in NEEDED:
        if need not in groups:
            raise UserError(f"measured profile: no {need[0]} {need[1]} calls with wall_ms in the traces")
    out = []
    for (role, phase), g in sorted(groups.items()):
        if phase not in FEATURES:
            raise UserError(f"measured profile: phase '{phase}' of role '{role}' is not one of {sorted(FEATURES)}")
        n, kv = _call_arrays(g, phase)
        X, y = features(phase, n, kv), np.asarray(g["wall"], dtype=float)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        pred = X @ coef
        ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
        pos = y > 0
        mape = float(np.mean(np.abs(pred[pos] - y[pos]) / y[pos])) if pos.any() else 0.0
        _check_range(role, phase, coef, n, kv)
        out.append(dict(run=run, role=role, phase=phase, calls=len(y), features=list(FEATURES[phase]),
                        coefficients=[float(c) for c in coef], r2=r2, mape=mape, wall_ms_mean=float(y.mean())))
    return pa.Table.from_pylist(out, schema=FIT_SCHEMA)


def _check_range(role: str, phase: str, coef, n, kv) -> None:
    """The fit must not go negative on its own rows or at the corners of their (n, kv) range."""
    cn = [n.min(), n.max()] * 2
    ck = [kv.min()] * 2 + [kv.max()] * 2
    pts_n, pts_kv = np.concatenate([n, cn]), np.concatenate([kv, ck])
    pred = features(phase, pts_n, pts_kv) @ coef
    i = int(np.argmin(pred))
    if pred[i] < 0:
        raise UserError(f"measured profile: the fitted {role} {phase} latency is negative ({pred[i]:.3g} ms at "
                        f"n={int(pts_n[i])}, kv={int(pts_kv[i])}); the traces do not support a linear fit there")


class MeasuredProfile(LatencyProfile):
    """Latency from fitted coefficients (``FIT_SCHEMA``); a (role, prefill) without rows costs nothing (folded)."""

    context_includes_prompt = True

    def __init__(self, coefficients: dict[tuple[str, str], list[float]], name: str = "measured"):
        self.name = name
        self.coef = {k: np.asarray(v, dtype=float) for k, v in coefficients.items()}
        for need in NEEDED:
            if need not in self.coef:
                raise UserError(f"measured profile: no fit for {need[0]} {need[1]}")

    @classmethod
    def from_fit(cls, fit: pa.Table | str | Path) -> "MeasuredProfile":
        if not isinstance(fit, pa.Table):
            fit = read_fit(fit)
        return cls({(r["role"], r["phase"]): r["coefficients"] for r in fit.to_pylist()})

    def _ms(self, role: str, phase: str, n: int, kv: int) -> float:
        c = self.coef.get((role, phase))
        if c is None or n <= 0:
            return 0.0
        if phase == "score":
            N = n + kv
            v = c[0] + c[1] * N + c[2] * N * N
        else:
            v = c[0] + c[1] * n + c[2] * kv + c[3] * (n * kv + n * (n + 1) / 2)
        if v < 0:
            raise UserError(f"measured profile: the fitted {role} {phase} latency is negative ({v:.3g} ms at n={n}, "
                            f"kv={kv}), outside the range of the traces it was fitted on")
        return float(v)

    def draft_decode(self, kv: int, n: int) -> float:
        return self._ms("draft", "decode", n, kv)

    def draft_prefill(self, kv: int, n: int) -> float:
        return self._ms("draft", "prefill", n, kv)

    def prm_score(self, n: int) -> float:
        return self._ms("prm", "score", n, 0)

    def target_prefill(self, kv: int) -> float:
        return self._ms("target", "prefill", kv, 0)

    def target_decode(self, kv: int, g: int) -> float:
        return self._ms("target", "decode", g, kv)


def read_calls(path: str | Path) -> pa.Table:
    return read_parquet(path, CALLS_SCHEMA)


def write_fit(table: pa.Table, path: str | Path) -> Path:
    return write_parquet(table, path, FIT_SCHEMA)


def read_fit(path: str | Path) -> pa.Table:
    return read_parquet(path, FIT_SCHEMA)
