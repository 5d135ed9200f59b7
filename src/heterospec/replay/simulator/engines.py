"""Operations on the four resources and the two engines that time them (``fast``, ``simpy``; see
:mod:`heterospec.replay.simulator.des`), plus the tally the metrics read."""
from __future__ import annotations

import math
from typing import Callable, Iterable

import simpy

from heterospec.errors import UserError
from heterospec.trio import ROLES

ROUNDING = 1e-9   # units: a stop this close to a unit's end is at its end (work is a difference of float times)

DEVICES = ROLES                  # each role on its own device
RESOURCES = DEVICES + ("link",)
ENGINES = ("fast", "simpy")


class Op:
    """One operation. ``dur`` is ms or a callable evaluated when the op starts (it may read earlier ops' times)."""
    __slots__ = ("res", "dur", "deps", "until", "kind", "disc", "role", "kv", "cap", "ref", "start", "end", "ev",
                 "chain", "work", "new", "atomic", "grain")

    def __init__(self, res, dur, deps, until, kind, disc, role, kv, cap, ref, start=math.nan, end=math.nan,
                 chain=math.nan, new=None, atomic=0.0, grain=0.0):
        self.res, self.dur, self.deps, self.until = res, dur, deps, until
        self.kind, self.disc, self.role, self.kv, self.cap, self.ref = kind, disc, role, kv, cap, ref
        self.new = new   # context tokens the target read that were not in its cache (None: all)
        self.atomic = atomic   # ms of work ``until`` cannot cut (a forward pass in progress: the prefetch's prefill)
        self.grain = grain     # after those, ms of each unit ``until`` cannot cut (the token in progress; 0: none)
        self.start, self.end, self.chain = start, end, chain
        self.work = end - start   # ms of progress: less than end - start while it yielded to another device
        self.ev = None

    @property
    def length(self) -> float:
        return self.end - self.start


class Engine:
    """The API policies use: ``run(...)`` issues an operation and returns its handle."""

    def __init__(self):
        self.ops: list[Op] = []

    def run(self, res: str, dur: float | Callable[[], float], deps: Iterable[Op] = (), *, until: Op | None = None,
            kind: str = "", disc: bool = False, role: str = "", kv: int = 0, cap: int = 0, ref: Op | None = None,
            new: int | None = None, atomic: float = 0.0, grain: float = 0.0) -> Op:
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref, new=new, atomic=atomic, grain=grain)
        self.ops.append(op)
        self._issue(op)
        return op

    def _issue(self, op: Op) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class Tally:
    """What the metrics need from an operation log: busy time per resource, the end of the last operation, the
    longest dependency chain, stall, and the discarded operations."""
    __slots__ = ("busy", "latency", "longest", "stall", "discarded")

    def __init__(self):
        self.busy = dict.fromkeys(RESOURCES, 0.0)
        self.latency = self.longest = self.stall = 0.0
        self.discarded: list[Op] = []

    def add(self, op: Op) -> None:
        self.busy[op.res] += op.work
        if op.end > self.latency:
            self.latency = op.end
        if op.chain > self.longest:
            self.longest = op.chain
        if op.ref is not None and op.end > op.ref.end:
            self.stall += op.end - op.ref.end
        if op.disc:
            self.discarded.append(op)

    @classmethod
    def of(cls, ops: list[Op]) -> "Tally":
        """From a finished log (the SimPy engine's): chains computed here, in issue order."""
        t = cls()
        for op in ops:
            c = 0.0
            for d in op.deps:
                if d.chain > c:
                    c = d.chain
            op.chain = c + (op.end - op.start)
            t.add(op)
        return t


def uncut(done: float, atomic: float, grain: float, dur: float) -> float:
    """The ms of work an operation of ``dur`` ms does when its cancelling op ends after ``done`` ms of it: its first
    ``atomic`` ms in any case, then whole units of ``grain`` ms (the unit in progress finishes; ``grain`` 0: it stops
    where it is)."""
    if done >= dur:
        return dur
    if done <= atomic or not grain:
        return min(max(done, atomic), dur)
    units = math.ceil((done - atomic) / grain - ROUNDING)
    return min(max(atomic + units * grain, done), dur)


