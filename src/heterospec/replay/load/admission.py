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
from heterospec.replay.simulator.engines import DEVICES
from heterospec.replay.simulator.system import Ctx


@dataclass
class Admission:
    """A policy and its two branches' schedules and idle costs; ``name``: the speculative schedule's, + the policy."""
    policy: Any
    schedules: dict[str, Any]        # SPECULATE, TARGET -> Schedule
    branches: dict[str, Branch]

    @property
    def name(self) -> str:
        return f"{self.schedules[SPECULATE].name}+{self.policy.name}"

    def pick(self, view: SystemView) -> tuple[str, Any]:
        """(the branch, its schedule) for a request admitted while the system looks like ``view``."""
        branch = self.policy.admit(view, self.branches)
        return branch, self.schedules[branch]

    def idle(self) -> Any:
        """The schedule an idle system's request runs (empty queues)."""
        return self.pick(SystemView({d: DeviceView() for d in DEVICES}))[1]


def branch_cost(problems: list, schedule: Any, ctx: Ctx) -> Branch:
    """A schedule's mean latency over ``problems`` alone on an idle system, and its mean operations per device."""
    lat, ops = 0.0, dict.fromkeys(DEVICES, 0.0)
    for p in problems:
        m, done = simulate_problem(p, schedule, ctx)
        lat += m["latency_ms"]
        for op in done:
            if op.res in ops:
                ops[op.res] += 1
    n = max(len(problems), 1)
    return Branch(lat / n, {d: v / n for d, v in ops.items()})


def admission(policy: Any, speculate: Any, target: Any, problems: list, ctx: Ctx) -> Admission:
    """The admission of ``policy`` between ``speculate`` and ``target`` (Schedules) priced on ``problems``."""
    return Admission(policy, {SPECULATE: speculate, TARGET: target},
                     {SPECULATE: branch_cost(problems, speculate, ctx), TARGET: branch_cost(problems, target, ctx)})
