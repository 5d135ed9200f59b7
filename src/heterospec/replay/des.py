"""Discrete-event replay of step traces on a modelled heterogeneous system.

Four resources: the ``draft``, ``prm`` and ``target`` devices and the ``link``. A schedule policy
(:mod:`heterospec.replay.schedules`) turns one problem's steps into *operations*: "run this for that long on that
resource, after those operations" (optionally "... but stop when that operation ends", for a prefetch or a
speculative draft that is cancelled by a decision). Each resource runs its operations in the order the policy
issued them (an in-order stream, like a CUDA stream or the FPGA's command queue).

Two engines execute the same operations and give the same times:

* ``simpy`` — every operation is a SimPy process that requests its resource (a ``simpy.Resource``) when issued,
  waits for its dependencies, holds the resource for its duration (or until its cancelling operation ends);
* ``fast`` — the same rule computed directly: start = max(resource free, dependencies' ends). Used for grids
  (SimPy's per-event overhead is ~50x larger); tests check the two agree.

From the operation log come the metrics (``RESULTS_SCHEMA``): latency, accepted tokens, goodput, energy per device
(active power while busy, idle power otherwise, over the problem's latency), J/token, stall (time between a
rejection and the target's output), communication time and share, discarded tokens and their energy, and a lower
bound: max(each resource's busy time, the dependency chain with realised durations); efficiency = bound / latency.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
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
            return cls(name=str(get(cfg, "name")),
                       power_active_w={r: float(get(devs[r], "power_active_w")) for r in DEVICES},
                       power_idle_w={r: float(get(devs[r], "power_idle_w")) for r in DEVICES},
                       kinds={r: str(get(devs[r], "kind", "gpu")) for r in DEVICES},
                       link_bandwidth_gbs=float(get(link, "bandwidth_gbs", 16.0)),
                       link_latency_us=float(get(link, "latency_us", 1.0)))
        except (TypeError, ValueError) as e:
            raise UserError(f"system config '{get(cfg, 'name')}': missing or bad power/link field ({e})") from None

    def link_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        bw = self.link_bandwidth_gbs
        return self.link_latency_us * 1e-3 + (0.0 if math.isinf(bw) else nbytes / (bw * 1e9) * 1e3)


@dataclass
class Ctx:
    """What a policy may use: the latency profile and the system."""
    profile: LatencyProfile
    system: SystemParams

    def comm(self, tokens: int) -> float:
        return self.system.link_ms(tokens * self.profile.bytes_per_token)


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

    @property
    def accepted_tokens(self) -> int:
        return self.path[-1] if self.path else 0


def problems_from_steps(steps: pa.Table) -> list[Problem]:
    cols = steps.select(["dataset", "problem", "prompt_tokens", "outcome", "draft_tokens", "target_tokens",
                         "kv_verify", "kv_target", "path_tokens"]).to_pydict()
    out: list[Problem] = []
    n = len(cols["problem"])
    i = 0
    while i < n:
        j = i
        key = (cols["dataset"][i], cols["problem"][i])
        while j < n and (cols["dataset"][j], cols["problem"][j]) == key:
            j += 1
        out.append(Problem(key[0], key[1], cols["prompt_tokens"][i], cols["outcome"][i:j],
                           cols["draft_tokens"][i:j], cols["target_tokens"][i:j], cols["kv_verify"][i:j],
                           cols["kv_target"][i:j], cols["path_tokens"][i:j]))
        i = j
    return out


# ----------------------------------------------------------------------------- operations and engines
class Op:
    """One operation. ``dur`` is ms or a callable evaluated when the op starts (it may read earlier ops' times)."""
    __slots__ = ("res", "dur", "deps", "until", "kind", "disc", "role", "kv", "cap", "ref", "start", "end", "ev",
                 "chain")

    def __init__(self, res, dur, deps, until, kind, disc, role, kv, cap, ref):
        self.res, self.dur, self.deps, self.until = res, dur, deps, until
        self.kind, self.disc, self.role, self.kv, self.cap, self.ref = kind, disc, role, kv, cap, ref
        self.start = self.end = self.chain = math.nan
        self.ev = None

    @property
    def length(self) -> float:
        return self.end - self.start


class Engine:
    """The API policies use: ``run(...)`` issues an operation and returns its handle."""

    def __init__(self):
        self.ops: list[Op] = []

    def run(self, res: str, dur: float | Callable[[], float], deps: Iterable[Op] = (), *, until: Op | None = None,
            kind: str = "", disc: bool = False, role: str = "", kv: int = 0, cap: int = 0, ref: Op | None = None
            ) -> Op:
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref)
        self.ops.append(op)
        self._issue(op)
        return op

    def _issue(self, op: Op) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class FastEngine(Engine):
    """start = max(resource free, dependency ends); end = start + dur, or the cancelling op's end if earlier.
    Also the dependency-chain length (``Op.chain``) for the lower bound."""

    def __init__(self):
        super().__init__()
        self.free = dict.fromkeys(RESOURCES, 0.0)

    def run(self, res, dur, deps=(), *, until=None, kind="", disc=False, role="", kv=0, cap=0, ref=None):
        op = Op(res, dur, deps, until, kind, disc, role or res, kv, cap, ref)
        self.ops.append(op)
        s = self.free[res]
        c = 0.0
        for d in deps:
            if d.end > s:
                s = d.end
            if d.chain > c:
                c = d.chain
        op.start = s
        if callable(dur):
            dur = dur()
        e = s + dur
        if until is not None:
            u = until.end
            if u != u:
                raise RuntimeError("an operation's cancelling op must be issued before it")
            if u < e:
                e = u if u > s else s
        op.end = e
        op.chain = c + (e - s)
        self.free[res] = e
        return op