def _yielding(owner_iv: list, s: float, dur: float, stop: float) -> tuple[float, float]:
    """(end, work) of ``dur`` ms of work from ``s`` that progresses only outside the owner's busy intervals
    (sorted, disjoint), stopped at ``stop`` at the latest."""
    t, left = s, dur
    for a, b in owner_iv:
        if b <= t:
            continue
        if a > t:                      # the owner is idle until a
            run = min(left, a - t, stop - t)
            t, left = t + run, left - run
            if left <= 0 or t >= stop:
                return t, dur - left
        t = min(max(t, b), stop)       # the owner is busy until b
        if t >= stop:
            return t, dur - left
    run = min(left, stop - t)
    return t + run, dur - left + run


class FastEngine(Engine):
    """start = max(resource free, dependency ends); end = start + dur, or the cancelling op's end if earlier.
    Also the dependency-chain length (``Op.chain``) for the lower bound, and the metrics' tally as it goes.

    A device that yields to another (``yields``) works only in the gaps of the other's operations: those issued
    before its own, and, for those issued later, their intervals from the previous pass (``future``: owner ->
    intervals in issue order). An owner's operation issued later can start while an earlier yielding op runs (a
    prefetch's uncut prefill outliving its verdict runs into the next verify); :meth:`exact` says whether the
    pass saw every such interval as it turned out, and :func:`run_fast` repeats the pass until it did."""

    def __init__(self, yields: dict | None = None, future: dict | None = None):
        super().__init__()
        self.free = dict.fromkeys(RESOURCES, 0.0)
        self.tally = Tally()
        self.yields = yields or {}
        self.iv = {o: [] for o in self.yields.values()}   # the owners' busy intervals, in order
        self.future = future or {}
        self.yielded: list[tuple[Op, int]] = []           # each yielding op and how many owner ops preceded it

    def run(self, res, dur, deps=(), *, until=None, kind="", disc=False, role="", kv=0, cap=0, ref=None, new=None,
            atomic=0.0, grain=0.0):
        s = self.free[res]
        c = 0.0
        for d in deps:
            if d.end > s:
                s = d.end
            if d.chain > c:
                c = d.chain
        if callable(dur):   # evaluated at its start; resolved so the metrics read a number
            dur = dur()
        stop = math.inf
        if until is not None:
            stop = until.end
            if stop != stop:
                raise RuntimeError("an operation's cancelling op must be issued before it")
            if stop < s:
                stop = s
        owner = self.yields.get(res)
        if owner is None:
            if (atomic or grain) and stop < s + dur:
                stop = s + uncut(stop - s, atomic, grain, dur)
            e = s + dur if s + dur < stop else stop
            w = e - s
        else:
            iv = self._owner_busy(owner)
            if atomic:
                e, w = _yielding(iv, s, min(atomic, dur), math.inf)
                if dur > atomic:
                    e, w2 = _yielding(iv, e, dur - atomic, max(stop, e))
                    w += w2
            else:
                e, w = _yielding(iv, s, dur, stop)
            if grain and w < dur:   # the unit in progress at the stop finishes
                e, w2 = _yielding(iv, e, uncut(w, atomic, grain, dur) - w, math.inf)
                w += w2
        c += e - s
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref, s, e, c, new, atomic, grain)
        op.work = w
        self.ops.append(op)
        if owner is not None:
            self.yielded.append((op, len(self.iv[owner])))
        self.free[res] = e
        if res in self.iv:   # every one, so the passes of run_fast number them alike
            self.iv[res].append((s, e))
        t = self.tally   # Tally.add, inlined: this is the simulator's innermost loop
        t.busy[res] += w
        if e > t.latency:
            t.latency = e
        if c > t.longest:
            t.longest = c
        if ref is not None and e > ref.end:
            t.stall += e - ref.end
        if disc:
            t.discarded.append(op)
        return op

    def _owner_busy(self, owner: str) -> list:
        """The owner's busy intervals as known now: those issued, then the later ones of the previous pass."""
        iv, later = self.iv[owner], self.future.get(owner, ())[len(self.iv[owner]):]
        return sorted(iv + later) if later else iv

    def exact(self) -> bool:
        """Whether every yielding op saw the owner intervals that overlap it as they turned out in this pass."""
        for op, k in self.yielded:
            owner = self.yields[op.res]
            seen, real = self.future.get(owner, ()), self.iv[owner]
            for j in range(k, len(real)):
                h = seen[j] if j < len(seen) else None
                if h != real[j] and (_overlaps(h, op) or _overlaps(real[j], op)):
                    return False
            if len(seen) > len(real) and any(_overlaps(h, op) for h in seen[len(real):]):
                return False
        return True


