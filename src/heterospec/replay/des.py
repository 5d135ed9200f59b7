"""Discrete-event replay of step traces on a modelled heterogeneous system.

Four resources: the ``draft``, ``prm`` and ``target`` devices and the ``link``. A schedule policy
(:mod:`heterospec.replay.schedules`) turns one problem's steps into *operations*: "run this for that long on that
resource, after those operations" (optionally "... but stop when that operation ends", for a prefetch or a
speculative draft that is cancelled by a decision; its first ``atomic`` ms are not cut: a forward pass in progress
finishes). Each resource runs its operations in the order the policy
issued them (an in-order stream, like a CUDA stream or the FPGA's command queue). A device may *yield to* another
(``SystemConfig.yields_to``, e.g. cpu3 on two cores: the target runs on the PRM's core at a lower OS priority): its
operations then progress only while that device is idle, so they take longer than their work (``Op.work``).

Two engines execute the same operations and give the same times:

* ``simpy`` — every operation is a SimPy process that requests its resource (a ``simpy.Resource``) when issued,
  waits for its dependencies, holds the resource for its duration (or until its cancelling operation ends);
* ``fast`` — the same rule computed directly: start = max(resource free, dependencies' ends). Used for grids
  (SimPy's per-event overhead is ~50x larger); tests check the two agree.

A profile's ``problem_ms`` (the measured profile: controller time before the first and after the last call) is
added to every problem's latency. From the operation log come the metrics (``RESULTS_SCHEMA``): latency, accepted tokens, goodput, energy per device
(active power while busy, idle power otherwise, over the problem's latency), J/token, stall (time between a
rejection and the target's output), communication time and share, discarded tokens and their energy, and a lower
bound: max(each resource's busy time, the dependency chain with realised durations); efficiency = bound / latency.

Energy of discarded work is *marginal*: (active - idle power) x the time the device spent on work whose output was
thrown away, i.e. what the system would have saved by not doing it (the idle power is paid either way while the
problem runs). ``discarded_energy_j`` counts every discarded operation (rejected draft steps, which every schedule
has, cancelled speculative drafts, unused target prefetches); ``speculation_waste_j`` only what speculation adds
(the last two), zero for the sequential baseline.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import pyarrow as pa
import simpy

from heterospec.errors import UserError
from heterospec.replay.profiles import LatencyProfile, get_profile
from heterospec.store.parquet import versioned

DEVICES = ("draft", "prm", "target")
RESOURCES = DEVICES + ("link",)
ENGINES = ("fast", "simpy")


# ----------------------------------------------------------------------------- system
@dataclass(frozen=True)
class SystemParams:
    """What the simulator needs from a SystemConfig: powers per device, the link, device kinds."""
    name: str
    power_active_w: dict
    power_idle_w: dict
    kinds: dict
    link_bandwidth_gbs: float = 16.0
    link_latency_us: float = 1.0
    yields_to: dict = field(default_factory=dict)   # device -> device whose core it shares at a lower priority

    @classmethod
    def from_config(cls, cfg: Any) -> "SystemParams":
        """From a SystemConfig dataclass, a DictConfig or a plain dict with the same keys."""
        def get(o, k, default=None):
            if isinstance(o, dict):
                return o.get(k, default)
            try:
                return o[k] if hasattr(o, "__getitem__") and not hasattr(o, "__dataclass_fields__") else getattr(o, k)
            except (KeyError, AttributeError):
                return default
        try:
            devs = {r: get(cfg, r) for r in DEVICES}
            link = get(cfg, "link") or {}
            sysp = cls(name=str(get(cfg, "name")),
                       power_active_w={r: float(get(devs[r], "power_active_w")) for r in DEVICES},
                       power_idle_w={r: float(get(devs[r], "power_idle_w")) for r in DEVICES},
                       kinds={r: str(get(devs[r], "kind", "gpu")) for r in DEVICES},
                       link_bandwidth_gbs=float(get(link, "bandwidth_gbs", 16.0)),
                       link_latency_us=float(get(link, "latency_us", 1.0)),
                       yields_to={str(k): str(v) for k, v in dict(get(cfg, "yields_to") or {}).items()})
        except (TypeError, ValueError) as e:
            raise UserError(f"system config '{get(cfg, 'name')}': missing or bad power/link field ({e})") from None
        for k, v in sysp.yields_to.items():
            if k not in DEVICES or v not in DEVICES or k == v:
                raise UserError(f"system config '{sysp.name}': yields_to {k}: {v} must name two of {list(DEVICES)}")
            if v in sysp.yields_to:
                raise UserError(f"system config '{sysp.name}': yields_to chains {k} -> {v} -> {sysp.yields_to[v]}")
        return sysp

    def link_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        bw = self.link_bandwidth_gbs
        return self.link_latency_us * 1e-3 + (0.0 if math.isinf(bw) else nbytes / (bw * 1e9) * 1e3)


PREFETCH_OUTCOMES = ("auto", "recorded", "simulated")


@dataclass
class Ctx:
    """What a policy may use: the latency profile, the system, and whether the target's work on a rejected step is
    what the trace records (``recorded``; None: the profile's ``honours_trace``, see :mod:`.profiles`)."""
    profile: LatencyProfile
    system: SystemParams
    recorded: bool | None = None

    def __post_init__(self):
        if self.recorded is None:
            self.recorded = self.profile.honours_trace
        bw = self.system.link_bandwidth_gbs
        self._per_token_ms = 0.0 if math.isinf(bw) else self.profile.bytes_per_token / (bw * 1e9) * 1e3
        self._hop_ms = self.system.link_latency_us * 1e-3

    def comm(self, tokens: int) -> float:
        """Token ids over the link (``SystemParams.link_ms`` of their bytes)."""
        return self._hop_ms + tokens * self._per_token_ms if tokens > 0 else 0.0


@dataclass
class Problem:
    """One problem's steps as plain lists (see :mod:`heterospec.replay.steps`)."""
    dataset: str
    problem: str
    prompt: int
    outcome: list
    d: list
    t: list
    kvv: list
    kvt: list
    path: list
    trace_set: str = ""
    scored: list | None = None   # per step: the PRM scores the target's step (None: every one, as in BRSD)
    r: list | None = None        # per step: tokens of a failed rescue before a backtrack (None: none)
    crit: list | None = None     # per step: recorded target tokens left after the prefetch (None: not recorded)
    dkv: list | None = None      # per step: the draft's context by the trace's replay rule (None: kvv)

    @property
    def accepted_tokens(self) -> int:
        return self.path[-1] if self.path else 0

    @property
    def backtracks(self) -> int:
        return sum(1 for o in self.outcome if o == "backtrack")

    def with_prompt_in_context(self) -> "Problem":
        """The same steps with context lengths counting the prompt (for profiles that model it)."""
        P = self.prompt
        return replace(self, kvv=[k + P for k in self.kvv], kvt=[k + P for k in self.kvt])


def problems_from_steps(steps: pa.Table) -> list[Problem]:
    cols = steps.select(["dataset", "problem", "prompt_tokens", "outcome", "draft_tokens", "target_tokens",
                         "kv_verify", "kv_target", "path_tokens", "trace_set", "target_scored",
                         "rescue_tokens", "critical_tokens", "draft_kv"]).to_pydict()
    out: list[Problem] = []
    n = len(cols["problem"])
    i = 0
    while i < n:
        j = i
        key = (cols["trace_set"][i], cols["dataset"][i], cols["problem"][i])
        while j < n and (cols["trace_set"][j], cols["dataset"][j], cols["problem"][j]) == key:
            j += 1
        out.append(Problem(key[1], key[2], cols["prompt_tokens"][i], cols["outcome"][i:j],
                           cols["draft_tokens"][i:j], cols["target_tokens"][i:j], cols["kv_verify"][i:j],
                           cols["kv_target"][i:j], cols["path_tokens"][i:j], key[0], cols["target_scored"][i:j],
                           cols["rescue_tokens"][i:j], cols["critical_tokens"][i:j],
                           None if cols["draft_kv"][i] is None else cols["draft_kv"][i:j]))
        i = j
    return out


# ----------------------------------------------------------------------------- operations and engines
class Op:
    """One operation. ``dur`` is ms or a callable evaluated when the op starts (it may read earlier ops' times)."""
    __slots__ = ("res", "dur", "deps", "until", "kind", "disc", "role", "kv", "cap", "ref", "start", "end", "ev",
                 "chain", "work", "new", "atomic")

    def __init__(self, res, dur, deps, until, kind, disc, role, kv, cap, ref, start=math.nan, end=math.nan,
                 chain=math.nan, new=None, atomic=0.0):
        self.res, self.dur, self.deps, self.until = res, dur, deps, until
        self.kind, self.disc, self.role, self.kv, self.cap, self.ref = kind, disc, role, kv, cap, ref
        self.new = new   # context tokens the target read that were not in its cache (None: all)
        self.atomic = atomic   # ms of work ``until`` cannot cut (a forward pass in progress: the prefetch's prefill)
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
            new: int | None = None, atomic: float = 0.0) -> Op:
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref, new=new, atomic=atomic)
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

    A device that yields to another (``yields``) works only in the gaps of the other's operations issued before
    its own; the policies issue a step's PRM operation before the target operations that overlap it."""

    def __init__(self, yields: dict | None = None):
        super().__init__()
        self.free = dict.fromkeys(RESOURCES, 0.0)
        self.tally = Tally()
        self.yields = yields or {}
        self.iv = {o: [] for o in self.yields.values()}   # the owners' busy intervals, in order

    def run(self, res, dur, deps=(), *, until=None, kind="", disc=False, role="", kv=0, cap=0, ref=None, new=None,
            atomic=0.0):
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
            if atomic and stop < s + atomic:
                stop = s + atomic
            e = s + dur if s + dur < stop else stop
            w = e - s
        elif atomic:
            e, w = _yielding(self.iv[owner], s, min(atomic, dur), math.inf)
            if dur > atomic:
                e, w2 = _yielding(self.iv[owner], e, dur - atomic, max(stop, e))
                w += w2
        else:
            e, w = _yielding(self.iv[owner], s, dur, stop)
        c += e - s
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref, s, e, c, new, atomic)
        op.work = w
        self.ops.append(op)
        self.free[res] = e
        if res in self.iv and e > s:
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
            else:
                if first > 0:
                    yield env.timeout(first)
                if dur > first:
                    yield env.timeout(dur - first) | op.until.ev
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


