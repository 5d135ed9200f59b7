"""The speculative pipeline behind step_ahead, prefetch_only and hetero; the schedule's switches say what overlaps.
It follows what our StepAhead executor (heterospec.reasoning.executors) does; each mechanism is one function of
:mod:`.mechanisms`.

Per step i: the draft writes it (with ``draft_pipeline``, right after step i-1's draft, speculating that i-1 is
accepted, but at most ``draft_lookahead`` steps ahead of the PRM's verdicts); the link carries it and the PRM scores
it. With ``prefetch`` the target works on the step before the verdict: simulated (:func:`.mechanisms.prefetch`, the
target starts once the step's context is settled, a stopped prefetch is kept for a later return to its context with
``partial_cache``), or as the trace records it (``Ctx.recorded``, :func:`.mechanisms.recorded_rewrite`).
Reject: the speculative next draft is cancelled at the verdict, the target finishes the step
(:func:`.mechanisms.rewrite`), sends it, the PRM scores it when the algorithm scores target steps (BRSD), and the
draft ingests it (:func:`.mechanisms.sync`: after the transfer, or with ``shadow_sync`` as the target writes).
Backtrack: the rescue the PRM rejected (our traces' ``r``) is paid for first, then the target writes the
replacement step from the rolled-back context (the KVMU's rollback is a pointer reset). With
``disaggregated_prefill`` the draft's prompt is prefilled on the target GPU and its KV state moved over the link.
"""
from __future__ import annotations

from heterospec.replay.schedules import Cached
from heterospec.replay.schedules import mechanisms as m


def pipelined(prob, ctx, eng, sw) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    if n == 0:
        return
    d, t, kvv, kvt, outs = prob.d, prob.t, prob.kvv, prob.kvt, prob.outcome
    scored, rescue, crit = prob.scored or [True] * n, prob.r or [0] * n, prob.crit or [None] * n
    recorded = ctx.recorded and sw.prefetch
    ahead = sw.draft_lookahead if sw.draft_pipeline else 0
    dkv = prob.dkv if recorded and prob.dkv else kvv   # the draft's context: by the trace's rule when recorded
    ready_d, ready_t = m.prompt(run, p, ctx, prob.prompt, sw.disaggregated_prefill)
    path = m.Path()
    partials: dict = {}               # context id -> (the stopped prefetch there, its new tokens)
    tc, pc = Cached(), Cached()       # the target's and the PRM's KV caches
    settled: list = []                # per step of the current run of drafts: the op whose end settles it
    D = run("draft", p.draft_decode(kvv[0], d[0]), ready_d, kind="draft", disc=outs[0] != "accept",
            kv=kvv[0], cap=d[0])
    for i in range(n):
        out, r, last = outs[i], rescue[i], i + 1 == n
        L = run("link", ctx.comm(d[i]), [D], kind="comm")
        V = run("prm", p.prm_score(kvv[i] + d[i], pc.read(kvv[i] + d[i])), [L], kind="verify")
        if out != "accept":
            pc.drop_to(kvv[i])
        PF = new = None
        if sw.prefetch and not recorded:
            PF, new = m.prefetch(run, p, tc, i, prob, ready_t, V, sw.partial_cache)
        if out == "accept":
            if PF is not None and sw.partial_cache:
                partials[path.id] = PF, new
            path.push(d[i])
            if last:
                break
            settled.append(V)
            ready_d = [D] + ([settled[-1 - ahead]] if len(settled) > ahead else [])
            ready_t = [V]
        else:
            if sw.draft_pipeline and not last:
                m.spec_draft(run, p, kvv[i] + d[i], d[i + 1], [D], V)
            before = V
            if r:   # BRSD: the rescue the PRM rejected, which made it backtrack
                R0, before = m.failed_rescue(run, p, ctx, tc, pc, i, prob, V, PF, sw, recorded, ready_d)
                if sw.draft_pipeline and not last:
                    m.spec_draft(run, p, kvv[i] + r, d[i + 1], [R0], before)
            if out == "backtrack":
                path.rollback_to(kvt[i])
            if recorded:
                R = m.recorded_rewrite(run, p, tc, kvt[i], t[i], crit[i], before, ready_d if not r else [before], V)
            else:
                kept = partials.pop(path.id, None) if out == "backtrack" else None
                R = m.rewrite(run, p, tc, i, prob, before, PF, new, sw.partial_cache, kept, V)
            if out == "backtrack":
                m.forget_beyond(partials, path)
            tc.len = kvt[i] + t[i]   # its own step: cached
            path.push(t[i])
            L2 = run("link", ctx.comm(t[i]), [R], kind="comm")
            V2 = run("prm", p.prm_score(kvt[i] + t[i], pc.read(kvt[i] + t[i])), [L2], kind="verify_target") \
                if scored[i] else None
            if last:
                break
            S = m.sync(run, p, kvt[i], t[i], R, L2, sw.shadow_sync)
            ready_d = [S, L2] if sw.draft_pipeline or V2 is None else [S, V2]
            ready_t = [V2 or L2]
            settled = [V2 or L2]
        D = run("draft", p.draft_decode(dkv[i + 1], d[i + 1]), ready_d, kind="draft",
                disc=outs[i + 1] != "accept", kv=dkv[i + 1], cap=d[i + 1])
