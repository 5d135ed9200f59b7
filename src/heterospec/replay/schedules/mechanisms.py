"""The mechanisms a speculative schedule turns on, one function each; :mod:`.pipelined` composes them.

Each issues operations through ``run`` (:meth:`heterospec.replay.engines.Engine.run`) and returns the handles the
next piece depends on. ``p`` is the latency profile, ``tc`` / ``pc`` the target's and the PRM's KV caches.
"""
from __future__ import annotations

import itertools


class Path:
    """The accepted path as a stack of steps, each with an id that names its context: two contexts with the same
    id hold the same steps, so a stopped prefetch is reused only by a rewrite of the same step in the same context."""
    __slots__ = ("steps", "kv", "id")
    _ids = itertools.count(1)

    def __init__(self):
        self.steps: list[tuple[int, int]] = []   # (tokens, id of the context after the step)
        self.kv = 0
        self.id = 0

    def push(self, tokens: int) -> None:
        self.kv += tokens
        self.id = next(self._ids)
        self.steps.append((tokens, self.id))

    def rollback_to(self, kv: int) -> None:
        """Pop steps down to a context of ``kv`` tokens (a backtrack); one that splits a step is a new context."""
        while self.steps and self.kv > kv:
            self.kv -= self.steps.pop()[0]
        self.id = self.steps[-1][1] if self.steps else 0
        if self.kv != kv:
            self.kv, self.id = kv, next(self._ids)


def forget_beyond(partials: dict, path: Path) -> None:
    """Drop the stopped prefetches of contexts no longer on the path (after a backtrack)."""
    live = {0} | {c for _, c in path.steps}
    for k in [k for k in partials if k not in live]:
        del partials[k]


def prompt(run, p, ctx, P: int, disaggregated: bool) -> tuple[list, list]:
    """The draft's prompt prefill: on the draft, or (disaggregated prefill) on the target's GPU and its KV state
    moved over the link once. Returns what the first draft and the first target work wait for."""
    if P <= 0:
        return [], []
    if disaggregated:
        pre = run("target", p.draft_prefill_disaggregated(P), kind="init", role="draft")
        return [run("link", ctx.system.link_ms(P * p.draft_kv_bytes_per_token), [pre], kind="migrate")], [pre]
    init = [run("draft", p.draft_prefill(0, P), kind="init")]
    return init, init


def prefetch(run, p, tc, i: int, prob, ready_t: list, V, partial_cache: bool):
    """The target writes step i from its settled context (after ``ready_t``) until the verdict ``V`` stops it; the
    step's target output (a rescue) or the draft's length (an accept) caps it. Returns (op, its new tokens)."""
    out, r = prob.outcome[i], (prob.r[i] if prob.r else 0)
    kv = prob.kvv[i]
    cap = prob.d[i] if out == "accept" else (r or prob.t[i]) if out == "rescue" or r else prob.d[i]
    if cap <= 0:
        return None, None
    reused = out == "rescue" or r > 0
    new = tc.read(kv)
    full = p.target(kv, cap, new)
    PF = run("target", full, ready_t, until=V, kind="prefetch", disc=not reused, kv=kv, cap=cap, new=new,
             atomic=p.target_prefill(kv, new) if p.prefix_cache else 0.0)
    if reused and not partial_cache:   # only a complete prefetch is reused
        PF.disc = lambda op=PF, f=full: op.work < f
    return PF, new


def spec_draft(run, p, kv: int, n: int, deps: list, V) -> None:
    """The draft writes the next step while V decides; V rejects, so it is cancelled there."""
    run("draft", p.draft_decode(kv, n), deps, until=V, kind="spec_draft", disc=True, kv=kv, cap=n)


def failed_rescue(run, p, ctx, tc, pc, i: int, prob, V, PF, sw, recorded: bool, draft_deps: list):
    """BRSD: the target's rescue of step i that the PRM rejects, which makes it backtrack: written (from the
    prefetch, or as recorded), sent, scored, dropped. Returns (the rescue, its verification)."""
    kv, r = prob.kvv[i], prob.r[i]
    if recorded:
        R0 = recorded_rewrite(run, p, tc, kv, r, None, V, draft_deps, V, disc=True)
    else:
        new = tc.read(kv) if PF is None else PF.new
        full = p.target(kv, r, new)
        R0 = run("target", _from_prefetch(full, PF, full, sw.partial_cache), [V], kind="rewrite", disc=True,
                 kv=kv, cap=r, new=new)
    ver = run("prm", p.prm_score(kv + r, pc.read(kv + r)), [run("link", ctx.comm(r), [R0], kind="comm")],
              kind="verify_target")
    pc.drop_to(prob.kvt[i])
    return R0, ver


def rewrite(run, p, tc, i: int, prob, after, PF, new, partial_cache: bool, kept, V):
    """The target's step after a rejection, simulated: a rescue finishes from its prefetch; a backtrack's rewrite
    resumes ``kept``, the stopped prefetch of the same step in the same context, if any."""
    kvt, t = prob.kvt[i], prob.t[i]
    if prob.outcome[i] == "rescue":
        if PF is None:
            new = tc.read(prob.kvv[i])
        full = p.target(kvt, t, new)
        dur = _from_prefetch(full, PF, p.target(prob.kvv[i], t, new), partial_cache)
    elif kept is not None:
        PFa, new_a = kept
        dur = _resume(p.target(kvt, t, new_a), PFa)
    else:
        dur = p.target(kvt, t, tc.read(kvt))
    return run("target", dur, [after], kind="rewrite", ref=V)


def recorded_rewrite(run, p, tc, kv: int, g: int, c, after, start: list, V, disc: bool = False):
    """The target's step of ``g`` tokens after a rejection as the trace records it: ``c`` critical tokens left after
    the prefetch, written after the verdict (0: the prefetch completed it); with none recorded (``c`` None) the
    artifact's v12 window: the target works on the step from the start of its draft (``start``) and its output is
    ready at the later of that work's end and the verdict."""
    new = tc.read(kv)
    if c is not None:
        return run("target", p.target(kv, c, new) if c > 0 else 0.0, [after], kind="rewrite", disc=disc, ref=V,
                   kv=kv, cap=g, new=new)
    PF = run("target", p.target(kv, g, new), start, kind="prefetch", disc=disc, kv=kv, cap=g, new=new)
    return run("target", 0.0, [after, PF], kind="rewrite", ref=V)


def sync(run, p, kv: int, n: int, R, L2, shadow: bool):
    """The draft ingests the target's step: after its transfer, or (shadow synchronisation) as the target ends."""
    return run("draft", p.draft_ingest(kv, n), [R] if shadow else [L2], kind="sync")


def _from_prefetch(full, PF, pf_full, partial_cache: bool):
    """The target's rescue given the prefetch of the same step (none: from scratch)."""
    if PF is None:
        return full
    return _resume(full, PF) if partial_cache else _complete_or_redo(full, PF, pf_full)


def _resume(full, PF):
    return lambda: max(0.0, full - PF.work)


def _complete_or_redo(full, PF, pf_full):
    return lambda: 0.0 if PF.work >= pf_full else full
