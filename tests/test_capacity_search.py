"""The capacity search against analytic queues: an M/D/1 and an M/M/2 system's capacity at an SLO computed from
their waiting-time distributions (Erlang's M/D/1 formula; Erlang C with exponential service), the hard limit of a
device (never reported above it), the search's rules on hand-made measures (no monotonicity assumed), and the
steady-state checks (queue growth, the P99's interval) on hand-made samples."""
from __future__ import annotations

import math
import random

import pytest

from heterospec.config import compose_config
from heterospec.config.hardware import system as hw_system
from heterospec.replay.load import serial_plan
from heterospec.replay.load.batching import Bounds, get_policy
from heterospec.replay.load.capacity import search
from heterospec.replay.load.load_metrics import percentile_interval, queue_growth
from heterospec.replay.load.stage import SystemMethod, alone, capacity_job, hard_limits, load_plan
from heterospec.replay.schedules import get_schedule
from heterospec.replay.simulator.problem import TracedProblem
from test_load_replay import TokenMs   # the target writes a token per ms; nothing else costs anything


def writes(tokens: int, k: int = 0) -> TracedProblem:
    """A request of ``tokens`` ms: one service on the target under :class:`TokenMs` (``k`` keeps the ids apart)."""
    return TracedProblem("synthetic", f"w{k}_{tokens}", 0, ["accept"], [tokens], [0], [0], [0], [tokens])


def job(problems: list[TracedProblem], lanes: int = 1) -> SystemMethod:
    """The target alone on ``lanes`` batch-1 servers: each request one service of its tokens in ms."""
    plan = serial_plan()
    if lanes > 1:
        plan = type(plan)({**plan.policies, "target": get_policy("lanes")},
                          {**plan.bounds, "target": Bounds(lanes=lanes)}, plan.curves, plan.notes)
    return SystemMethod(hw_system("gpu3", compose_config([])), "target", "queue", get_schedule("target_only"),
                        problems, TokenMs(), plan)


def capacity(j: SystemMethod, slo_s: float, *over: str) -> dict:
    plan = load_plan(compose_config([*over]))
    return capacity_job(j, plan, slo_s, alone(j))[1]


# ----------------------------------------------------------------------------- analytic capacities
def md1_wait_cdf(rho: float, t: float) -> float:
    """P(W <= t D) in an M/D/1 queue at utilisation rho (Erlang's formula, time in units of the service D)."""
    return (1 - rho) * sum((rho * (k - t)) ** k / math.factorial(k) * math.exp(-rho * (k - t))
                           for k in range(int(math.floor(t)) + 1))


def mmc_sojourn_tail(lam: float, mu: float, c: int, t: float) -> float:
    """P(T > t) in an M/M/c queue (FCFS): the wait is 0 with probability 1 - C (Erlang C), else exponential at
    c mu - lam; the service is exponential at mu."""
    a = lam / mu
    rho = a / c
    top = a ** c / math.factorial(c) / (1 - rho)
    erlang_c = top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)
    th = c * mu - lam
    both = (th * math.exp(-mu * t) - mu * math.exp(-th * t)) / (th - mu)
    return (1 - erlang_c) * math.exp(-mu * t) + erlang_c * both


def largest(ok, lo: float, hi: float) -> float:
    """The largest x in [lo, hi] with ok(x), ok decreasing (bisection to 1e-9)."""
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def test_analytic_oracles_by_hand():
    """M/D/1 at rho 0.5: P(W <= 0) = 1 - rho = 0.5; P(W <= D) = (1 - rho) e^rho = 0.824. M/M/1 (c = 1): the sojourn
    is exponential at mu - lam."""
    assert md1_wait_cdf(0.5, 0.0) == pytest.approx(0.5)
    assert md1_wait_cdf(0.5, 1.0) == pytest.approx(0.5 * math.exp(0.5))
    assert mmc_sojourn_tail(3.0, 5.0 + 1e-7, 1, 0.7) == pytest.approx(math.exp(-2.0 * 0.7), rel=1e-5)


def test_m_d_1_capacity_at_4_d():
    """One 37 ms server, an SLO of 4 D on the P99: the analytic capacity is the rate where P(W <= 3 D) = 0.99
    (12.51 requests/s). The least of three arrival seeds' capacities lies within 10 % of it, every seed's below the
    service rate, the interval over the seeds around it (benchmarks/load_capacity_oracle.py: five seeds at
    the default sample sizes)."""
    D = 37
    want = largest(lambda rho: md1_wait_cdf(rho, 3.0) >= 0.99, 0.01, 0.99) / (D / 1e3)
    assert want == pytest.approx(12.51, abs=0.01)
    row = capacity(job([writes(D)]), 4 * D / 1e3, "load.max_requests=4000", "load.seeds=3")
    assert row["capacity_rps"] == pytest.approx(want, rel=0.10), row
    assert row["capacity_lo_rps"] <= row["capacity_rps"] <= row["capacity_hi_rps"] < 1e3 / D
    assert row["limit_rps"] == pytest.approx(1e3 / D) and row["limit_device"] == "target"
    assert row["p99_s"] <= 4 * D / 1e3 and row["counted"] == 4000