class SimpyEngine(Engine):
    """Every operation a SimPy process holding a ``simpy.Resource`` (capacity 1) per device and the link."""

    def __init__(self):
        super().__init__()
        self.env = simpy.Environment()
        self.res = {r: simpy.Resource(self.env, capacity=1) for r in RESOURCES}

    def _issue(self, op: Op) -> None:
        op.ev = self.env.process(self._proc(op))

    def _proc(self, op: Op):
        env = self.env
        with self.res[op.res].request() as req:
            yield req
            if op.deps:
                yield env.all_of([d.ev for d in op.deps])
            op.start = env.now
            dur = op.dur() if callable(op.dur) else op.dur
            if op.until is not None:
                yield env.timeout(dur) | op.until.ev
            else:
                yield env.timeout(dur)
            op.end = env.now

    def finish(self) -> None:
        self.env.run()


def make_engine(name: str) -> Engine:
    if name == "fast":
        return FastEngine()
    if name == "simpy":
        return SimpyEngine()
    raise UserError(f"unknown simulation engine '{name}'; choose one of {list(ENGINES)}")


# ----------------------------------------------------------------------------- metrics
RESULTS_SCHEMA = versioned("replay_results", 1, [
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("problem", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),
    pa.field("schedule", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
    pa.field("steps", pa.int32(), nullable=False),
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
    pa.field("discarded_energy_j", pa.float64(), nullable=False),
    pa.field("lower_bound_ms", pa.float64(), nullable=False),
    pa.field("efficiency", pa.float64(), nullable=False),
])


def metrics(ops: list[Op], prob: Problem, ctx: Ctx) -> dict:
    busy = dict.fromkeys(RESOURCES, 0.0)
    latency = 0.0
    stall = 0.0
    disc_tok = {"draft": 0, "target": 0}
    disc_e = 0.0
    longest = 0.0
    pa_w = ctx.system.power_active_w
    have_chain = bool(ops) and ops[0].chain == ops[0].chain
    for op in ops:
        ln = op.end - op.start
        busy[op.res] += ln
        if op.end > latency:
            latency = op.end
        if not have_chain:
            c = 0.0
            for d in op.deps:
                if d.chain > c:
                    c = d.chain
            op.chain = c + ln
        if op.chain > longest:
            longest = op.chain
        if op.ref is not None:
            stall += max(0.0, op.end - op.ref.end)
        disc = op.disc() if callable(op.disc) else op.disc
        if disc and op.res in pa_w:
            disc_e += pa_w[op.res] * ln / 1e3
            if op.cap:
                full = op.dur() if callable(op.dur) else op.dur
                if op.until is None or ln >= full * (1 - 1e-12):   # ran to completion (up to rounding)
                    disc_tok[op.role] += op.cap
                else:
                    disc_tok[op.role] += ctx.profile.tokens_within(op.role, op.kv, ln, op.cap)
    energy = {r: (pa_w[r] * busy[r] + ctx.system.power_idle_w[r] * (latency - busy[r])) / 1e3 for r in DEVICES}
    total_e = sum(energy.values())
    acc = prob.accepted_tokens
    bound = max(longest, *busy.values())
    return dict(steps=len(prob.d), latency_ms=latency, accepted_tokens=acc,
                goodput_tok_s=acc / latency * 1e3 if latency > 0 else 0.0,
                busy_draft_ms=busy["draft"], busy_prm_ms=busy["prm"], busy_target_ms=busy["target"],
                energy_draft_j=energy["draft"], energy_prm_j=energy["prm"], energy_target_j=energy["target"],
                energy_j=total_e, j_per_token=total_e / acc if acc > 0 else math.inf, stall_ms=stall,
                comm_ms=busy["link"], comm_share=busy["link"] / latency if latency > 0 else 0.0,
                discarded_draft_tokens=disc_tok["draft"], discarded_target_tokens=disc_tok["target"],
                discarded_energy_j=disc_e, lower_bound_ms=bound,
                efficiency=bound / latency if latency > 0 else 1.0)


# ----------------------------------------------------------------------------- drivers
def simulate_problem(prob: Problem, schedule: str, ctx: Ctx, engine: str = "fast") -> tuple[dict, list[Op]]:
    from heterospec.replay.schedules import get_schedule
    policy = get_schedule(schedule)
    eng = make_engine(engine)
    policy(prob, ctx, eng)
    eng.finish()
    return metrics(eng.ops, prob, ctx), eng.ops


def simulate(steps: pa.Table | list[Problem], systems: Iterable[Any], schedules: Iterable[str],
             profile: str | LatencyProfile = "paper_v12", engine: str = "fast") -> pa.Table:
    """Every problem x system x schedule; ``systems`` are SystemConfig-like objects or SystemParams."""
    from heterospec.replay.schedules import get_schedule
    probs = problems_from_steps(steps) if isinstance(steps, pa.Table) else list(steps)
    schedules = list(schedules)
    for s in schedules:
        get_schedule(s)
    systems = [s if isinstance(s, SystemParams) else SystemParams.from_config(s) for s in systems]
    rows: list[dict] = []
    for sysp in systems:
        prof = profile if isinstance(profile, LatencyProfile) else get_profile(profile, system=sysp)
        ctx = Ctx(prof, sysp)
        for sched in schedules:
            for prob in probs:
                m, _ = simulate_problem(prob, sched, ctx, engine)
                m.update(dataset=prob.dataset, problem=prob.problem, system=sysp.name, schedule=sched,
                         profile=prof.name)
                rows.append(m)
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)


def speed(steps: pa.Table, systems, schedules, profile="paper_v12", engine="fast") -> tuple[int, float]:
    """(problem-replays, seconds) for one full grid run."""
    probs = problems_from_steps(steps)
    t0 = time.perf_counter()
    out = simulate(probs, systems, schedules, profile, engine)
    return out.num_rows, time.perf_counter() - t0
