"""Load-aware speculation in the load replay: each request's schedule picked at its arrival by a speculation policy
(:mod:`heterospec.reasoning.speculation_policy`) between a step-level speculative schedule and the target alone.

An :class:`Admission` stands where a schedule would (a load job's ``schedule``): the simulator (:mod:`.sim`) asks it
for each arriving request's branch, showing the policy the devices' queues and recent waits, and replays the
request's own traces under the branch taken (its speculative trace, or the target writing its accepted path alone),
so its latency and its answer follow from that branch. The branches' idle costs (:class:`Branch`) come from the
single-request replays of the job's problems, as a controller would learn them from earlier requests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heterospec.reasoning.speculation_policy import SPECULATE, TARGET, Branch, DeviceView, SystemView
from heterospec.replay.simulator.des import simulate_problem
from heterospec.replay.simulator.engines import DEVICES, RESOURCES
from heterospec.replay.simulator.system import Ctx


@dataclass
class Admission:
    """A policy and its two branches' schedules, idle costs and single-request replays (``alone``: branch ->
    each problem's latency in s and each device's mean busy ms); ``name``: the speculative schedule's + the policy."""
    policy: Any
    schedules: dict[str, Any]        # SPECULATE, TARGET -> Schedule
    branches: dict[str, Branch]
    alone: dict[str, tuple[list, dict]]

    @property
    def name(self) -> str:
        return f"{self.schedules[SPECULATE].name}+{self.policy.name}"

    def pick(self, view: SystemView) -> tuple[str, Any]:
        """(the branch, its schedule) for a request admitted while the system looks like ``view``."""
        branch = self.policy.admit(view, self.branches)
        return branch, self.schedules[branch]

    def idle_branch(self) -> str:
        """The branch an idle system's request takes (empty queues)."""
        return self.pick(SystemView({d: DeviceView() for d in DEVICES}))[0]


def one_by_one(problems: list, schedule: Any, ctx: Ctx) -> tuple[list, dict, dict]:
    """Each problem alone on an idle system under ``schedule``: its latency (s), and per device the mean busy time
    (ms, the link's too) and the mean operations per problem."""
    lat, busy, ops = [], dict.fromkeys(RESOURCES, 0.0), dict.fromkeys(RESOURCES, 0.0)
    for p in problems:
        m, done = simulate_problem(p, schedule, ctx)
        lat.append(m["latency_ms"] / 1e3)
        for d in busy:
            busy[d] += m.get(f"busy_{d}_ms", 0.0)
        for op in done:
            if op.res in ops:
                ops[op.res] += 1
    n = max(len(problems), 1)
    return lat, {d: v / n for d, v in busy.items()}, {d: v / n for d, v in ops.items()}


def admission(policy: Any, speculate: Any, target: Any, problems: list, ctx: Ctx) -> Admission:
    """The admission of ``policy`` between ``speculate`` and ``target`` (Schedules) priced on ``problems``."""
    schedules = {SPECULATE: speculate, TARGET: target}
    runs = {b: one_by_one(problems, s, ctx) for b, s in schedules.items()}
    branches = {b: Branch(1e3 * sum(lat) / max(len(lat), 1), {d: ops[d] for d in DEVICES})
                for b, (lat, _, ops) in runs.items()}
    return Admission(policy, schedules, branches, {b: (lat, busy) for b, (lat, busy, _) in runs.items()})
