"""What every batching policy shares: the device's queue, its busy time and the pause of a device that yields to
another (:class:`Server`), and lanes of batched operations that each leave when their own work is done
(:class:`Passes`)."""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Callable

from heterospec.replay.simulator.engines import uncut
from heterospec.replay.load.batching import Bounds

EPS = 1e-9   # ms: work left below this is done (times are sums of floats)


class Server:
    """One device under load. The simulator calls ``advance(now)`` before anything changes at ``now``, then
    ``ended``, ``cut``, ``offer`` and ``fill``; ``next_end`` says when it next needs the simulator."""
    policy = ""

    def __init__(self, name: str, bounds: Bounds, slowdown: Callable[[int, float], float]):
        self.name, self.bounds, self.slowdown = name, bounds, slowdown
        self.queue: deque = deque()
        self.paused = False          # yields to a busy device: no progress
        self.t = 0.0                 # time of the last advance
        self.busy_ms = 0.0           # time with work in progress (a lane's share for several lanes)
        self.batch_ms = 0.0          # sum over that time of the operations in progress (mean batch = / busy_ms)

    def pause(self, paused: bool) -> None:
        """Stop (or resume) progress: the device yields to a busy one."""
        self.paused = paused

    def offer(self, job, now: float) -> None:
        """A ready operation with work to do joins the queue."""
        self.queue.append(job)

    def drop(self, job) -> None:
        """Remove a queued operation (cancelled before it started)."""
        self.queue.remove(job)

    @property
    def busy(self) -> bool:
        raise NotImplementedError

    def advance(self, now: float) -> None:
        raise NotImplementedError

    def next_end(self) -> float:
        raise NotImplementedError

    def ended(self, now: float) -> list:
        raise NotImplementedError

    def cut(self, job, now: float) -> bool:
        """The running ``job``'s cancelling op ended: it stops once it has done the work it did so far or its
        ``atomic`` part (a forward pass in progress), whichever is more, and after the ``atomic`` part the ``grain``
        unit in progress (a token; :func:`heterospec.replay.simulator.engines.uncut`; ``job.final`` lowered to that); True when
        that is now (it is then removed)."""
        raise NotImplementedError

    def fill(self, now: float) -> list:
        """Start what the policy allows from the queue; returns the started operations."""
        raise NotImplementedError


class _Lane:
    """One lane's members, advancing together on a virtual clock counted in batch-1 ms of each member's work: an
    operation that joins at virtual time v with w ms of work leaves when the clock reaches v + w."""
    __slots__ = ("heap", "running", "kv", "v", "rate")

    def __init__(self):
        self.heap: list = []          # (virtual end, seq, job) of the members; stale entries skipped
        self.running: set = set()
        self.kv = 0                   # context tokens of the members
        self.v = 0.0                  # the virtual clock
        self.rate = 0.0               # dv/dt

    def clean(self) -> None:
        h = self.heap
        while h and (h[0][2] not in self.running or h[0][0] != h[0][2].vfin):
            heapq.heappop(h)

    def leave(self, job) -> None:
        self.running.discard(job)
        self.kv -= job.ctx_tokens
        if not self.running:          # restart the clock: keeps its sums exact
            self.v = 0.0
            self.heap.clear()


class Passes(Server):
    """``lanes`` lanes, each a batch of up to ``max_batch`` operations (within the KV bound ``kv_tokens``) whose
    members each do their own work: with b members at mean context c a pass (one token of each, one iteration)
    costs ``pace x slowdown(b, c)`` times a batch-1 pass, so every member advances at 1 / (pace x slowdown) of its
    batch-1 pace and leaves when its own work is done; the batch then runs at the pace of those left (4 and 40 ms
    of work at B = 2 and slowdown 1.3 leave at 5.2 and 41.2 ms). The simulator takes passes in the fluid limit
    (members join and leave at any instant), which moves an operation by less than one pass.

    ``joins``: a waiting operation joins a lane that is running as soon as it has a free slot (the next pass of an
    FPGA lane, the next iteration of continuous batching; an idle lane first, else the one with fewest members);
    otherwise it waits for its lane to empty and starts with the next batch (a batched prefill). At batch 1 and
    pace 1 an operation takes its own work."""
    joins = True

    def __init__(self, name, bounds, slowdown):
        super().__init__(name, bounds, slowdown)
        self.lanes = [_Lane() for _ in range(bounds.lanes)]
        self._seq = itertools.count()

    @property
    def busy(self) -> bool:
        return any(lane.running for lane in self.lanes)

    def _rate(self, lane: _Lane) -> None:
        b = len(lane.running)
        lane.rate = 0.0 if b == 0 else 1.0 / (self.bounds.pace * (1.0 if b == 1 else self.slowdown(b, lane.kv / b)))

    def advance(self, now: float) -> None:
        dt = now - self.t
        self.t = now
        if dt <= 0 or self.paused:
            return
        n = len(self.lanes)
        for lane in self.lanes:
            if lane.running:
                lane.v += dt * lane.rate
                self.busy_ms += dt / n
                self.batch_ms += dt * len(lane.running) / n

    def next_end(self) -> float:
        if self.paused:
            return math.inf
        end = math.inf
        for lane in self.lanes:
            if lane.running:
                lane.clean()
                end = min(end, self.t + max(lane.heap[0][0] - lane.v, 0.0) / lane.rate)
        return end

    def ended(self, now: float) -> list:
        out = []
        for lane in self.lanes:
            if not lane.running:
                continue
            lane.clean()
            # done: no work left, up to the rounding of the clock and of the time it was advanced to
            tol = max(EPS * max(1.0, abs(lane.v)), 8 * math.ulp(max(1.0, now)) * lane.rate)
            left = len(out)
            while lane.heap and lane.heap[0][0] - lane.v <= tol:
                job = heapq.heappop(lane.heap)[2]
                lane.leave(job)
                out.append(job)
                lane.clean()
            if len(out) > left:
                self._rate(lane)
        return out

    def cut(self, job, now: float) -> bool:
        lane = next((lane for lane in self.lanes if job in lane.running), None)
        if lane is None:
            raise RuntimeError(f"{self.name}: cut an operation that is not running")
        done = lane.v - job.vstart
        job.final = uncut(done, job.atomic, job.grain, job.final)
        if job.final <= done + EPS:
            job.final = done
            lane.leave(job)
            self._rate(lane)
            return True
        job.vfin = job.vstart + job.final
        heapq.heappush(lane.heap, (job.vfin, next(self._seq), job))
        return False

    def _room(self, lane: _Lane, job) -> bool:
        return len(lane.running) < self.bounds.max_batch and \
            (not lane.running or lane.kv + job.ctx_tokens <= self.bounds.kv_tokens)

    def _join(self, lane: _Lane, job) -> None:
        job.vstart = lane.v
        job.vfin = lane.v + job.final
        heapq.heappush(lane.heap, (job.vfin, next(self._seq), job))
        lane.running.add(job)
        lane.kv += job.ctx_tokens

    def fill(self, now: float) -> list:
        started, q = [], self.queue
        if self.joins:
            while q:
                open_ = [lane for lane in self.lanes if self._room(lane, q[0])]
                if not open_:
                    break
                lane = min(open_, key=lambda ln: len(ln.running))
                job = q.popleft()
                self._join(lane, job)
                started.append(job)
                self._rate(lane)
            return started
        for lane in self.lanes:
            if lane.running:
                continue
            while q and self._room(lane, q[0]):
                job = q.popleft()
                self._join(lane, job)
                started.append(job)
            self._rate(lane)
        return started
