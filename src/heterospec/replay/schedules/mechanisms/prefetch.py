"""Prefetch (T2): the target works on a step while the PRM decides on it, so a rejection finds it (partly) written.

Simulated (``Ctx.recorded`` false): the target starts once the step's context is settled (after ``ready_t``),
queues behind its other work, and the verdict stops it; the step's target output (a rescue) or the draft's length
(an accept) caps it. Without ``partial_cache`` only a complete prefetch is reused, otherwise the rescue starts over.
Recorded (the paper profiles): the target's work on a rejected step is what the trace says (:func:`recorded_rewrite`).
"""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline, Write, complete


@mechanism("prefetch")
class Prefetch(Pipeline):
    def __init__(self, prob, ctx, eng, options):
        super().__init__(prob, ctx, eng, options)
        self.recorded = ctx.recorded
        if self.recorded and prob.draft_kv:   # the draft's context by the trace's own rule
            self.dkv = prob.draft_kv
        self.crit = prob.critical_tokens or [None] * self.n
        self.PF = None                   # this step's prefetch (None: none)

    def verdict_pending(self, i, V):
        super().verdict_pending(i, V)
        self.PF = None if self.recorded else self.prefetch(i, V)

    def prefetch(self, i: int, V):
        prob, p, r = self.prob, self.p, self.rescue[i]
        out, kv = prob.outcome[i], prob.kv_verify[i]
        cap = prob.draft_tokens[i] if out == "accept" else (r or prob.target_tokens[i]) if out == "rescue" or r else prob.draft_tokens[i]
        if cap <= 0:
            return None
        reused = out == "rescue" or r > 0
        new = self.tc.read(kv)
        full = p.target(kv, cap, new)
        atomic, grain = p.cancel_units("target", kv, cap, new)
        PF = self.run("target", full, self.ready_t, until=V, kind="prefetch", disc=not reused, kv=kv, cap=cap,
                      new=new, atomic=atomic, grain=grain)
        if reused:
            PF.disc = self.unused(PF, full)
        return PF

    def unused(self, PF, full):
        """Whether a prefetch a rejection reuses is thrown away after all: when it did not complete."""
        return lambda op=PF: not complete(op.work, full)

    def reuse(self, full: float, PF, pf_full: float):
        """The target's step given its prefetch (``pf_full`` ms when complete): nothing left, or all of it."""
        return lambda: 0.0 if complete(PF.work, pf_full) else full

    def failed_rescue_op(self, i, V, ready_d):
        kv, r, PF = self.prob.kv_verify[i], self.rescue[i], self.PF
        if self.recorded:
            return recorded_rewrite(self, kv, r, None, V, ready_d, V, disc=True)
        if PF is None:
            return super().failed_rescue_op(i, V, ready_d)
        full = self.p.target(kv, r, PF.new)
        return self.target_write(Write(kv, r, PF.new, full, self.reuse(full, PF, full)), [V], kind="rewrite", disc=True,
                                 kv=kv, cap=r, new=PF.new)

    def rewrite(self, i, before, V, ready_d):
        if not self.recorded:
            return super().rewrite(i, before, V, ready_d)
        prob = self.prob
        return recorded_rewrite(self, prob.kv_target[i], prob.target_tokens[i], self.crit[i], before,
                                ready_d if not self.rescue[i] else [before], V)

    def rewrite_plan(self, i):
        prob, PF = self.prob, self.PF
        if prob.outcome[i] != "rescue" or PF is None:
            return super().rewrite_plan(i)
        full = self.p.target(prob.kv_target[i], prob.target_tokens[i], PF.new)
        return Write(prob.kv_target[i], prob.target_tokens[i], PF.new, full,
                     self.reuse(full, PF, self.p.target(prob.kv_verify[i], prob.target_tokens[i], PF.new)))


def recorded_rewrite(pl: Pipeline, kv: int, g: int, c, after, start: list, V, disc: bool = False):
    """The target's step of ``g`` tokens after a rejection as the trace records it: ``c`` critical tokens left after
    the prefetch, written after the verdict (0: the prefetch completed it); with none recorded (``c`` None) the
    artifact's v12 window: the target works on the step from the start of its draft (``start``) and its output is
    ready at the later of that work's end and the verdict."""
    run, p = pl.run, pl.p
    new = pl.tc.read(kv)
    if c is not None:
        if c <= 0:
            return run("target", 0.0, [after], kind="rewrite", disc=disc, ref=V, kv=kv, cap=g, new=new)
        return pl.target_write(Write(kv, c, new, p.target(kv, c, new)), [after], kind="rewrite", disc=disc, ref=V,
                               kv=kv, cap=g, new=new)
    return pl.window_write(Write(kv, g, new, p.target(kv, g, new)), start, after, V, disc)
