"""Discrete-event replay of step traces on a modelled heterogeneous system.

Four resources: the ``draft``, ``prm`` and ``target`` devices and the ``link``. A schedule policy
(:mod:`heterospec.replay.schedules`) turns one problem's steps into *operations*: "run this for that long on that
resource, after those operations" (optionally "... but stop when that operation ends", for a prefetch or a
speculative draft that is cancelled by a decision; its first ``atomic`` ms are not cut, a forward pass in progress
finishes, and after them it stops at the end of a unit of ``grain`` ms, the token in progress: the profile's
``cancel_units``). Each resource runs its operations in the order the policy issued them (an in-order stream, like a
CUDA stream or the FPGA's command queue). A device may *yield to* another
(``SystemConfig.yields_to``, e.g. cpu3 on two cores: the target runs on the PRM's core at a lower OS priority): its
operations then progress only while that device is idle, so they take longer than their work (``Op.work``).

Two engines execute the same operations and give the same times:

* ``simpy`` — every operation is a SimPy process that requests its resource (a ``simpy.Resource``) when issued,
  waits for its dependencies, holds the resource for its duration (or until its cancelling operation ends);
* ``fast`` — the same rule computed directly: start = max(resource free, dependencies' ends). Used for grids
  (SimPy's per-event overhead is ~50x larger); tests check the two agree. A yielding op can be overlapped by an
  operation issued after it, so with ``yields_to`` the fast engine repeats the problem with the owner's intervals
  of the previous pass until they no longer change what it computed (:func:`~.engines.run_fast`; 1-3 passes).

A profile's ``problem_ms`` (the measured profile: controller time before the first and after the last call) is
added to every problem's latency. From the operation log come the metrics (``REPLAY_RESULTS_SCHEMA``): latency, accepted tokens, goodput, energy per device
(active power while busy, idle power otherwise, over the problem's latency), J/token, stall (time between a
rejection and the target's output), communication time and share, discarded tokens and their energy, and a lower
bound: max(each resource's busy time, the dependency chain with realised durations); efficiency = bound / latency.

Energy of discarded work is *marginal*: (active - idle power) x the time the device spent on work whose output was
thrown away, i.e. what the system would have saved by not doing it (the idle power is paid either way while the
problem runs). ``discarded_energy_j`` counts every discarded operation (rejected draft steps, which every schedule
has, cancelled speculative drafts, unused target prefetches); ``speculation_waste_j`` only what speculation adds
(the last two), zero for the sequential baseline.

One job per module: :mod:`.system` (the system's parameters, the policies' context), :mod:`.problem` (a problem's
steps), :mod:`.engines` (operations, the two engines, the tally), :mod:`.metrics` (``REPLAY_RESULTS_SCHEMA``), this one
(one problem under one schedule) and :mod:`heterospec.replay.grid.simulate` (every problem x system x schedule, in worker processes).
"""
from __future__ import annotations

from typing import Any

from heterospec.replay.simulator.engines import Op, make_engine, run_fast
from heterospec.replay.simulator.metrics import metrics
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx


def simulate_problem(prob: TracedProblem, schedule: Any, ctx: Ctx, engine: str = "fast") -> tuple[dict, list[Op]]:
    """One problem under one schedule (a name in conf/schedule, a ScheduleConfig or a Schedule)."""
    from heterospec.replay.schedules import get_schedule
    policy = get_schedule(schedule).policy
    if ctx.profile.context_includes_prompt and prob.prompt_tokens:
        prob = prob.with_prompt_in_context()
    if engine == "fast":
        eng = run_fast(lambda e: policy(prob, ctx, e), ctx.system.yields_to)
    else:
        eng = make_engine(engine, ctx.system.yields_to)
        policy(prob, ctx, eng)
    eng.finish()
    oh = ctx.profile.problem_ms
    if oh:   # controller time outside every call: on the critical path of the whole problem
        eng.tally.latency += oh
        eng.tally.longest += oh
    return metrics(eng.tally, prob, ctx), eng.ops