def _overlaps(iv, op: Op) -> bool:
    return iv is not None and iv[0] < op.end and iv[1] > op.start and iv[1] > iv[0]


def run_fast(issue: Callable[[Engine], None], yields: dict | None = None, passes: int = 100) -> FastEngine:
    """``issue(engine)`` on a FastEngine, repeated with the owners' intervals of the previous pass until every
    yielding op saw the owner ops that overlap it (one pass without ``yields``)."""
    eng = FastEngine(yields)
    issue(eng)
    for _ in range(passes):
        if not eng.yielded or eng.exact():
            return eng
        eng = FastEngine(yields, {o: list(v) for o, v in eng.iv.items()})
        issue(eng)
    raise RuntimeError(f"the fast engine's yielding ops did not settle in {passes} passes; use engine=simpy")


class SimpyEngine(Engine):
    """Every operation a SimPy process holding a ``simpy.Resource`` (capacity 1) per device and the link."""

    def __init__(self, yields: dict | None = None):
        super().__init__()
        self.env = simpy.Environment()
        self.res = {r: simpy.Resource(self.env, capacity=1) for r in RESOURCES}
        self.yields = yields or {}
        owners = set(self.yields.values())
        self.owner_starts = {o: self.env.event() for o in owners}   # fires when an op starts on the owner
        self.owner_busy = dict.fromkeys(owners)                       # fires when the owner's running op ends

    def _issue(self, op: Op) -> None:
        op.ev = self.env.process(self._proc(op))

    def _proc(self, op: Op):
        env = self.env
        with self.res[op.res].request() as req:
            yield req
            if op.deps:
                yield env.all_of([d.ev for d in op.deps])
            op.start = env.now
            dur = op.dur = op.dur() if callable(op.dur) else op.dur
            done = None
            if op.res in self.owner_starts:     # a device others yield to: tell them it is busy now
                started, self.owner_starts[op.res] = self.owner_starts[op.res], env.event()
                done = self.owner_busy[op.res] = env.event()
                started.succeed()
            owner = self.yields.get(op.res)
            first = min(op.atomic, dur) if op.until is not None else dur   # not cut by op.until
            if owner is not None:
                op.work = yield from self._yielding(owner, first, None)
                if dur > first:
                    op.work += yield from self._yielding(owner, dur - first, op.until.ev)
                if op.grain and op.work < dur:   # the unit in progress at the stop finishes
                    op.work += yield from self._yielding(owner, uncut(op.work, first, op.grain, dur) - op.work, None)
            else:
                if first > 0:
                    yield env.timeout(first)
                if dur > first:
                    yield env.timeout(dur - first) | op.until.ev
                    did = env.now - op.start
                    if op.grain and did < dur:   # the unit in progress at the stop finishes
                        yield env.timeout(uncut(did, first, op.grain, dur) - did)
            op.end = env.now
            if owner is None:
                op.work = op.end - op.start
            if done is not None:
                self.owner_busy[op.res] = None
                done.succeed()

    def _yielding(self, owner: str, dur: float, stop):
        """Progress only while ``owner`` is idle; stop at the event ``stop`` (preemption, as the fast engine computes);
        returns the work done."""
        env, left = self.env, dur
        while left > 1e-9 and not (stop is not None and stop.triggered):   # (a float left to run may not advance now)
            busy = self.owner_busy[owner]
            if busy is not None:
                yield env.any_of([busy] + ([stop] if stop is not None else []))
                continue
            t0 = env.now
            yield env.any_of([env.timeout(left), self.owner_starts[owner]] + ([stop] if stop is not None else []))
            left -= env.now - t0
        return dur if left <= 1e-9 else dur - left

    def finish(self) -> None:
        self.env.run()
        self.tally = Tally.of(self.ops)


def make_engine(name: str, yields: dict | None = None) -> Engine:
    if name == "fast":
        return FastEngine(yields)
    if name == "simpy":
        return SimpyEngine(yields)
    raise UserError(f"unknown simulation engine '{name}'; choose one of {list(ENGINES)}")
