"""What every batching policy shares: the device's queue, its busy time and the pause of a device that yields to
another (:class:`Server`), and passes of several operations that end together (:class:`Passes`)."""
from __future__ import annotations

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


class _Pass:
    """One lane's pass: its operations, its length, what is left of it and, while it runs, when it ends."""
    __slots__ = ("jobs", "length", "left", "end")

    def __init__(self, jobs: list, length: float, now: float):
        self.jobs, self.length, self.left, self.end = jobs, length, length, now + length


class Passes(Server):
    """``lanes`` lanes; an idle lane takes up to ``max_batch`` waiting operations (first come first served, within
    the KV bound) into one pass of ``pace x slowdown(b, mean context) x`` their mean work, which all end together
    (``pace``: :class:`~heterospec.replay.load.batching.Bounds`). At batch 1 and pace 1 a pass is the operation's own
    work."""

    def __init__(self, name, bounds, slowdown):
        super().__init__(name, bounds, slowdown)
        self.lanes: list[_Pass | None] = [None] * bounds.lanes

    @property
    def busy(self) -> bool:
        return any(p is not None for p in self.lanes)

    def pause(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        for p in self.lanes:
            if p is not None:
                p.end = math.inf if paused else self.t + p.left

    def advance(self, now: float) -> None:
        dt = now - self.t
        self.t = now
        if dt <= 0 or self.paused:
            return
        for p in self.lanes:
            if p is not None:
                p.left = p.end - now
                self.busy_ms += dt / len(self.lanes)
                self.batch_ms += dt * len(p.jobs) / len(self.lanes)

    def next_end(self) -> float:
        return min((p.end for p in self.lanes if p is not None), default=math.inf)

    def ended(self, now: float) -> list:
        out = []
        for i, p in enumerate(self.lanes):
            if p is not None and p.end <= now:
                out += p.jobs
                self.lanes[i] = None
        return out

    def cut(self, job, now: float) -> bool:
        for i, p in enumerate(self.lanes):
            if p is not None and job in p.jobs:
                pace = self.bounds.pace
                done = (p.length - p.left) / pace if len(p.jobs) == 1 else job.final * (1.0 - p.left / p.length)
                job.final = uncut(done, job.atomic, job.grain, job.final)
                if job.final <= done + EPS:
                    p.jobs.remove(job)
                    job.final = done
                    if not p.jobs:
                        self.lanes[i] = None
                    return True
                if len(p.jobs) == 1:   # alone in its pass: the pass shrinks to what it must still do
                    p.left = (job.final - done) * pace
                    p.end = math.inf if self.paused else now + p.left
                return False
        raise RuntimeError(f"{self.name}: cut an operation that is not running")

    def fill(self, now: float) -> list:
        started = []
        for i, p in enumerate(self.lanes):
            if p is not None or not self.queue:
                continue
            jobs, kv = [], 0
            while self.queue and len(jobs) < self.bounds.max_batch:
                j = self.queue[0]
                if jobs and kv + j.ctx_tokens > self.bounds.kv_tokens:
                    break
                jobs.append(self.queue.popleft())
                kv += j.ctx_tokens
            b = len(jobs)
            work = sum(j.final for j in jobs) / b
            length = (jobs[0].final if b == 1 else self.slowdown(b, kv / b) * work) * self.bounds.pace
            p = self.lanes[i] = _Pass(jobs, length, now)
            if self.paused:
                p.end = math.inf
            started += jobs
        return started