def test_m_m_2_capacity():
    """Two servers, exponential services of mean 40 ms (a pool of 3,000 problems asked in a seeded order), an SLO
    of 200 ms on the P99: the analytic M/M/2 capacity within 15 % (the P99 of 4,000 queued latencies moves by
    about that much with the arrival seed; at 20,000 the replay's P99 at the analytic capacity is 0.195-0.202 s)."""
    rng = random.Random(5)
    pool = [writes(max(1, round(rng.expovariate(1 / 40))), k) for k in range(3000)]
    mean = sum(p.path_tokens[-1] for p in pool) / len(pool) / 1e3
    want = largest(lambda lam: mmc_sojourn_tail(lam, 1 / mean, 2, 0.2) <= 0.01, 0.1, 2 / mean - 1e-6)
    row = capacity(job(pool, lanes=2), 0.2, "load.max_requests=4000", "load.seeds=3")
    assert row["capacity_rps"] == pytest.approx(want, rel=0.15), (row["capacity_rps"], want)
    assert row["limit_rps"] == pytest.approx(2 / mean, rel=1e-9)


def test_a_loose_slo_stops_below_the_hard_limit():
    """With an SLO far above any steady latency the percentile binds late: the capacity is set by the steady state
    (the queue must not grow), below the server's service rate, and near it (an M/D/1 at rho 0.9 waits 4.5 D on
    average, far within 100 D)."""
    D = 37
    row = capacity(job([writes(D)]), 100 * D / 1e3, "load.max_requests=2000", "load.seeds=2")
    assert 0.85 * 1e3 / D <= row["capacity_rps"] <= row["capacity_hi_rps"] < 1e3 / D, row


def test_hard_limits_by_hand():
    """A 40 ms target on 3 lanes serves at most 75 requests/s; a batch of 4 costing 2x one serves 2x the batch-1
    rate (50 per s from 40 ms)."""
    j = job([writes(40)], lanes=3)
    assert hard_limits(j, alone(j)) == {"target": pytest.approx(75.0)}
    plan = serial_plan()
    batched = type(plan)({**plan.policies, "target": get_policy("continuous")},
                         {**plan.bounds, "target": Bounds(max_batch=4)},
                         {**plan.curves, "target": type(plan.curves["target"])(lambda b, c: 1 + (b - 1) / 3, "")},
                         plan.notes)
    j = SystemMethod(j.system, "target", "queue", j.schedule, j.problems, j.profile, batched)
    assert hard_limits(j, alone(j)) == {"target": pytest.approx(50.0)}


# ----------------------------------------------------------------------------- the search's rules
def test_search_brackets_a_threshold_and_never_tries_the_limit():
    for start in (1.0, 100.0):
        found = search(lambda r: (r <= 10.0, r, None), start, 8)
        assert 10.0 / 1.01 <= found.capacity <= 10.0
    found = search(lambda r: (True, r, None), 1.0, 4, limit=20.0)
    assert max(r for r, *_ in found.tried) < 20.0 and found.capacity < 20.0
    assert found.capacity >= 20.0 / 1.05   # bisected between the last met rate and the limit
    assert search(lambda r: (False, math.inf, None), 1.0, 4).capacity == 0.0


def test_a_slight_overload_does_not_keep_up():
    """Arrivals 5 % faster than the server's rate, 2,000 counted: 95 % of the arrivals finish in the window, which the
    old 10 % slack passed; the queue grows by about 5 % of them."""
    from heterospec.arrivals import poisson_times
    from heterospec.replay.load import replay_requests
    D = 37
    reqs = [(t, writes(D)) for t in poisson_times(1.05e3 / D, 2200, seed=4)]
    run = replay_requests(reqs, hw_system("gpu3", compose_config([])), "target_only", TokenMs(), warmup=200)
    assert run.point["throughput_rps"] >= 0.9 * run.point["offered_rps"]
    assert run.point["queue_grows"] and not run.point["keeps_up"]


# ----------------------------------------------------------------------------- steady state
def test_queue_growth_by_hand():
    """Arrivals every 1 ms. Served every 1 ms, 0.5 ms each: never more than one in the system, no growth. Served
    every 1.25 ms (80 % of the arrival rate): the number in the system grows by 0.2 per arrival, 200 over 1,000."""
    n = 1000
    arr = [float(i) for i in range(n)]
    mean, growth, grows = queue_growth(arr, [a + 0.5 for a in arr], 0)
    assert (mean, growth, grows) == (0.0, 0.0, False)
    ends = [1.25 * (i + 1) for i in range(n)]
    mean, growth, grows = queue_growth(arr, ends, 0)
    assert grows and growth == pytest.approx(0.2 * n, rel=0.05)


def test_percentile_interval_by_hand():
    """n = 100 values 1..100, P99: ranks 99 -/+ 1.96 sqrt(100 x 0.99 x 0.01) = 99 -/+ 1.95: values 97 and 100."""
    assert percentile_interval(list(range(1, 101)), 99) == (97.0, 100.0)
    lo, hi = percentile_interval(list(range(1, 10001)), 99)
    assert (lo, hi) == (9880.0, 9920.0)   # 9900 -/+ 1.96 sqrt(99) = 19.5
