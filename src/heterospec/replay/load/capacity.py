"""Capacity at an SLO: the largest Poisson rate a system sustains with its latency percentile within the limit.

The search (as Vidur's capacity search brackets its rate): from a starting rate, double until a rate misses (or
halve until one meets), then bisect between the last rate that met and the first that missed. What it assumes is
only what it checks:

* a rate *meets* when its load point says so (:mod:`.stage`: the percentile within the SLO and a steady state, the
  throughput equal to the arrival rate and no queue growing); every rate is a fresh replay of the same arrival seed;
* the capacity is the largest rate that met *and* below which every rate tried met too (the bracketing keeps every
  met rate below every missed one; :meth:`Search.settle` holds the capacity under the least miss whatever the order
  of the rates tried);
* no rate at or above ``limit`` (the system's hard limit: its busiest device's lanes over its busy time per request
  at its best batch) is tried or reported: no queue is steady there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

MAX_DOUBLINGS = 12
BELOW_LIMIT = 0.999   # the highest rate tried: just below the hard limit


@dataclass
class Search:
    """What the search found: ``capacity`` (requests/s; 0 when no rate tried met the SLO), every rate it tried with
    whether it met, the percentile it measured and the evaluation's result (in the order tried), and the result at
    capacity."""
    capacity: float = 0.0
    tried: list = field(default_factory=list)   # (rate, met, percentile s, the evaluation's result)
    best: object = None

    def settle(self) -> None:
        """``capacity`` and ``best``: the largest rate that met with no miss below it."""
        misses = [rate for rate, met, _, _ in self.tried if not met]
        ceiling = min(misses, default=math.inf)
        met = [(rate, res) for rate, ok, _, res in self.tried if ok and rate < ceiling]
        self.capacity, self.best = max(met, key=lambda x: x[0], default=(0.0, None))


def search(measure: Callable[[float], tuple[bool, float, object]], start: float, steps: int,
           limit: float = math.inf) -> Search:
    """``measure(rate) -> (meets, latency percentile in s, result)``; ``start``: the first rate tried (> 0);
    ``steps``: bisections after the bracket; ``limit``: the hard limit (module docstring)."""
    out = Search()
    top = limit * BELOW_LIMIT

    def meets(rate: float) -> bool:
        ok, q, res = measure(rate)
        out.tried.append((rate, ok, q, res))
        return ok

    lo = hi = None
    rate = min(start, top)
    if meets(rate):
        lo = rate
        for _ in range(MAX_DOUBLINGS):
            if rate >= top:
                hi = limit          # a miss by definition: the limit is not a steady rate
                break
            rate = min(rate * 2, top)
            if not meets(rate):
                hi = rate
                break
            lo = rate
        if hi is None:
            out.settle()
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
            out.settle()
            return out          # missed even far below the start: no capacity at this SLO
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    out.settle()
    return out
