"""The ``measured`` latency profile: robust fits per role and phase on our own traces' wall times.

Input: model-call rows (``MODEL_CALLS_SCHEMA``, ``wall_ms`` not null). Each (role, phase) gets a linear model in what its
cost grows with — the call's fixed cost, its tokens, and the attention term that grows with tokens x context:

* decode  (n = tokens_out, kv = kv_len):  1, n, n*kv + n(n+1)/2
* prefill (n = tokens_in,  kv = kv_len):  1, n, n*kv + n(n+1)/2
* score, and the target's prefill (N = kv_len + tokens_in, the context): 1, N, N^2
  (the simulator asks for them by context: what part of it a model still has to read depends on its cache)

The fit is least *absolute* deviations (iteratively reweighted least squares) with non-negative coefficients (no
call gets cheaper with more tokens or context, and a fit on a few calls cannot predict a negative latency for a call
shape it has not seen): on a shared machine call times
have a long tail from other processes, and the token counts vary little (draft steps are mostly 12-13 tokens), so
least squares chases the tail (a poor R^2, coefficients of either sign); the median-type fit is stable across
trace sets. The LAD fit gives the shape (slopes); its intercept is then shifted by the mean residual, because a
replay *adds* call times: a median fit under-predicts each sum by the tail's share, a mean-unbiased one does not.

Between calls the controller works (results and requests cross process pipes; the PRM tokenises the steps):
:func:`fit_overheads` takes, from sequential runs where nothing overlaps, the mean gap before each role's call
(phase ``dispatch``) and the mean time per problem before the first and after the last call (role
``controller``, phase ``problem``). The profile charges them to every call and problem, in every schedule.

How our executors call the models (heterospec.reasoning.roles.StepWriter): every write first feeds what the model
has not seen — at least the last token it sampled — then decodes; so ``draft_decode`` is a whole write (dispatch +
1-token feed + decode), and ``draft_prefill`` (a prompt, a target step to catch up on) is the *extra* feed, merged
into the next write. The target's write is ``target_prefill`` (dispatch + feed) + ``target_decode``.

Target writes made by token-level speculation (``algorithm.target_decoding`` a strategy; their rounds in
``collect_rounds/v1``) are priced as rounds (:mod:`heterospec.replay.schedules.mechanisms.token_speculation`):
:func:`fit_rounds` fits the draft's drafting (phase ``round``) and the target's verification pass (phase ``verify``)
from the recorded rounds, and the profile answers ``draft_round`` and ``target_verify`` with them. Those calls stay
out of the plain fits (``heterospec.replay.traces.fit.fit_table``).

:func:`fit_calls` returns the coefficients with R^2 and MAPE on the rows (``MEASURED_FIT_SCHEMA``); its coefficients are
never negative. A fit file with coefficients that make a call the simulator asks about cost less than nothing (edited
by hand, or written by another tool) is a UserError naming the call.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from heterospec.errors import UserError
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.simulator.steps import MODEL_CALLS_SCHEMA
from heterospec.store.parquet import read_parquet, versioned, write_parquet

FEATURES = {"decode": ("1", "n", "n*kv+n(n+1)/2"), "prefill": ("1", "n", "n*kv+n(n+1)/2"),
            "score": ("1", "N", "N^2"),
            # a token-level speculation round (collect_rounds/v1): the draft drafts n tokens, the target verifies
            # n = nodes + 1 in one pass (the drafted ones after the last accepted token); both after kv
            "round": ("1", "n", "n*kv+n(n+1)/2"), "verify": ("1", "n", "n*kv+n(n+1)/2")}
BY_CONTEXT = {("prm", "score"), ("target", "prefill")}   # fitted on the context N = kv + tokens in
NEEDED = (("draft", "decode"), ("prm", "score"), ("target", "decode"))   # prefills may be folded into decodes
OVERHEAD = ("dispatch", "problem")                        # phases of the overhead rows (one coefficient each)
LAD_ITERATIONS = 30

MEASURED_FIT_SCHEMA = versioned("measured_fit", 1, [
    pa.field("run", pa.string(), nullable=False),             # results/<run>/ ("" outside a run)
    pa.field("role", pa.string(), nullable=False),            # draft | prm | target | controller
    pa.field("phase", pa.string(), nullable=False),           # prefill | decode | score | dispatch | problem
    pa.field("calls", pa.int32(), nullable=False),            # rows fitted
    pa.field("features", pa.list_(pa.string()), nullable=False),
    pa.field("coefficients", pa.list_(pa.float64()), nullable=False),   # ms per feature unit
    pa.field("r2", pa.float64(), nullable=False),
    pa.field("mape", pa.float64(), nullable=False),           # mean |pred - wall| / wall over the rows
    pa.field("wall_ms_mean", pa.float64(), nullable=False),
])


def _key(role: str, phase: str) -> str:
    return "score" if (role, phase) in BY_CONTEXT else phase


def features(phase: str, n, kv) -> np.ndarray:
    """Design matrix rows for calls of ``phase`` (``n``: tokens generated / ingested, or scored for ``score``)."""
    n, kv = np.asarray(n, dtype=float), np.asarray(kv, dtype=float)
    one = np.ones_like(n)
    if phase == "score":
        N = n + kv
        return np.stack([one, N, N * N], axis=-1)
    return np.stack([one, n, n * kv + n * (n + 1) / 2], axis=-1)


def lad(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least absolute deviations with non-negative coefficients. The problem is convex, so its optimum is the
    unconstrained optimum on some subset of the features (the rest zero) that comes out non-negative: try the full
    set, else every subset (a latency model has three features), and keep the best feasible one."""
    full = _irls(X, y)
    if (full >= 0).all():
        return full
    k = X.shape[1]
    best, best_dev = np.zeros(k), float(np.abs(y).sum())
    for mask in range(1, (1 << k) - 1):
        cols = [j for j in range(k) if mask >> j & 1]
        c = _irls(X[:, cols], y)
        if (c < 0).any():
            continue
        dev = float(np.abs(y - X[:, cols] @ c).sum())
        if dev < best_dev:
            best, best_dev = np.zeros(k), dev
            best[cols] = c
    return best