# ----------------------------------------------------------------------------- metrics
RESULTS_SCHEMA = versioned("replay_results", 2, [
    pa.field("run", pa.string(), nullable=False),           # results/<run>/ ("" outside a run)
    pa.field("trace_set", pa.string(), nullable=False),     # the traces' set (with_bt, no_bt, collect, ...)
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
    pa.field("steps", pa.int32(), nullable=False),
    pa.field("backtracks", pa.int32(), nullable=False),     # backtrack steps in the trace
    pa.field("latency_ms", pa.float64(), nullable=False),
    pa.field("accepted_tokens", pa.int64(), nullable=False),
    pa.field("goodput_tok_s", pa.float64(), nullable=False),
    pa.field("busy_draft_ms", pa.float64(), nullable=False),
    pa.field("busy_prm_ms", pa.float64(), nullable=False),
    pa.field("busy_target_ms", pa.float64(), nullable=False),
    pa.field("energy_draft_j", pa.float64(), nullable=False),
    pa.field("energy_prm_j", pa.float64(), nullable=False),
    pa.field("energy_target_j", pa.float64(), nullable=False),
    pa.field("energy_j", pa.float64(), nullable=False),
    pa.field("j_per_token", pa.float64(), nullable=False),
    pa.field("stall_ms", pa.float64(), nullable=False),
    pa.field("comm_ms", pa.float64(), nullable=False),
    pa.field("comm_share", pa.float64(), nullable=False),
    pa.field("discarded_draft_tokens", pa.int64(), nullable=False),
    pa.field("discarded_target_tokens", pa.int64(), nullable=False),
    pa.field("discarded_energy_j", pa.float64(), nullable=False),   # marginal energy of all discarded work
    pa.field("speculation_waste_j", pa.float64(), nullable=False),  # ... of cancelled speculative drafts + prefetches
    pa.field("lower_bound_ms", pa.float64(), nullable=False),
    pa.field("efficiency", pa.float64(), nullable=False),
])


