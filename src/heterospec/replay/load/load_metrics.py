"""What a load run measured: per request (``LOAD_REQUESTS_SCHEMA``), per load point (``LOAD_POINTS_SCHEMA``) and the
capacity at the SLO (``LOAD_CAPACITY_SCHEMA``).

A load point's aggregates count the requests after its warm-up ones (the system starts empty; the warm-up should
last as long as a request, so the system has filled): latency percentiles (the P99 with its distribution-free 95 %
interval from the order statistics, :func:`percentile_interval`), the mean time to the first accepted step and the
mean wait per device over those requests; throughput, device utilisation and energy over the *window* from the first
counted arrival to the last arrival (the offered load still arriving, so a saturated system shows its service rate,
not its drain). The offered rate a point reports is the realised one: the requests that arrived in the window per
second.

The system *keeps up* (a steady state) when both hold: the requests finished in the window equal those that arrived
in it within the Poisson count's 95 % interval (``arrived - 1.96 sqrt(arrived)``; no further slack), and the number
of requests in the system does not grow over the window (:func:`queue_growth`: the slope of its batch means over the
counted arrivals, significant at ``GROWTH_T``). Energy: each device at its active power while it works and its idle
power otherwise, over the window, divided by the requests finished in it.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from heterospec.replay.simulator.engines import DEVICES, RESOURCES
from heterospec.store.parquet import versioned

Z95 = 1.96       # the two-sided 95 % normal quantile: the intervals of the P99 and of the arrivals counted
GROWTH_BATCHES = 10   # batch means of the number in the system over the counted arrivals
GROWTH_T = 2.31   # their slope's t statistic above this (Student's t, 8 degrees of freedom, one-sided 2.5 %) ...
GROWTH_SHARE = 0.01   # ... and the growth over the window above 1 % of the counted arrivals (1 % overloaded): grows

_KEYS = [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),        # target, target_sd, rsd, brsd, brsd_sd
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
]

LOAD_REQUESTS_SCHEMA = versioned("load_requests", 2, [
    *_KEYS,
    pa.field("point", pa.int32(), nullable=False),          # the load point (LOAD_POINTS_SCHEMA.point)
    pa.field("request", pa.int32(), nullable=False),        # in arrival order
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("arrival_s", pa.float64(), nullable=False),
    pa.field("latency_s", pa.float64(), nullable=False),
    pa.field("first_step_s", pa.float64()),                 # to the first accepted step; null: no steps (target alone)
    *[pa.field(f"queue_{r}_ms", pa.float64(), nullable=False) for r in RESOURCES],   # ready but waiting, per device
    pa.field("accepted_tokens", pa.int64(), nullable=False),
    pa.field("counted", pa.bool_(), nullable=False),        # false: in the warm-up share, left out of the aggregates
    pa.field("branch", pa.string()),                        # load-aware speculation: speculate | target; null: static
])

LOAD_POINTS_SCHEMA = versioned("load_points", 3, [
    *_KEYS,
    pa.field("point", pa.int32(), nullable=False),
    pa.field("purpose", pa.string(), nullable=False),       # unloaded | search (capacity bisection) | curve | run
    pa.field("arrivals", pa.string(), nullable=False),      # poisson | closed | timestamps
    pa.field("rate_rps", pa.float64()),                     # offered load (poisson); null otherwise
    pa.field("clients", pa.int32()),                        # closed loop; null otherwise
    pa.field("requests", pa.int32(), nullable=False),
    pa.field("counted", pa.int32(), nullable=False),
    pa.field("seed", pa.int32(), nullable=False),           # the arrival seed (poisson); 0 otherwise
    pa.field("window_s", pa.float64(), nullable=False),     # first counted arrival to the last arrival
    pa.field("offered_rps", pa.float64(), nullable=False),  # requests that arrived in the window per second (realised)
    pa.field("throughput_rps", pa.float64(), nullable=False),   # requests that finished in the window per second
    pa.field("in_system_mean", pa.float64(), nullable=False),   # requests in the system, as the counted arrivals see it
    pa.field("in_system_growth", pa.float64(), nullable=False),  # its growth over the window (slope x window, requests)
    pa.field("queue_grows", pa.bool_(), nullable=False),    # that growth is significant (module docstring)
    pa.field("keeps_up", pa.bool_(), nullable=False),       # finished = arrived within the count's interval, no growth
    pa.field("goodput_tok_s", pa.float64(), nullable=False),   # accepted tokens per second
    pa.field("latency_mean_s", pa.float64(), nullable=False),
    pa.field("p50_s", pa.float64(), nullable=False),
    pa.field("p90_s", pa.float64(), nullable=False),
    pa.field("p99_s", pa.float64(), nullable=False),
    pa.field("p99_lo_s", pa.float64(), nullable=False),     # the P99's 95 % interval (order statistics)
    pa.field("p99_hi_s", pa.float64(), nullable=False),
    pa.field("first_step_mean_s", pa.float64()),
    *[pa.field(f"queue_{r}_ms", pa.float64(), nullable=False) for r in DEVICES],
    *[pa.field(f"util_{r}", pa.float64(), nullable=False) for r in RESOURCES],
    *[pa.field(f"batch_{r}", pa.float64(), nullable=False) for r in DEVICES],   # mean batch while busy
    pa.field("energy_per_request_j", pa.float64(), nullable=False),
    pa.field("devices", pa.string(), nullable=False),       # policies, bounds and batch curves (DevicePlan.describe)
    pa.field("speculated_share", pa.float64()),             # load-aware speculation: counted requests that speculated
])

LOAD_CAPACITY_SCHEMA = versioned("load_capacity", 2, [
    *_KEYS,
    pa.field("percentile", pa.float64(), nullable=False),    # the SLO's latency percentile
    pa.field("slo_s", pa.float64(), nullable=False),
    pa.field("unloaded_s", pa.float64(), nullable=False),    # that percentile with one request at a time
    pa.field("unloaded_same", pa.float64(), nullable=False),  # share of problems whose latency, alone at batch 1 in
                                                              # the load replay, is the single-request replay's (1e-9)
    pa.field("capacity_rps", pa.float64(), nullable=False),  # the least over the seeds of the realised rate of the
                                                              # largest Poisson rate that met the SLO, kept up and
                                                              # every lower rate tried did too (0: none)
    pa.field("capacity_lo_rps", pa.float64(), nullable=False),  # the least and the most over the arrival seeds
    pa.field("capacity_hi_rps", pa.float64(), nullable=False),
    pa.field("seeds", pa.int32(), nullable=False),           # arrival seeds searched (load.seed, load.seed + 1, ...)
    pa.field("limit_rps", pa.float64(), nullable=False),     # the least hard limit: lanes / busy time per request at
                                                              # the device's best batch (the search stays below it)
    pa.field("limit_device", pa.string(), nullable=False),   # the device that sets it
    pa.field("p99_s", pa.float64()),                         # the SLO's percentile at capacity (the least seed)
    pa.field("p99_lo_s", pa.float64()),                      # and its 95 % interval (order statistics)
    pa.field("p99_hi_s", pa.float64()),
    pa.field("counted", pa.int32(), nullable=False),         # requests counted at capacity
    pa.field("goodput_tok_s", pa.float64(), nullable=False),  # at capacity
    pa.field("bottleneck", pa.string(), nullable=False),     # the device requests wait longest for at capacity
    *[pa.field(f"util_{r}", pa.float64(), nullable=False) for r in DEVICES],
    *[pa.field(f"queue_{r}_ms", pa.float64(), nullable=False) for r in DEVICES],   # mean wait per request
    pa.field("evaluations", pa.int32(), nullable=False),     # load points the search ran
    pa.field("devices", pa.string(), nullable=False),
])


def percentile(xs, q: float) -> float:
    """The q-th percentile (linear interpolation, numpy's default); nan for no values."""
    return float(np.percentile(xs, q)) if len(xs) else math.nan


def percentile_interval(xs, q: float, z: float = Z95) -> tuple[float, float]:
    """A distribution-free interval of the q-th percentile (independent samples): the order statistics at ranks
    n p -/+ z sqrt(n p (1 - p)) (the binomial count below the percentile, normal approximation), clipped to the
    sample; (nan, nan) for no values."""
    n = len(xs)
    if not n:
        return math.nan, math.nan
    s = np.sort(np.asarray(xs, dtype=float))
    p = q / 100.0
    half = z * math.sqrt(n * p * (1 - p))
    lo = min(max(math.floor(n * p - half), 1), n)
    hi = min(max(math.ceil(n * p + half), 1), n)
    return float(s[lo - 1]), float(s[hi - 1])


def queue_growth(arrivals, ends, counted_from: int) -> tuple[float, float, bool]:
    """(mean requests in the system, its growth over the window, whether that growth is significant): the number in
    the system each counted arrival finds (the requests that arrived before it and had not ended), in
    ``GROWTH_BATCHES`` consecutive batches; the growth is the least-squares slope of the batch means times their
    number; it grows when the slope's t statistic exceeds ``GROWTH_T`` and the growth exceeds ``GROWTH_SHARE`` of the
    counted arrivals (past capacity it grows by the overload's share of the arrivals, (1 - mu / lambda) n; in a steady
    state the number in the system is stationary, and a drift far below that is the arrival sample's, not an
    overload)."""
    a = np.asarray(arrivals, dtype=float)
    e = np.asarray(ends, dtype=float)
    order = np.argsort(a, kind="stable")
    a, e = a[order], e[order]
    ends_sorted = np.sort(e)
    idx = np.arange(len(a))
    in_system = idx - np.searchsorted(ends_sorted, a, side="right")   # arrived before, not ended by then
    seen = in_system[counted_from:].astype(float)
    if len(seen) < 2 * GROWTH_BATCHES:
        return float(seen.mean()) if len(seen) else 0.0, 0.0, False
    k = GROWTH_BATCHES
    means = np.array([b.mean() for b in np.array_split(seen, k)])
    x = np.arange(k, dtype=float) - (k - 1) / 2
    slope = float(x @ means / (x @ x))
    resid = means - means.mean() - slope * x
    se = math.sqrt(float(resid @ resid) / (k - 2) / float(x @ x))
    grows = slope * k > GROWTH_SHARE * len(seen) and (slope > GROWTH_T * se if se > 0 else True)
    return float(seen.mean()), slope * k, bool(grows)


def request_rows(reqs: list, counted_from: int, keys: dict, point: int) -> list[dict]:
    """LOAD_REQUESTS_SCHEMA rows (times in seconds from the first arrival of the run)."""
    rows = []
    for r in reqs:
        p = r.problem
        rows.append(dict(**keys, point=point, request=r.index, dataset=p.dataset, problem=p.problem,
                         arrival_s=r.arrival / 1e3, latency_s=r.latency / 1e3,
                         first_step_s=None if math.isnan(r.first_step) else (r.first_step - r.arrival) / 1e3,
                         **{f"queue_{k}_ms": r.queued[k] for k in RESOURCES},
                         accepted_tokens=p.accepted_tokens, counted=r.index >= counted_from, branch=r.branch))
    return rows


def point_row(reqs: list, counted_from: int, window: tuple[float, float], busy: dict, batch: dict, power: tuple,
              keys: dict) -> dict:
    """The aggregates of one load point (module docstring). ``busy``: ms each resource worked within the window;
    ``batch``: its mean batch while busy; ``power``: (active W, idle W) per device."""
    counted = [r for r in reqs if r.index >= counted_from]
    lat = [r.latency / 1e3 for r in counted]
    t0, t1 = window
    span = t1 - t0
    finished = [r for r in reqs if t0 <= r.end <= t1]
    arrived = sum(1 for r in reqs if t0 < r.arrival <= t1)   # the first counted one opens the window
    mean_in, growth, grows = queue_growth([r.arrival for r in reqs], [r.end for r in reqs], counted_from)
    p99_lo, p99_hi = percentile_interval(lat, 99)
    firsts = [(r.first_step - r.arrival) / 1e3 for r in counted if not math.isnan(r.first_step)]
    active, idle = power
    energy = sum(active[d] * busy[d] + idle[d] * max(span - busy[d], 0.0) for d in DEVICES) / 1e3
    return dict(
        **keys, requests=len(reqs), counted=len(counted), window_s=span / 1e3,
        offered_rps=arrived / span * 1e3 if span > 0 else math.inf,
        throughput_rps=len(finished) / span * 1e3 if span > 0 else 0.0,
        in_system_mean=mean_in, in_system_growth=growth, queue_grows=grows,
        keeps_up=span > 0 and len(finished) >= arrived - Z95 * math.sqrt(arrived) and not grows,
        goodput_tok_s=sum(r.problem.accepted_tokens for r in finished) / span * 1e3 if span > 0 else 0.0,
        latency_mean_s=float(np.mean(lat)) if lat else math.nan,
        p50_s=percentile(lat, 50), p90_s=percentile(lat, 90), p99_s=percentile(lat, 99),
        p99_lo_s=p99_lo, p99_hi_s=p99_hi,
        first_step_mean_s=float(np.mean(firsts)) if firsts else None,
        **{f"queue_{d}_ms": float(np.mean([r.queued[d] for r in counted])) if counted else 0.0 for d in DEVICES},
        **{f"util_{r}": min(1.0, busy[r] / span) if span > 0 else 0.0 for r in RESOURCES},
        **{f"batch_{d}": batch[d] for d in DEVICES},
        energy_per_request_j=energy / len(finished) if finished else math.nan,
        speculated_share=speculated_share(counted))


def speculated_share(reqs: list) -> float | None:
    """The share of requests whose admission speculated (None: no request went through an admission)."""
    taken = [r.branch for r in reqs if r.branch is not None]
    return sum(b == "speculate" for b in taken) / len(taken) if taken else None
