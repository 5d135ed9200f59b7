"""The load simulator: many requests' operations on the shared devices, in time order.

Each request's operations come from its schedule's policy (:mod:`.record`). An operation is *ready* when its
dependencies have ended and so has the request's previous operation on the same resource (each request keeps the
in-order stream per device the single-request replay has); then its duration is read, and it joins its device's
queue, where the device's batching policy (:mod:`.batching`) decides when it runs and at what pace. An operation
with nothing left to do (a cancelled prefetch that never started, a zero-length marker) ends when it is ready. A
cancelling operation that ends stops the operations it cancels: a running one after its ``atomic`` part and then the
``grain`` unit in progress (a token, where the profile's ``cancel_units`` finish it), a queued one once it has done its
``atomic`` part; what it did stays on its device's books, thrown away or not. A device that yields to another
(``SystemParams.yields_to``) makes progress only while that one is idle.

The schedule may be an :class:`~.admission.Admission` (load-aware speculation): each arriving request's branch is
then its policy's, shown every device's waiting operations and the wait of its recent operations (an exponentially
weighted mean over about the last ``1 / WAIT_WEIGHT`` operations that started there), and the share of draft steps
accepted in the requests that speculated and finished.

With one request in the system at a time and every device at batch 1 this is exactly the single-request replay's
timing: each operation starts when its dependencies and its stream allow and runs for its own duration.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from heterospec.reasoning.speculation_policy import SPECULATE, DeviceView, SystemView
from heterospec.replay.simulator.engines import DEVICES, RESOURCES
from heterospec.replay.load.admission import Admission
from heterospec.replay.load.record import LoadOp, record
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx

WAIT_WEIGHT = 0.05    # an admission's view of a device's wait: each operation that starts moves it this share

@dataclass
class SimulatedRequest:
    """One request: when it arrived, its problem, and what the simulator measured of it (ms from time 0)."""
    index: int
    arrival: float
    problem: TracedProblem
    client: int = -1                 # closed loop: the client that sent it
    jobs: list = field(default_factory=list)
    left: int = 0                    # operations not yet ended
    end: float = math.nan            # its last operation's end
    first_step: float = math.nan     # when its first step was settled (nan: the schedule has no steps)
    queued: dict = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0.0))   # ms ready but waiting, per device
    problem_ms: float = 0.0          # the profile's time outside every call (added to its latency)
    branch: str | None = None        # under an admission: the branch its policy took (speculate | target)

    @property
    def latency(self) -> float:
        return self.end - self.arrival + self.problem_ms


class Simulation:
    """Requests arriving on one system under one schedule; ``servers``: resource -> batching policy instance."""

    def __init__(self, schedule: Any, ctx: Ctx, servers: dict):
        self.schedule, self.ctx, self.servers = schedule, ctx, servers
        self.yields = dict(ctx.system.yields_to)
        self.now = 0.0
        self.done: list[SimulatedRequest] = []
        self._touched: set = set()     # devices whose state changed at this instant
        self.on_done: Callable[[SimulatedRequest], None] | None = None
        self.admits = isinstance(schedule, Admission)
        self.waits = dict.fromkeys(DEVICES, 0.0)     # an admission's view: each device's recent wait (ms)
        self.steps = [0, 0]                           # ... and the speculating requests' accepted, settled steps

    # ------------------------------------------------------------------ requests
    def arrive(self, req: SimulatedRequest) -> None:
        """Issue the request's operations at its arrival (``self.now``)."""
        schedule = self.schedule
        if self.admits:
            req.branch, schedule = schedule.pick(self.view())
        prob, jobs = record(req.problem, schedule, self.ctx)
        req.problem, req.jobs, req.left = prob, jobs, len(jobs)
        req.problem_ms = self.ctx.profile.problem_ms
        last: dict[str, LoadOp] = {}
        for j in jobs:
            j.req = req
            j.pending = len(j.deps)
            for d in j.deps:
                d.after.append(j)
            prev = last.get(j.res)
            if prev is not None and prev not in j.deps:
                j.pending += 1
                prev.after.append(j)
            last[j.res] = j
            if j.until is not None:
                j.until.cancels.append(j)
        if not jobs:
            req.end = self.now
            self._finish(req)
            return
        for j in jobs:
            if j.pending == 0:
                self._ready(j)

    def view(self) -> SystemView:
        """What an admission's policy sees now: every device's waiting operations and recent wait, the acceptance."""
        accepted, settled = self.steps
        return SystemView({d: DeviceView(len(self.servers[d].queue), self.waits[d]) for d in DEVICES},
                          accepted / settled if settled else None)

    def _ready(self, j: LoadOp) -> None:
        now = self.now
        j.ready_at = now
        w = j.dur() if callable(j.dur) else j.dur
        j.dur = w
        j.final = w if not j.cut else min(w, j.atomic)
        if j.cut:
            j.work = j.final
        if j.final <= 0:
            j.final = 0.0
            self._end(j, now, now)
        else:
            self.servers[j.res].offer(j, now)
            self._touched.add(j.res)

    def _end(self, j: LoadOp, start: float, end: float) -> None:
        j.start, j.end, j.work, j.done = start, end, j.final, True
        req = j.req
        req.queued[j.res] += start - j.ready_at
        if self.admits and j.res in self.waits:
            self.waits[j.res] += WAIT_WEIGHT * (start - j.ready_at - self.waits[j.res])
        if j.first_step:
            req.first_step = end
        for c in j.cancels:
            if not c.done:
                self._cancel(c)
        for a in j.after:
            a.pending -= 1
            if a.pending == 0:
                self._ready(a)
        req.left -= 1
        if req.left == 0:
            req.end = end
            self._finish(req)

    def _cancel(self, c: LoadOp) -> None:
        """``c``'s cancelling op ended (now): not ready yet, queued, or running."""
        c.cut = True
        if c.pending > 0:
            return
        server = self.servers[c.res]
        server.advance(self.now)
        self._touched.add(c.res)
        if math.isnan(c.start):
            if c in server.queue:
                c.final = min(c.final, c.atomic)
                c.work = c.final
                if c.final <= 0:
                    server.drop(c)
                    self._end(c, self.now, self.now)
            return
        if server.cut(c, self.now):
            self._end(c, c.start, self.now)
        else:
            c.work = c.final

    def _finish(self, req: SimulatedRequest) -> None:
        if self.admits and req.branch == SPECULATE and req.problem.outcome:
            self.steps[0] += sum(o == "accept" for o in req.problem.outcome)
            self.steps[1] += len(req.problem.outcome)
        self.done.append(req)
        if self.on_done is not None:
            self.on_done(req)

    # ------------------------------------------------------------------ the event loop
    def run(self, arrivals: list[SimulatedRequest], marks: set = frozenset()) -> list[SimulatedRequest]:
        """Every request of ``arrivals`` (in arrival order; more may be added by ``on_done``, see :meth:`add`) to
        its end. The devices' books are read as each request whose index is in ``marks`` arrives (:attr:`books`:
        request index -> resource -> (busy ms, batch ms) so far), so two of them bound a window."""
        self._arrivals: list = []
        for r in arrivals:
            self.add(r)
        servers = self.servers
        nxt = dict.fromkeys(servers, math.inf)   # each device's next end, recomputed when it was touched
        self.books: dict = {}
        touched = self._touched
        while True:
            t_arr = self._arrivals[0][0] if self._arrivals else math.inf
            t_end = min(nxt.values())
            t = t_arr if t_arr < t_end else t_end
            if t == math.inf:
                break
            self.now = t
            if t_end <= t:
                for r, s in servers.items():
                    if nxt[r] <= t:
                        s.advance(t)
                        touched.add(r)
                        for j in s.ended(t):
                            self._end(j, j.start, t)
            while self._arrivals and self._arrivals[0][0] <= t:
                req = heapq.heappop(self._arrivals)[2]
                if req.index in marks:
                    for s in servers.values():
                        s.advance(t)
                    self.books[req.index] = {r: (s.busy_ms, s.batch_ms) for r, s in servers.items()}
                self.arrive(req)
            self._settle()
            for r in touched:
                nxt[r] = servers[r].next_end()
            touched.clear()
        return self.done

    def add(self, req: SimulatedRequest) -> None:
        heapq.heappush(self._arrivals, (req.arrival, req.index, req))

    def _settle(self) -> None:
        """Start what the policies of the devices touched at this instant allow, then pause the devices whose owner
        is busy (nothing started ends at once: only a cut ends an operation on the spot)."""
        now = self.now
        for r in list(self._touched):
            s = self.servers[r]
            s.advance(now)
            for j in s.fill(now):
                j.start = now
        for res, owner in self.yields.items():
            s = self.servers[res]
            busy = self.servers[owner].busy
            if busy != s.paused:
                s.advance(now)
                s.pause(busy)
                self._touched.add(res)


def make_servers(policies: dict, bounds: dict, slowdowns: dict) -> dict:
    """resource -> a server of its batching policy class (``policies``: resource -> class)."""
    return {r: policies[r](r, bounds[r], slowdowns[r]) for r in RESOURCES}