def metrics(tally: Tally, prob: Problem, ctx: Ctx) -> dict:
    busy, latency, stall, longest = tally.busy, tally.latency, tally.stall, tally.longest
    disc_tok = {"draft": 0, "target": 0}
    disc_e = spec_e = 0.0
    pa_w = ctx.system.power_active_w
    extra_w = {r: pa_w[r] - ctx.system.power_idle_w[r] for r in DEVICES}
    for op in tally.discarded:
        ln = op.work
        disc = op.disc() if callable(op.disc) else op.disc
        if disc and op.res in extra_w:
            e = extra_w[op.res] * ln / 1e3
            disc_e += e
            if op.kind == "prefetch" or op.kind == "spec_draft":
                spec_e += e
            if op.cap:
                if op.until is None or ln >= op.dur * (1 - 1e-12):   # ran to completion (up to rounding)
                    disc_tok[op.role] += op.cap
                else:
                    disc_tok[op.role] += ctx.profile.tokens_within(op.role, op.kv, ln, op.cap, op.new)
    energy = {r: (pa_w[r] * busy[r] + ctx.system.power_idle_w[r] * (latency - busy[r])) / 1e3 for r in DEVICES}
    total_e = sum(energy.values())
    acc = prob.accepted_tokens
    bound = max(longest, *busy.values())
    return dict(steps=len(prob.d), backtracks=prob.backtracks, latency_ms=latency, accepted_tokens=acc,
                goodput_tok_s=acc / latency * 1e3 if latency > 0 else 0.0,
                busy_draft_ms=busy["draft"], busy_prm_ms=busy["prm"], busy_target_ms=busy["target"],
                energy_draft_j=energy["draft"], energy_prm_j=energy["prm"], energy_target_j=energy["target"],
                energy_j=total_e, j_per_token=total_e / acc if acc > 0 else math.inf, stall_ms=stall,
                comm_ms=busy["link"], comm_share=busy["link"] / latency if latency > 0 else 0.0,
                discarded_draft_tokens=disc_tok["draft"], discarded_target_tokens=disc_tok["target"],
                discarded_energy_j=disc_e, speculation_waste_j=spec_e, lower_bound_ms=bound,
                efficiency=bound / latency if latency > 0 else 1.0)


