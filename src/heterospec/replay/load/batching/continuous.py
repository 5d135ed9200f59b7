"""``continuous``: iteration-level batching (Orca, vLLM) of the target, or of a GPU draft. A waiting operation joins
the running batch as soon as it holds fewer than ``max_batch`` operations and their contexts leave room in the KV
cache (``kv_tokens``); it leaves when its work is done. With b operations at mean context c every iteration costs
``slowdown(b, c)`` times a batch-1 iteration, so each member advances at 1 / slowdown of its batch-1 pace. Members
join and leave between iterations; the simulator takes that in the fluid limit (at any instant), which moves an
operation by less than one iteration.

Work is counted in batch-1 milliseconds on a virtual clock that runs at the batch's pace (processor sharing): an
operation that joins at virtual time v with w ms of work ends when the clock reaches v + w."""
from __future__ import annotations

import heapq
import itertools
import math

from heterospec.replay.simulator.engines import uncut
from heterospec.replay.load.batching import policy
from heterospec.replay.load.batching.server import EPS, Server


@policy("continuous")
class Continuous(Server):
    def __init__(self, name, bounds, slowdown):
        super().__init__(name, bounds, slowdown)
        self.heap: list = []          # (virtual end, seq, job) of the running operations; stale entries skipped
        self.running: set = set()
        self.kv = 0                   # context tokens of the running operations
        self.v = 0.0                  # the virtual clock (batch-1 ms of progress of every member)
        self.rate = 0.0               # dv/dt
        self._seq = itertools.count()

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def _rate(self) -> None:
        b = len(self.running)
        self.rate = 0.0 if b == 0 else 1.0 if b == 1 else 1.0 / self.slowdown(b, self.kv / b)

    def advance(self, now: float) -> None:
        dt = now - self.t
        self.t = now
        if dt <= 0 or self.paused or not self.running:
            return
        self.v += dt * self.rate
        self.busy_ms += dt
        self.batch_ms += dt * len(self.running)

    def next_end(self) -> float:
        if self.paused or not self.running:
            return math.inf
        self._clean()
        return self.t + max(self.heap[0][0] - self.v, 0.0) / self.rate

    def _clean(self) -> None:
        h = self.heap
        while h and (h[0][2] not in self.running or h[0][0] != h[0][2].vfin):
            heapq.heappop(h)

    def ended(self, now: float) -> list:
        out = []
        self._clean()
        # done: no work left, up to the rounding of the clock and of the time it was advanced to
        tol = max(EPS * max(1.0, abs(self.v)), 8 * math.ulp(max(1.0, now)) * self.rate)
        while self.heap and self.heap[0][0] - self.v <= tol:
            _, _, job = heapq.heappop(self.heap)
            self._leave(job)
            out.append(job)
            self._clean()
        if out:
            self._rate()
        return out

    def _leave(self, job) -> None:
        self.running.discard(job)
        self.kv -= job.ctx_tokens
        if not self.running:          # restart the clock: keeps its sums exact
            self.v = 0.0
            self.heap.clear()

    def cut(self, job, now: float) -> bool:
        done = self.v - job.vstart
        job.final = uncut(done, job.atomic, job.grain, job.final)
        if job.final <= done + EPS:
            job.final = done
            self._leave(job)
            self._rate()
            return True
        job.vfin = job.vstart + job.final
        heapq.heappush(self.heap, (job.vfin, next(self._seq), job))
        return False

    def fill(self, now: float) -> list:
        started = []
        q, bound = self.queue, self.bounds
        while q and len(self.running) < bound.max_batch and \
                (not self.running or self.kv + q[0].ctx_tokens <= bound.kv_tokens):
            job = q.popleft()
            job.vstart = self.v
            job.vfin = self.v + job.final
            heapq.heappush(self.heap, (job.vfin, next(self._seq), job))
            self.running.add(job)
            self.kv += job.ctx_tokens
            started.append(job)
        if started:
            self._rate()
        return started