def _irls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unconstrained least absolute deviations: iteratively reweighted least squares (weights 1/|residual|, floored)."""
    w = np.ones(len(y))
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    for _ in range(LAD_ITERATIONS):
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]
        w = 1.0 / np.maximum(np.abs(y - X @ coef), 1e-3)
    return coef


def _call_arrays(rows: dict, phase: str):
    n = rows["tokens_out"] if phase == "decode" else rows["tokens_in"]
    return np.asarray(n, dtype=float), np.asarray(rows["kv_len"], dtype=float)


def fit_calls(calls: pa.Table, run: str = "") -> pa.Table:
    """Fit every (role, phase) present in ``calls``; one MEASURED_FIT_SCHEMA row each."""
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
        if phase not in ("prefill", "decode", "score"):
            raise UserError(f"measured profile: phase '{phase}' of role '{role}' is not one of prefill, decode, score")
        n, kv = _call_arrays(g, phase)
        out.append(_fit_row(run, role, phase, n, kv, np.asarray(g["wall"], dtype=float)))
    return pa.Table.from_pylist(out, schema=MEASURED_FIT_SCHEMA)


def _fit_row(run: str, role: str, phase: str, n, kv, y: np.ndarray, extra_ms: float = 0.0) -> dict:
    """One MEASURED_FIT_SCHEMA row: the LAD slopes, the intercept shifted to the mean residual plus ``extra_ms`` per row."""
    key = _key(role, phase)
    X = features(key, n, kv)
    coef = lad(X, y)
    coef[0] = max(0.0, coef[0] + float(np.mean(y - X @ coef)) + extra_ms)   # mean-unbiased: latencies add up
    pred = X @ coef
    y = y + extra_ms
    ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    pos = y > 0
    mape = float(np.mean(np.abs(pred[pos] - y[pos]) / y[pos])) if pos.any() else 0.0
    return dict(run=run, role=role, phase=phase, calls=len(y), features=list(FEATURES[key]),
                coefficients=[float(c) for c in coef], r2=r2, mape=mape, wall_ms_mean=float(y.mean()))


def fit_rounds(rounds: list[dict], call_ms: float, run: str = "") -> pa.Table:
    """The rounds of token-level speculative target writes (``collect_rounds/v1`` rows of sequential runs):
    ``draft round`` fits ``draft_ms`` on the tokens drafted and the target's context ``kv_target``; ``target
    verify`` fits ``verify_ms`` on the tokens of the pass (nodes + 1). ``call_ms``, the summed wall time of the
    calls the rounds belong to, minus the rounds' own draft and verify times, is what a speculative call spends
    outside them (the draft copy catching up on the context, the tree's bookkeeping): it is charged to the verify
    pass, per round, so that a write's rounds add up to its calls' time."""
    if not rounds:
        raise UserError("measured profile: no token-level rounds to fit")
    kv = np.asarray([r["kv_target"] for r in rounds], dtype=float)
    draft_ms = np.asarray([r["draft_ms"] for r in rounds], dtype=float)
    verify_ms = np.asarray([r["verify_ms"] for r in rounds], dtype=float)
    outside = (call_ms - float(draft_ms.sum() + verify_ms.sum())) / len(rounds)
    return pa.Table.from_pylist([
        _fit_row(run, "draft", "round", np.asarray([r["drafted"] for r in rounds], dtype=float), kv, draft_ms),
        _fit_row(run, "target", "verify", np.asarray([r["nodes"] + 1 for r in rounds], dtype=float), kv, verify_ms,
                 extra_ms=max(0.0, outside)),
    ], schema=MEASURED_FIT_SCHEMA)


def fit_overheads(rows: list[dict], latency_ms: dict, run: str = "") -> pa.Table:
    """Controller time from sequential runs' collect rows (``problem_id, role, phase, start_ns, end_ns``) and their
    per-problem latencies (``{problem_id: ms}``): per role, the mean gap from the previous call's end to the
    start of a request to it (a write starts with its prefill row, a score is one row); per problem, the mean
    time before the first call plus after the last one."""
    by_problem: dict = defaultdict(list)
    for r in rows:
        by_problem[r["problem_id"]].append(r)
    gaps: dict[str, list[float]] = defaultdict(list)
    edges: list[float] = []
    for pid, rs in by_problem.items():
        rs.sort(key=lambda r: r["start_ns"])
        for a, b in zip(rs, rs[1:]):
            if b["phase"] != "decode":
                gaps[b["role"]].append((b["start_ns"] - a["end_ns"]) / 1e6)
        if pid in latency_ms:
            edges.append(rs[0]["start_ns"] / 1e6 + latency_ms[pid] - max(r["end_ns"] for r in rs) / 1e6)
    out = [dict(run=run, role=role, phase="dispatch", calls=len(v), features=["1"],
                coefficients=[max(0.0, float(np.mean(v)))], r2=0.0, mape=0.0, wall_ms_mean=float(np.mean(v)))
           for role, v in sorted(gaps.items())]
    if edges:
        out.append(dict(run=run, role="controller", phase="problem", calls=len(edges), features=["1"],
                        coefficients=[max(0.0, float(np.mean(edges)))], r2=0.0, mape=0.0,
                        wall_ms_mean=float(np.mean(edges))))
    return pa.Table.from_pylist(out, schema=MEASURED_FIT_SCHEMA)


class MeasuredProfile(LatencyProfile):
    """Latency from fitted coefficients (``MEASURED_FIT_SCHEMA``) as our executors call the models (module docstring);
    a (role, prefill) without rows costs nothing (folded), so do missing overhead rows."""

    context_includes_prompt = True

    def __init__(self, coefficients: dict[tuple[str, str], list[float]], name: str = "measured"):
        self.name = name
        self.coef = {k: np.asarray(v, dtype=float) for k, v in coefficients.items() if k[1] not in OVERHEAD}
        self.dispatch = {r: float(v[0]) for (r, ph), v in coefficients.items() if ph == "dispatch"}
        self.problem_ms = float(coefficients.get(("controller", "problem"), [0.0])[0])
        for need in NEEDED:
            if need not in self.coef:
                raise UserError(f"measured profile: no fit for {need[0]} {need[1]}")
        for k, v in [*self.dispatch.items(), ("problem", self.problem_ms)]:
            if v < 0:
                raise UserError(f"measured profile: negative {k} overhead ({v:.3g} ms)")

    @classmethod
    def from_fit(cls, fit: pa.Table | str | Path) -> "MeasuredProfile":
        if not isinstance(fit, pa.Table):
            fit = read_fit(fit)
        return cls({(r["role"], r["phase"]): r["coefficients"] for r in fit.to_pylist()})

    def _ms(self, role: str, phase: str, n: int, kv: int) -> float:
        c = self.coef.get((role, phase))
        if c is None or n <= 0:
            return 0.0
        if _key(role, phase) == "score":
            N = n + kv
            v = c[0] + c[1] * N + c[2] * N * N
        else:
            v = c[0] + c[1] * n + c[2] * (n * kv + n * (n + 1) / 2)
        if v < 0:
            raise UserError(f"measured profile: the fitted {role} {phase} latency is negative ({v:.3g} ms at n={n}, "
                            f"kv={kv}); fitted coefficients must make every call cost >= 0")
        return float(v)

    def draft_decode(self, kv: int, n: int) -> float:
        if n <= 0:
            return 0.0
        return self.dispatch.get("draft", 0.0) + self._ms("draft", "prefill", 1, kv) + \
            self._ms("draft", "decode", n, kv + 1)

    def draft_prefill(self, kv: int, n: int) -> float:
        if n <= 0:
            return 0.0
        return max(0.0, self._ms("draft", "prefill", n + 1, kv) - self._ms("draft", "prefill", 1, kv))

    def prm_score(self, n: int, new: int | None = None) -> float:
        return self.dispatch.get("prm", 0.0) + self._ms("prm", "score", n, 0)

    def target_prefill(self, kv: int, new: int | None = None) -> float:
        return self.dispatch.get("target", 0.0) + self._ms("target", "prefill", kv, 0)

    def target_decode(self, kv: int, g: int) -> float:
        return self._ms("target", "decode", g, kv)

    def cancel_units(self, role: str, kv: int, n: int, new: int | None = None) -> tuple[float, float]:
        """Our executors check for a cancel before each token (heterospec.reasoning.roles.StepWriter): the dispatch
        and the feed finish, then the token in progress; the write's end waits for it (and a problem's end for
        every cancelled write: heterospec.reasoning.executors.StepAhead.finish)."""
        if n <= 0:
            return 0.0, 0.0
        if role == "target":
            return self.target_prefill(kv, new), self.target_decode(kv, n) / n
        decode = self._ms("draft", "decode", n, kv + 1)
        return self.draft_decode(kv, n) - decode, decode / n

    def target_verify(self, kv: int, n: int) -> float:
        """A verification pass of ``n`` tokens as the rounds were fitted (:func:`fit_rounds`), else a decode step."""
        if ("target", "verify") not in self.coef:
            return super().target_verify(kv, n)
        return self._ms("target", "verify", n, kv)

    def draft_round(self, kv: int, n: int) -> float:
        """Drafting ``n`` tokens of a round as fitted (:func:`fit_rounds`), else a whole draft write."""
        if ("draft", "round") not in self.coef:
            return super().draft_round(kv, n)
        return self._ms("draft", "round", n, kv)


def read_calls(path: str | Path) -> pa.Table:
    return read_parquet(path, MODEL_CALLS_SCHEMA)


def write_fit(table: pa.Table, path: str | Path) -> Path:
    return write_parquet(table, path, MEASURED_FIT_SCHEMA)


def read_fit(path: str | Path) -> pa.Table:
    return read_parquet(path, MEASURED_FIT_SCHEMA)
