"""The step loop every schedule runs, and the points where a mechanism (:mod:`.mechanisms`) changes it.

With no mechanism it is the paper's 3-GPU baseline: the draft writes step i, the link carries it, the PRM scores
it; on a rejection the target writes the step from scratch, sends it, the PRM scores it when the algorithm scores
target steps (BRSD; RSD trusts a rescue), and the draft ingests it before writing the next step. A BRSD backtrack
first pays for the rescue the PRM rejected (the trace's ``r``), then the target's rewrite from the rolled-back
context. Nothing overlaps.

A mechanism is a subclass that overrides some of the hook methods below and calls ``super()`` for the rest; a
schedule's class is this one with its mechanisms mixed in (:func:`.mechanisms.compose`). The loop tracks the
target's and the PRM's caches (:class:`.caches.Cached`) and passes each call's ``new`` tokens to the profile,
which charges them when it models a prefix cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from heterospec.replay.schedules.caches import Cached

RELATIVE_ROUNDING = 1e-9   # relative: work this close to a whole is the whole (an op's work is a difference of float times)


def complete(work: float, full: float) -> bool:
    """Whether ``work`` ms did all of an operation of ``full`` ms (up to the rounding of the times it ran between)."""
    return work >= full * (1.0 - RELATIVE_ROUNDING)


def left_after(full: float, work: float) -> float:
    """The ms of ``full`` still to do after ``work`` ms of it: none once it is :func:`complete`."""
    return 0.0 if complete(work, full) else full - work


@dataclass
class Write:
    """A target write: ``g`` tokens after ``kv`` in context, ``new`` of which it has not cached (None: all), ``full``
    ms by plain decoding; ``remaining`` (None: all of it) gives, when the write starts, the plain-decoding ms still to
    do (a prefetch may have done the rest)."""
    kv: int
    g: int
    new: int | None
    full: float
    remaining: Callable[[], float] | float | None = None

    @property
    def ms(self) -> Callable[[], float] | float:
        return self.full if self.remaining is None else self.remaining


class Pipeline:
    """One problem's steps as operations on ``eng`` (:class:`heterospec.replay.simulator.engines.Engine`)."""

    def __init__(self, prob, ctx, eng, options: dict):
        self.prob, self.ctx, self.p, self.run, self.options = prob, ctx, ctx.profile, eng.run, options
        n = len(prob.draft_tokens)
        self.n = n
        self.rescue = prob.rescue_tokens or [0] * n
        self.dkv = prob.kv_verify                # the draft's context for steps after the first
        self.tc, self.pc = Cached(), Cached()   # the target's and the PRM's KV caches
        self.ready_t: list = []            # what target work on the next step waits for (its settled context)

    def replay(self) -> None:
        prob, p, run, ctx, pc = self.prob, self.p, self.run, self.ctx, self.pc
        n = self.n
        if n == 0:
            return
        d, t, kvv, kvt, outs = prob.draft_tokens, prob.target_tokens, prob.kv_verify, prob.kv_target, prob.outcome
        scored = prob.target_scored or [True] * n
        ready_d, self.ready_t = self.prompt()
        D = run("draft", p.draft_decode(kvv[0], d[0]), ready_d, kind="draft", disc=outs[0] != "accept",
                kv=kvv[0], cap=d[0])
        for i in range(n):
            out, last = outs[i], i + 1 == n
            L = run("link", ctx.comm(d[i]), [D], kind="comm")
            V = run("prm", p.prm_score(kvv[i] + d[i], pc.read(kvv[i] + d[i])), [L], kind="verify")
            if out != "accept":
                pc.drop_to(kvv[i])
            self.verdict_pending(i, V)
            if out == "accept":
                self.accepted(i)
                if last:
                    break
                ready_d = self.draft_after_accept(i, D, V)
                self.ready_t = [V]
            else:
                self.rejected(i, D, V, last)
                before = V
                if self.rescue[i]:   # BRSD: the rescue the PRM rejected, which made it backtrack
                    before = self.failed_rescue(i, V, ready_d, last)
                R = self.rewrite(i, before, V, ready_d)
                self.tc.len = kvt[i] + t[i]   # its own step: cached
                L2 = run("link", ctx.comm(t[i]), [R], kind="comm")
                V2 = run("prm", p.prm_score(kvt[i] + t[i], pc.read(kvt[i] + t[i])), [L2], kind="verify_target") \
                    if scored[i] else None
                if last:
                    break
                S = run("draft", self.ingest_ms(i), self.sync_deps(R, L2, V2), kind="sync")
                ready_d = self.draft_after_reject(S, L2, V2)
                self.ready_t = [V2 or L2]
            D = run("draft", p.draft_decode(self.dkv[i + 1], d[i + 1]), ready_d, kind="draft",
                    disc=outs[i + 1] != "accept", kv=self.dkv[i + 1], cap=d[i + 1])

    # ------------------------------------------------------------------ hooks (the baseline's behaviour)
    def prompt(self) -> tuple[list, list]:
        """The draft's prompt prefill on the draft. Returns what the first draft and the first target work wait for."""
        P = self.prob.prompt_tokens
        if P <= 0:
            return [], []
        init = [self.run("draft", self.p.draft_prefill(0, P), kind="init")]
        return init, init

    def verdict_pending(self, i: int, V) -> None:
        """While the PRM decides on step i (``V``): nothing overlaps."""

    def accepted(self, i: int) -> None:
        """Step i accepted (before the next draft is issued)."""

    def draft_after_accept(self, i: int, D, V) -> list:
        """What the next draft waits for after an accept: the verdict."""
        return [V]

    def rejected(self, i: int, D, V, last: bool) -> None:
        """Step i rejected, as the PRM decides (``V``)."""

    def failed_rescue(self, i: int, V, ready_d: list, last: bool):
        """BRSD's rescue of step i that the PRM rejects: written, sent, scored, dropped. Returns its verdict."""
        prob, run, p, pc = self.prob, self.run, self.p, self.pc
        kv, r = prob.kv_verify[i], self.rescue[i]
        R0 = self.failed_rescue_op(i, V, ready_d)
        ver = run("prm", p.prm_score(kv + r, pc.read(kv + r)), [run("link", self.ctx.comm(r), [R0], kind="comm")],
                  kind="verify_target")
        pc.drop_to(prob.kv_target[i])
        self.rescue_rejected(i, R0, ver, last)
        return ver

    def failed_rescue_op(self, i: int, V, ready_d: list):
        """The target writes the rescue from scratch after the verdict."""
        kv, r = self.prob.kv_verify[i], self.rescue[i]
        new = self.tc.read(kv)
        return self.target_write(Write(kv, r, new, self.p.target(kv, r, new)), [V], kind="rewrite", disc=True, kv=kv,
                                 cap=r, new=new)

    def rescue_rejected(self, i: int, R0, ver, last: bool) -> None:
        """The PRM (``ver``) rejects the rescue ``R0`` of step i."""

    def rewrite(self, i: int, before, V, ready_d: list):
        """The target's step after a rejection, after ``before`` (the verdict, or the failed rescue's)."""
        return self.target_write(self.rewrite_plan(i), [before], kind="rewrite", ref=V)

    def rewrite_plan(self, i: int) -> Write:
        """What it writes: the whole step from scratch."""
        kvt, t = self.prob.kv_target[i], self.prob.target_tokens[i]
        new = self.tc.read(kvt)
        return Write(kvt, t, new, self.p.target(kvt, t, new))

    def window_write(self, w: Write, start: list, after, V, disc: bool = False):
        """The artifact's v12 window: the target writes a rejected step from the start of its draft (``start``), and
        its output is ready at the later of that work's end and the verdict (``after``)."""
        PF = self.run("target", w.ms, start, kind="prefetch", disc=disc, kv=w.kv, cap=w.g, new=w.new)
        return self.run("target", 0.0, [after, PF], kind="rewrite", ref=V)

    def target_write(self, w: Write, deps: list, **kw):
        """Issue a target write: one operation on the target, decoding token by token (token-level speculation
        replaces it with draft and verify work: :mod:`.mechanisms.token_speculation`)."""
        return self.run("target", w.ms, deps, **kw)

    def ingest_ms(self, i: int) -> float:
        """The draft ingests the target's step; after a backtrack it first restores the anchor's context."""
        prob = self.prob
        if prob.outcome[i] == "backtrack":
            return self.restore_ms(i)
        return self.p.draft_ingest(prob.kv_target[i], prob.target_tokens[i])

    def restore_ms(self, i: int) -> float:
        """After a backtrack, without a rollback of its KV cache, the draft rebuilds its whole context (prompt
        included) and the target's step from scratch."""
        prob, p = self.prob, self.p
        prompt = 0 if p.context_includes_prompt else prob.prompt_tokens
        return p.draft_prefill(0, prompt + prob.kv_target[i] + prob.target_tokens[i])

    def sync_deps(self, R, L2, V2) -> list:
        """The draft's ingest waits for the PRM's verdict on the step (``V2``; its transfer ``L2`` when the algorithm
        does not score it): nothing overlaps, as in our sequential executor, whose draft takes the step in at the start
        of its next write."""
        return [V2 or L2]

    def draft_after_reject(self, S, L2, V2) -> list:
        """What the next draft waits for after a rejection: the ingest and the PRM's verdict on the target's step
        (its transfer when the algorithm does not score it)."""
        return [S, V2 or L2]
