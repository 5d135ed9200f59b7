"""When requests arrive, for the load replay and the serving executor alike (one definition, so a serving run and its
replay see the same requests at the same times).

* ``poisson``: an open loop at ``rate`` requests per second, exponential gaps drawn from ``seed``;
* ``closed``: ``clients`` users, each sending its next request ``think_s`` after its last one finished (no times
  ahead: whoever runs the requests releases the next one; :func:`open_times` refuses it);
* ``timestamps``: the arrival times in seconds in a text file, one per line (``#`` comments and blank lines
  skipped), in order.

Which problem each request asks is a seeded draw over the problems (:func:`request_order`), with every problem used
once before any is used again.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from heterospec.errors import UserError

ARRIVAL_KINDS = ("poisson", "closed", "timestamps")


@dataclass(frozen=True)
class Arrivals:
    """An arrival process (see the module docstring); ``key`` names its config section in error messages."""
    kind: str = "poisson"
    rate: float = 1.0            # poisson: requests per second
    clients: int = 1             # closed: users in the loop
    think_s: float = 0.0         # closed: seconds between a user's answer and its next request
    path: str = ""               # timestamps: the file
    seed: int = 0
    key: str = "arrivals"

    def __post_init__(self):
        if self.kind not in ARRIVAL_KINDS:
            raise UserError(f"{self.key}.kind: '{self.kind}', expected one of {list(ARRIVAL_KINDS)}")
        if self.kind == "poisson" and not (self.rate > 0 and math.isfinite(self.rate)):
            raise UserError(f"{self.key}.rate: {self.rate}, expected a rate > 0 requests per second")
        if self.kind == "closed" and self.clients < 1:
            raise UserError(f"{self.key}.clients: {self.clients}, expected 1 or more")
        if self.kind == "closed" and not self.think_s >= 0:
            raise UserError(f"{self.key}.think_s: {self.think_s}, expected >= 0 seconds")
        if self.kind == "timestamps" and not self.path:
            raise UserError(f"{self.key}.path: empty; a timestamps arrival process reads its times from a file")


def poisson_times(rate: float, n: int, seed: int = 0) -> list[float]:
    """``n`` arrival times (seconds from 0, the first at its own gap) of a Poisson process at ``rate`` per second."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def read_timestamps(path: str | Path) -> list[float]:
    """The arrival times in ``path``: one number of seconds per line, non-decreasing, >= 0; one line naming the file
    and line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: arrival timestamps file not found")
    out: list[float] = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            t = float(text)
        except ValueError:
            raise UserError(f"{path}:{no}: '{text}' is not a number of seconds") from None
        if not (t >= 0 and math.isfinite(t)):
            raise UserError(f"{path}:{no}: {t} s; expected a time >= 0")
        if out and t < out[-1]:
            raise UserError(f"{path}:{no}: {t} s comes before the line above it ({out[-1]} s); the times must be in "
                            f"order")
        out.append(t)
    if not out:
        raise UserError(f"{path}: no arrival times in it")
    return out


def open_times(a: Arrivals, n: int) -> list[float]:
    """The first ``n`` arrival times of an open process (a timestamps file gives at most its own lines)."""
    if a.kind == "poisson":
        return poisson_times(a.rate, n, a.seed)
    if a.kind == "timestamps":
        return read_timestamps(a.path)[:n]
    raise UserError(f"{a.key}.kind: closed has no arrival times ahead; each request follows one that finished")


def request_order(problems: int, requests: int, seed: int = 0) -> list[int]:
    """Which problem (an index below ``problems``) each of ``requests`` requests asks: seeded shuffles of all the
    problems, one after another, so every problem is asked once before any is asked again."""
    if problems < 1:
        raise UserError("no problems to draw requests from")
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < requests:
        batch = list(range(problems))
        rng.shuffle(batch)
        out += batch
    return out[:requests]
