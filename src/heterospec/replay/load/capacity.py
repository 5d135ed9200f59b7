"""Capacity at an SLO: the largest Poisson rate whose latency percentile stays within the limit, found the way
Vidur's capacity search finds it: from a starting rate, double until the SLO is missed (or halve until it is met),
then bisect between the last rate that met it and the first that did not. Every point replays the same arrival
seed, so a higher rate is the same requests closer together and the percentile grows with the rate."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

MAX_DOUBLINGS = 12


@dataclass
class Search:
    """What the search found: ``capacity`` (requests/s; 0 when even the lowest rate tried missed the SLO) and every
    rate it tried with the percentile it measured (in the order tried)."""
    capacity: float = 0.0
    tried: list = field(default_factory=list)   # (rate, percentile s, the evaluation's result)
    best: object = None                        # the result at capacity


def search(measure: Callable[[float], tuple[float, object]], slo_s: float, start: float, steps: int) -> Search:
    """``measure(rate) -> (latency percentile in s, result)``; ``start``: the first rate tried (> 0)."""
    out = Search()

    def meets(rate: float) -> bool:
        q, res = measure(rate)
        out.tried.append((rate, q, res))
        ok = q <= slo_s
        if ok and rate > out.capacity:
            out.capacity, out.best = rate, res
        return ok

    lo = hi = None
    rate = start
    if meets(rate):
        lo = rate
        for _ in range(MAX_DOUBLINGS):
            rate *= 2
            if not meets(rate):
                hi = rate
                break
            lo = rate
        if hi is None:
            return out          # met at every rate tried: capacity is at least the last one
    else:
        hi = rate
        for _ in range(MAX_DOUBLINGS):
            rate /= 2
            if meets(rate):
                lo = rate
                break
            hi = rate
        if lo is None:
            return out          # missed even far below the start: no capacity at this SLO
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return out