# ----------------------------------------------------------------------------- drivers
def simulate_problem(prob: Problem, schedule: Any, ctx: Ctx, engine: str = "fast") -> tuple[dict, list[Op]]:
    """One problem under one schedule (a name in conf/schedule, a ScheduleConfig or a Schedule)."""
    from heterospec.replay.schedules import get_schedule
    policy = get_schedule(schedule).policy
    if ctx.profile.context_includes_prompt and prob.prompt:
        prob = prob.with_prompt_in_context()
    eng = make_engine(engine, ctx.system.yields_to)
    policy(prob, ctx, eng)
    eng.finish()
    oh = ctx.profile.problem_ms
    if oh:   # controller time outside every call: on the critical path of the whole problem
        eng.tally.latency += oh
        eng.tally.longest += oh
    return metrics(eng.tally, prob, ctx), eng.ops


def simulate(steps: pa.Table | list[Problem], systems: Iterable[Any], schedules: Iterable[Any],
             profile: str | LatencyProfile | Callable[[Any], LatencyProfile] = "paper_v12",
             engine: str = "fast", workers: int = 1, run: str = "", recorded: bool | None = None) -> pa.Table:
    """Every problem x system x schedule. ``systems``: SystemConfig-like objects or SystemParams; ``schedules``:
    names or ScheduleConfig-like objects; ``profile``: a name, a profile, or ``profile(system) -> profile`` for
    profiles that depend on the system's hardware. ``workers`` > 1 splits the grid over forked processes (same
    rows, same order). ``run`` fills the run column. ``recorded``: rejected steps' target work as the trace
    records it (True), simulated (False), or as the profile says (None; :class:`Ctx`)."""
    from heterospec.replay.schedules import get_schedule
    probs = problems_from_steps(steps) if isinstance(steps, pa.Table) else list(steps)
    scheds = [get_schedule(s) for s in schedules]
    make_engine(engine)
    jobs: list[tuple[Ctx, Any, list[Problem], str]] = []
    for system in systems:
        sysp = system if isinstance(system, SystemParams) else SystemParams.from_config(system)
        if isinstance(profile, LatencyProfile):
            prof = profile
        elif callable(profile):
            prof = profile(system)
        else:
            prof = get_profile(profile, system=system if not isinstance(system, SystemParams) else None)
        jobs += [(Ctx(prof, sysp, recorded), sched, probs, engine, run) for sched in scheds]
    if workers <= 1 or len(jobs) * len(probs) < 2000:
        return pa.concat_tables([_replay_job(j) for j in jobs]) if jobs else RESULTS_SCHEMA.empty_table()
    return _in_processes(jobs, workers)


def _replay_job(job: tuple) -> pa.Table:
    ctx, sched, probs, engine, run = job
    rows = []
    for prob in probs:
        m, _ = simulate_problem(prob, sched, ctx, engine)
        m.update(run=run, trace_set=prob.trace_set, dataset=prob.dataset, problem=prob.problem, system=ctx.system.name,
                 schedule=sched.name, profile=ctx.profile.name)
        rows.append(m)
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)


_JOBS: list = []   # the grid, inherited by forked workers (profiles need not be picklable)


def _replay_chunk(k: int) -> pa.Table:
    return _replay_job(_JOBS[k])


def _in_processes(jobs: list, workers: int) -> pa.Table:
    """The grid split into ~4 chunks per worker (by problem), replayed in forked processes, concatenated in order."""
    import multiprocessing as mp
    per = max(1, -(-len(jobs[0][2]) * len(jobs) // (4 * workers)))
    chunks = [(ctx, sched, probs[i:i + per], eng, run) for ctx, sched, probs, eng, run in jobs
              for i in range(0, len(probs), per)]
    _JOBS[:] = chunks
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_replay_chunk, range(len(chunks)), chunksize=1)
    finally:
        _JOBS.clear()
    return pa.concat_tables(parts)


def speed(steps: pa.Table, systems, schedules, profile="paper_v12", engine="fast", workers=1) -> tuple[int, float]:
    """(problem-replays, seconds) for one full grid run."""
    probs = problems_from_steps(steps)
    t0 = time.perf_counter()
    out = simulate(probs, systems, schedules, profile, engine, workers)
    return out.num_rows, time.perf_counter() - t0
