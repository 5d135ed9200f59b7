"""Load-aware speculation: per request, at its admission, speculate or let the target write the whole answer.

Step-level speculation pays while the draft's and the PRM's devices have room and costs capacity once they queue
(docs/load.md, "Load-aware speculation"). A policy decides from what a real controller could see when a request
arrives (:class:`SystemView`): each device's queue now (operations waiting to start) and the wait its recent
operations had, and the system's recent acceptance rate. What each branch costs a request on an idle system
(:class:`Branch`: its mean latency and its operations per device) is known from earlier requests (the replay takes
it from the single-request replays of the same problems).

Policies are registered entries, like the batching policies:

* ``static``: always speculate (the methods without a policy).
* ``threshold``: speculate unless a device's waiting operations exceed its limit (``limits``: device -> count),
  vLLM's rule of turning speculation off above a queue length.
* ``goodput``: the branch with the least expected completion time given the queues now, each branch's idle
  latency plus, per device, its operations times the wait an operation there has now (SmartSpec's idea at step
  level); a tie speculates.

A policy is a small object with ``admit(view, branches) -> SPECULATE | TARGET``; :func:`make_policy` builds one
from its name and settings and refuses a bad one in one line naming the key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from heterospec.errors import UserError
from heterospec.trio import ROLES

SPECULATE, TARGET = "speculate", "target"
BRANCHES = (SPECULATE, TARGET)


@dataclass(frozen=True)
class DeviceView:
    """One device as a controller sees it: operations ready but not started, and the recent wait before start (ms)."""
    waiting: int = 0
    wait_ms: float = 0.0


@dataclass(frozen=True)
class SystemView:
    """Every device's queue at the decision and the recent share of draft steps accepted (None: none seen yet)."""
    devices: dict[str, DeviceView] = field(default_factory=dict)
    acceptance: float | None = None


@dataclass(frozen=True)
class Branch:
    """What a branch costs one request on an idle system: its mean latency (ms) and mean operations per device."""
    latency_ms: float
    ops: dict[str, float]


class Static:
    name = "static"

    def admit(self, view: SystemView, branches: dict[str, Branch]) -> str:
        return SPECULATE


@dataclass(frozen=True)
class Threshold:
    """Speculate unless some device holds more than its limit of waiting operations."""
    limits: dict[str, int]
    name: str = "threshold"

    def admit(self, view: SystemView, branches: dict[str, Branch]) -> str:
        over = any(view.devices.get(d, DeviceView()).waiting > n for d, n in self.limits.items())
        return TARGET if over else SPECULATE


class Goodput:
    name = "goodput"

    def admit(self, view: SystemView, branches: dict[str, Branch]) -> str:
        cost = {b: expected_ms(branches[b], view) for b in BRANCHES}
        return TARGET if cost[TARGET] < cost[SPECULATE] else SPECULATE


def expected_ms(branch: Branch, view: SystemView) -> float:
    """A branch's expected completion: its idle latency plus each device's operations times that device's wait."""
    return branch.latency_ms + sum(n * view.devices.get(d, DeviceView()).wait_ms for d, n in branch.ops.items())


POLICIES: dict[str, Callable[..., object]] = {"static": Static, "threshold": Threshold, "goodput": Goodput}


def make_policy(name: str, limits: dict | None = None, key: str = "load.speculation_policy"):
    """The policy ``name`` with its settings; one line naming ``key`` for an unknown name or a limit <= 0."""
    if name not in POLICIES:
        raise UserError(f"{key}.name: '{name}'; expected one of {list(POLICIES)}")
    if name != "threshold":
        return POLICIES[name]()
    limits = dict(limits or {})
    if not limits:
        raise UserError(f"{key}.limits: empty; the threshold policy needs a waiting-operations limit per device "
                        f"(e.g. {{draft: 4}})")
    for d, n in limits.items():
        if d not in ROLES:
            raise UserError(f"{key}.limits.{d}: not a device; expected some of {list(ROLES)}")
        if not (isinstance(n, (int, float)) and math.isfinite(n) and n > 0):
            raise UserError(f"{key}.limits.{d}: {n}; expected a number of waiting operations > 0")
    return Threshold({str(d): int(n) for d, n in limits.items()})
