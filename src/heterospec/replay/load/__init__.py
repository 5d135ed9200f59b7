"""The load replay: many requests at once on a modelled system (docs/load.md).

Requests arrive (given times, a Poisson process, or a closed loop of clients: :mod:`heterospec.arrivals`), each a
problem of a trace set replayed under a schedule exactly as the single-request replay does (:mod:`.record`); the
devices are shared, each with a queue and a batching policy (:mod:`.batching`) priced by the profile and its batch
curve (:mod:`.prices`, :mod:`.devices`). :func:`replay_requests` replays a list of requests and returns what each
took and the run's aggregates (:mod:`.load_metrics`); :mod:`.capacity` searches the largest rate that meets an SLO;
:mod:`.stage` is the workflow stage.

With one request in the system at a time and every device at batch 1 (:func:`serial_plan`), every request takes
exactly the latency the single-request replay gives its problem.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from heterospec.arrivals import Arrivals, open_times, request_order
from heterospec.config.hardware import System
from heterospec.errors import UserError
from heterospec.replay.simulator.engines import DEVICES, RESOURCES
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.load.batching import Bounds, get_policy
from heterospec.replay.load.devices import DevicePlan
from heterospec.replay.load.load_metrics import LOAD_REQUESTS_SCHEMA, point_row, request_rows
from heterospec.replay.load.prices import BatchCurve
from heterospec.replay.load.sim import SimulatedRequest, Simulation, make_servers
from heterospec.replay.simulator.problem import TracedProblem, problems_from_steps
from heterospec.replay.simulator.system import Ctx, SpeculationParams, SystemParams


@dataclass
class LoadRun:
    """One load point: every request as simulated (:class:`.sim.Request`, ms) and the aggregates
    (``LOAD_POINTS_SCHEMA`` fields but the keys: latency percentiles in s, throughput, utilisation, ...)."""
    requests: list[SimulatedRequest]
    point: dict
    counted_from: int

    def table(self, **keys: Any) -> pa.Table:
        """The requests as ``LOAD_REQUESTS_SCHEMA`` rows; ``keys``: run, trace_set, system, method, schedule, profile,
        point (empty or 0 where not given)."""
        k = {f.name: keys.get(f.name, 0 if f.name == "point" else "") for f in LOAD_REQUESTS_SCHEMA
             if f.name in ("run", "trace_set", "system", "method", "schedule", "profile")}
        return pa.Table.from_pylist(request_rows(self.requests, self.counted_from, k, int(keys.get("point", 0))),
                                    schema=LOAD_REQUESTS_SCHEMA)

    @property
    def latencies_s(self) -> list[float]:
        """Every request's latency in seconds, in arrival order."""
        return [r.latency / 1e3 for r in self.requests]


def serial_plan() -> DevicePlan:
    """Every device at batch 1, one operation at a time: the single-request replay's devices."""
    one = BatchCurve(lambda b, c: 1.0, "")
    serial = get_policy("serial")
    return DevicePlan({r: serial for r in RESOURCES}, {r: Bounds() for r in RESOURCES}, {r: one for r in RESOURCES},
                      {r: "serial" for r in RESOURCES})


def replay_requests(requests: Sequence[tuple[float, TracedProblem | str]], system: System | SystemParams,
                    schedule: Any, profile: LatencyProfile, devices: DevicePlan | None = None, *,
                    problems: Sequence[TracedProblem] | pa.Table = (), speculation: SpeculationParams | None = None,
                    recorded: bool | None = None, warmup: float | int = 0.0) -> LoadRun:
    """Replay ``requests``, each (arrival time in seconds, problem), on ``system`` under ``schedule`` (a name in
    conf/schedule or a Schedule) priced by ``profile``, the devices batching as ``devices`` says (None: every device
    at batch 1, :func:`serial_plan`). A problem may be named by its id (``TracedProblem.problem``) among
    ``problems`` (TracedProblems or a steps table). The first ``warmup`` share of the requests (an int: that many)
    is left out of the aggregates. Returns every request's timing and the run's aggregates (:class:`LoadRun`)."""
    probs = _problems(problems)
    reqs = []
    for i, (t, p) in enumerate(requests):
        if not (t >= 0 and math.isfinite(t)):
            raise UserError(f"request {i}: arrival {t} s; expected a time >= 0")
        if reqs and t * 1e3 < reqs[-1].arrival:
            raise UserError(f"request {i}: arrival {t} s comes before the request above it; the times must be in order")
        reqs.append(SimulatedRequest(i, t * 1e3, _lookup(p, probs, i)))
    return _simulate(reqs, system, schedule, profile, devices, speculation, recorded, warmup, total=len(reqs))


