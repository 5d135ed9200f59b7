"""One request's operations, recorded from its schedule's policy without timing them: the load simulator
(:mod:`.sim`) times them against every other request's on the shared devices.

The policy is the single-request replay's (:mod:`heterospec.replay.schedules`), unchanged: it issues operations
with their resource, duration (ms, or a callable read when the operation starts), dependencies and cancelling
operation, and never reads a time while it issues them. Each recorded :class:`LoadOp` is an
:class:`~heterospec.replay.simulator.engines.Op` plus what the simulator tracks: its request, what it still waits for, and the
context it holds (a batch's KV bound and its price read it)."""
from __future__ import annotations

import math
from typing import Any

from heterospec.replay.simulator.engines import Engine, Op
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx


class LoadOp(Op):
    """An operation of one request in the load simulator (the times are set as it runs)."""
    __slots__ = ("req", "pending", "after", "cancels", "cut", "ctx_tokens", "ready_at", "final", "vstart", "vfin",
                 "done", "first_step")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.req = None
        self.pending = 0             # dependencies (and the request's previous op on this resource) not yet done
        self.after: list = []        # ops that wait for this one
        self.cancels: list = []      # ops this one cancels when it ends (their ``until``)
        self.cut = False             # its cancelling op has ended
        self.ctx_tokens = 0          # context tokens it reads (its KV in a batch)
        self.ready_at = math.nan
        self.final = math.nan        # ms of work it will do in all (known once it is ready)
        self.vstart = self.vfin = 0.0
        self.done = False
        self.first_step = False      # its end settles the request's first step


class RecordingEngine(Engine):
    """Records a policy's operations as :class:`LoadOp` objects; times nothing."""

    def run(self, res, dur, deps=(), *, until=None, kind="", disc=False, role="", kv=0, cap=0, ref=None, new=None,
            atomic=0.0, grain=0.0):
        job = LoadOp(res, dur, tuple(deps), until, kind, disc, role or res, kv, cap, ref, new=new, atomic=atomic,
                  grain=grain)
        self.ops.append(job)
        return job


def record(prob: TracedProblem, schedule: Any, ctx: Ctx) -> tuple[TracedProblem, list[LoadOp]]:
    """The problem as the profile sees it (the prompt in its contexts where the profile counts it) and its
    operations in issue order, each with the context it reads and the op that settles the first step marked."""
    from heterospec.replay.schedules import get_schedule
    if ctx.profile.context_includes_prompt and prob.prompt_tokens:
        prob = prob.with_prompt_in_context()
    eng = RecordingEngine()
    get_schedule(schedule).policy(prob, ctx, eng)
    jobs: list[LoadOp] = eng.ops
    _contexts(jobs, prob)
    _first_step(jobs, prob)
    return prob, jobs


def _contexts(jobs: list[LoadOp], prob: TracedProblem) -> None:
    """Each op's context: its own ``kv`` where the policy gave one, else the last one the request's ops gave (the
    request's context moves step by step, and an op without one reads about the same context as the op before)."""
    last = prob.prompt_tokens if prob.kv_verify and prob.kv_verify[0] >= prob.prompt_tokens else 0
    for j in jobs:
        if j.kv:
            last = j.kv
        j.ctx_tokens = last + (j.cap or 0)


def _first_step(jobs: list[LoadOp], prob: TracedProblem) -> None:
    """Mark the op whose end settles step 1: the PRM's verdict on an accepted draft step, else the target's rewrite
    (its output is the step). The target alone (one write, no steps) marks none."""
    if not prob.outcome or not any(j.kind == "verify" for j in jobs):
        return
    if prob.outcome[0] == "accept":
        next(j for j in jobs if j.kind == "verify").first_step = True
        return
    for j in jobs:
        if j.kind == "rewrite" and j.ref is not None:
            j.first_step = True
            return
