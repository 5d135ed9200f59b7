"""Noise statistics of the validation: how much of an error is the machine's. A bootstrap interval of the MAE over
problems, the spread of two runs of the same problem (the noise floor a perfect replay would still score against one
run), each collect job's draft pace against the sequential jobs pooled (drift between jobs), and the replay's error
on aggregates of the per-problem latencies (mean, P50, P90) with their bootstrap intervals."""
from __future__ import annotations

import random
from collections import defaultdict

from heterospec.replay.validation.quantiles import harrell_davis


def mae_interval(errors: list[float], resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean absolute error: the problems resampled with replacement."""
    n = len(errors)
    if n == 0:
        return float("nan"), float("nan")
    a = [abs(e) for e in errors]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(a, k=n)) / n for _ in range(resamples))
    lo = int((1 - level) / 2 * resamples)
    return means[lo], means[min(resamples - 1, resamples - 1 - lo)]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between order statistics (numpy's default, DuckDB's quantile_cont)."""
    v = sorted(values)
    x = q * (len(v) - 1)
    i = int(x)
    return v[i] if i + 1 >= len(v) else v[i] + (x - i) * (v[i + 1] - v[i])


# the aggregates of a per-problem latency distribution the replay must get right (Vidur and its peers report these):
# the mean, and P50 / P90 by the sample quantile and by the Harrell-Davis estimator (``_hd``, :mod:`.quantiles`)
AGGREGATES = {"mean": lambda v: sum(v) / len(v), "p50": lambda v: quantile(v, 0.5), "p90": lambda v: quantile(v, 0.9),
              "p50_hd": lambda v: harrell_davis(v, 0.5), "p90_hd": lambda v: harrell_davis(v, 0.9)}
# the aggregates the bars judge: the mean and the Harrell-Davis quantiles, which a clustered sample supports (the
# sample quantiles are reported beside them)
JUDGED = ("mean", "p50_hd", "p90_hd")


def aggregate_error(measured: list[float], predicted: list[float], stat: str) -> float:
    """(stat(predicted) - stat(measured)) / stat(measured) over the same problems."""
    f = AGGREGATES[stat]
    m = f(measured)
    return (f(predicted) - m) / m


def aggregate_interval(measured: list[float], predicted: list[float], stat: str, resamples: int = 2000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of :func:`aggregate_error`: the problems resampled with replacement, each with
    its measured and predicted latency (a pair)."""
    n = len(measured)
    if n == 0:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    errs = []
    for _ in range(resamples):
        idx = rng.choices(range(n), k=n)
        errs.append(aggregate_error([measured[i] for i in idx], [predicted[i] for i in idx], stat))
    errs.sort()
    lo = int((1 - level) / 2 * resamples)
    return errs[lo], errs[min(resamples - 1, resamples - 1 - lo)]


def repeat_spread(rows: list[dict]) -> dict[tuple, float]:
    """{(dataset, problem): spread} over ``collect_repeats/v1`` rows of one trace set and executor: the mean, over
    every pair of the problem's repeats, of |a - b| / ((a + b) / 2) of their latencies. It is the error one
    measurement scores as a prediction of another of the same problem on the same models: what a replay that
    predicts every problem exactly right would still score against a single run (the noise floor of the MAE)."""
    runs: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r["role"] == "controller":
            runs[(r["dataset"], r["problem_id"])].append(r["end_ns"] / 1e6)
    return {key: pair_spread(ms) for key, ms in sorted(runs.items()) if len(ms) > 1}


def pair_spread(values: list[float]) -> float:
    """The mean, over every pair of ``values`` (two or more measurements of the same work), of |a - b| / ((a + b) / 2)."""
    pairs = [(a, b) for i, a in enumerate(values) for b in values[i + 1:]]
    return sum(abs(a - b) / ((a + b) / 2) for a, b in pairs) / len(pairs)


def draft_pace(calls: dict) -> dict[tuple, float]:
    """{(trace_set, executor): pace}: the median draft decode time per token of each collect job over that of every
    job of the same executor pooled. Every job of an executor runs the same draft on the same problems, so a pace
    away from 1 is load the job met that the others did not (drift). Between executors the draft's pace differs by
    more than load: an overlapped executor shares the draft's core with the controller and loads the machine while
    the draft decodes (:func:`draft_contention`)."""
    per_token = _draft_per_token(calls)
    out = {}
    for ex in {ex for _, ex in per_token}:
        ref = _median([v for (_, e), vs in per_token.items() if e == ex for v in vs])
        out.update({k: _median(vs) / ref for k, vs in per_token.items() if k[1] == ex and vs and ref > 0})
    return out


def draft_contention(calls: dict) -> dict[str, float]:
    """{executor: its jobs' median draft decode time per token over the sequential jobs'} (every job pooled per
    executor): what running the roles overlapped costs the draft on this machine."""
    per_token = _draft_per_token(calls)
    pooled = {ex: [v for (_, e), vs in per_token.items() if e == ex for v in vs] for _, ex in per_token}
    ref = _median(pooled["sequential"]) if pooled.get("sequential") else 0.0
    return {ex: _median(vs) / ref for ex, vs in sorted(pooled.items()) if vs and ref > 0}


def _draft_per_token(calls: dict) -> dict[tuple, list[float]]:
    per_token: dict[tuple, list[float]] = {}
    for key, t in calls.items():
        d = t.select(["role", "phase", "tokens_out", "wall_ms"]).to_pydict()
        per_token[key] = [w / n for r, ph, n, w in zip(d["role"], d["phase"], d["tokens_out"], d["wall_ms"])
                          if r == "draft" and ph == "decode" and n and n > 0 and w is not None]
    return {k: v for k, v in per_token.items() if v}


def _median(v: list[float]) -> float:
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
