"""What a load run measured: per request (``LOAD_REQUESTS_SCHEMA``), per load point (``LOAD_POINTS_SCHEMA``) and the
capacity at the SLO (``LOAD_CAPACITY_SCHEMA``).

A load point's aggregates count the requests after its warm-up ones (the system starts empty; the warm-up should
last as long as a request, so the system has filled): latency percentiles, the mean time to the first accepted step
and the mean wait per device over those requests; throughput, device utilisation and energy over the *window* from the
first counted arrival to the last arrival (the offered load still arriving, so a saturated system shows its service
rate, not its drain). The system *keeps up* when the requests finished in the window are at least ``KEEP_UP`` of those
that arrived in it: in a steady state as many leave as arrive; past capacity the queue grows and only the service
rate leaves. Energy: each device at its active power while it works and its idle power otherwise, over the window,
divided by the requests finished in it.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from heterospec.replay.simulator.engines import DEVICES, RESOURCES
from heterospec.store.parquet import versioned

KEEP_UP = 0.9   # finished / arrived within the window: below this the queue grows (Poisson noise stays well above)

_KEYS = [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),        # target, target_sd, rsd, brsd, brsd_sd
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
]

LOAD_REQUESTS_SCHEMA = versioned("load_requests", 1, [
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
])

LOAD_POINTS_SCHEMA = versioned("load_points", 1, [
    *_KEYS,
    pa.field("point", pa.int32(), nullable=False),
    pa.field("purpose", pa.string(), nullable=False),       # unloaded | search (capacity bisection) | curve | run
    pa.field("arrivals", pa.string(), nullable=False),      # poisson | closed | timestamps
    pa.field("rate_rps", pa.float64()),                     # offered load (poisson); null otherwise
    pa.field("clients", pa.int32()),                        # closed loop; null otherwise
    pa.field("requests", pa.int32(), nullable=False),
    pa.field("counted", pa.int32(), nullable=False),
    pa.field("window_s", pa.float64(), nullable=False),     # first counted arrival to the last arrival
    pa.field("offered_rps", pa.float64(), nullable=False),  # requests that arrived in the window per second
    pa.field("throughput_rps", pa.float64(), nullable=False),   # requests that finished in the window per second
    pa.field("keeps_up", pa.bool_(), nullable=False),       # throughput >= KEEP_UP x offered
    pa.field("goodput_tok_s", pa.float64(), nullable=False),   # accepted tokens per second
    pa.field("latency_mean_s", pa.float64(), nullable=False),
    pa.field("p50_s", pa.float64(), nullable=False),
    pa.field("p90_s", pa.float64(), nullable=False),
    pa.field("p99_s", pa.float64(), nullable=False),
    pa.field("first_step_mean_s", pa.float64()),
    *[pa.field(f"queue_{r}_ms", pa.float64(), nullable=False) for r in DEVICES],
    *[pa.field(f"util_{r}", pa.float64(), nullable=False) for r in RESOURCES],
    *[pa.field(f"batch_{r}", pa.float64(), nullable=False) for r in DEVICES],   # mean batch while busy
    pa.field("energy_per_request_j", pa.float64(), nullable=False),
    pa.field("devices", pa.string(), nullable=False),       # policies, bounds and batch curves (DevicePlan.describe)
])

LOAD_CAPACITY_SCHEMA = versioned("load_capacity", 1, [
    *_KEYS,
    pa.field("percentile", pa.float64(), nullable=False),    # the SLO's latency percentile
    pa.field("slo_s", pa.float64(), nullable=False),
    pa.field("unloaded_s", pa.float64(), nullable=False),    # that percentile with one request at a time
    pa.field("unloaded_same", pa.float64(), nullable=False),  # share of problems whose latency, alone at batch 1 in
                                                              # the load replay, is the single-request replay's (1e-9)
    pa.field("capacity_rps", pa.float64(), nullable=False),  # the largest Poisson rate meeting the SLO (0: none)
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


def request_rows(reqs: list, counted_from: int, keys: dict, point: int) -> list[dict]:
    """LOAD_REQUESTS_SCHEMA rows (times in seconds from the first arrival of the run)."""
    rows = []
    for r in reqs:
        p = r.problem
        rows.append(dict(**keys, point=point, request=r.index, dataset=p.dataset, problem=p.problem,
                         arrival_s=r.arrival / 1e3, latency_s=r.latency / 1e3,
                         first_step_s=None if math.isnan(r.first_step) else (r.first_step - r.arrival) / 1e3,
                         **{f"queue_{k}_ms": r.queued[k] for k in RESOURCES},
                         accepted_tokens=p.accepted_tokens, counted=r.index >= counted_from))
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
    firsts = [(r.first_step - r.arrival) / 1e3 for r in counted if not math.isnan(r.first_step)]
    active, idle = power
    energy = sum(active[d] * busy[d] + idle[d] * max(span - busy[d], 0.0) for d in DEVICES) / 1e3
    return dict(
        **keys, requests=len(reqs), counted=len(counted), window_s=span / 1e3,
        offered_rps=arrived / span * 1e3 if span > 0 else math.inf,
        throughput_rps=len(finished) / span * 1e3 if span > 0 else 0.0,
        keeps_up=span > 0 and len(finished) >= KEEP_UP * arrived,
        goodput_tok_s=sum(r.problem.accepted_tokens for r in finished) / span * 1e3 if span > 0 else 0.0,
        latency_mean_s=float(np.mean(lat)) if lat else math.nan,
        p50_s=percentile(lat, 50), p90_s=percentile(lat, 90), p99_s=percentile(lat, 99),
        first_step_mean_s=float(np.mean(firsts)) if firsts else None,
        **{f"queue_{d}_ms": float(np.mean([r.queued[d] for r in counted])) if counted else 0.0 for d in DEVICES},
        **{f"util_{r}": min(1.0, busy[r] / span) if span > 0 else 0.0 for r in RESOURCES},
        **{f"batch_{d}": batch[d] for d in DEVICES},
        energy_per_request_j=energy / len(finished) if finished else math.nan)