def replay_closed(problems: Sequence[TracedProblem], clients: int, think_s: float, system: System | SystemParams,
                  schedule: Any, profile: LatencyProfile, devices: DevicePlan | None = None, *,
                  speculation: SpeculationParams | None = None, recorded: bool | None = None,
                  warmup: float | int = 0.0) -> LoadRun:
    """A closed loop: ``clients`` users each send a request at time 0 and the next ``think_s`` after their last one
    finished, asking ``problems`` in order until every one was asked."""
    if clients < 1:
        raise UserError(f"arrivals.clients: {clients}, expected 1 or more")
    queue = list(problems)
    first = [SimulatedRequest(i, 0.0, queue[i], client=i) for i in range(min(clients, len(queue)))]
    nxt = [len(first)]

    def follow(done: SimulatedRequest, sim: Simulation) -> None:
        if nxt[0] < len(queue):
            sim.add(SimulatedRequest(nxt[0], done.end + think_s * 1e3, queue[nxt[0]], client=done.client))
            nxt[0] += 1
    return _simulate(first, system, schedule, profile, devices, speculation, recorded, warmup, len(queue), follow)


def replay_arrivals(arrivals: Arrivals, problems: Sequence[TracedProblem], requests: int, system, schedule, profile,
                    devices: DevicePlan | None = None, **kw) -> LoadRun:
    """``requests`` requests of an arrival process (:class:`heterospec.arrivals.Arrivals`), asking the problems in a
    seeded order (:func:`heterospec.arrivals.request_order`, seeded by ``arrivals.seed``)."""
    order = [problems[i] for i in request_order(len(problems), requests, arrivals.seed)]
    if arrivals.kind == "closed":
        return replay_closed(order, arrivals.clients, arrivals.think_s, system, schedule, profile, devices, **kw)
    times = open_times(arrivals, requests)
    return replay_requests(list(zip(times, order)), system, schedule, profile, devices, **kw)


# ----------------------------------------------------------------------------- internals
def _problems(problems) -> dict:
    probs = problems_from_steps(problems) if isinstance(problems, pa.Table) else list(problems)
    out: dict[str, TracedProblem] = {}
    for p in probs:
        if p.problem in out:
            out[p.problem] = None   # ambiguous: the same id in two trace sets or datasets
        else:
            out[p.problem] = p
    return out


def _lookup(p, probs: dict, i: int) -> TracedProblem:
    if isinstance(p, TracedProblem):
        return p
    if p not in probs:
        raise UserError(f"request {i}: problem '{p}' is not in the steps given (problems: {len(probs)})")
    if probs[p] is None:
        raise UserError(f"request {i}: problem id '{p}' names several problems (trace sets or datasets); pass the "
                        f"TracedProblem itself")
    return probs[p]


def _simulate(reqs: list[SimulatedRequest], system, schedule, profile, devices, speculation, recorded, warmup, total: int,
              follow=None) -> LoadRun:
    if isinstance(warmup, float) and not 0 <= warmup < 1:
        raise UserError(f"load.warmup: {warmup}, expected a share of the requests in [0, 1)")
    sysp = system if isinstance(system, SystemParams) else SystemParams.of(system)
    plan = devices or serial_plan()
    ctx = Ctx(profile, sysp, recorded, speculation)
    sim = Simulation(schedule, ctx, make_servers(plan.policies, plan.bounds, plan.curves))
    if follow is not None:
        sim.on_done = lambda r: follow(r, sim)
    if not total:
        raise UserError("the load replay got no requests")
    counted_from = warmup if isinstance(warmup, int) else int(math.floor(warmup * total))
    counted_from = min(counted_from, total - 1)
    done = sim.run(reqs, marks={counted_from, total - 1})
    done.sort(key=lambda r: r.index)
    n = len(done)
    first, last = done[counted_from], done[n - 1]
    b0, b1 = sim.books[first.index], sim.books[last.index]
    busy = {r: b1[r][0] - b0[r][0] for r in RESOURCES}
    batch = {r: (b1[r][1] - b0[r][1]) / busy[r] if busy[r] > 0 else 0.0 for r in DEVICES}
    row = point_row(done, counted_from, (first.arrival, last.arrival), busy, batch,
                    (sysp.power_active_w, sysp.power_idle_w), {})
    row["devices"] = plan.describe()
    return LoadRun(done, row, counted_from)
