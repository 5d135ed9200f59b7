"""The speculative pipeline behind step_ahead, prefetch_only and hetero; the schedule's switches say what overlaps.
It follows what our StepAhead executor (heterospec.reasoning.executors) does.

Per step i: the draft writes it (with ``draft_pipeline``, right after step i-1's draft, speculating that i-1 is
accepted); with ``prefetch`` the target starts writing step i as soon as step i's context is settled (the verdict
on step i-1, or the target's own step), on its in-order stream after whatever it was doing. Accept: the prefetch
stops at the verdict; with ``partial_cache`` what it wrote is kept for a later return to that context (a
backtrack's rewrite at the anchor resumes it). Reject (rescue): the target finishes the step from its prefetched
prefix (``partial_cache``; without it only a complete prefetch is reused), the speculative next draft is cancelled,
the target's step is sent, PRM-verified when the algorithm scores target steps (BRSD; meanwhile the draft already
writes the next step after it), and ingested by the draft — after the transfer, or, with ``shadow_sync``, while
the target is still writing. Backtrack: the rescue the PRM rejected (our traces' ``r``) is paid for first, then the
target writes the replacement step from the rolled-back context (the KVMU's rollback is a pointer reset).
With ``disaggregated_prefill`` the draft's prompt is prefilled on the target GPU and its KV state moved over the
link once; the target can start its own work as soon as that prefill is done.
The target's and the PRM's KV caches (``Cached``) follow the schedule's order on each device: a prefetch reads the
settled context, a rejected output is dropped, a rewrite at the anchor finds it cached. With a profile that models a
prefix cache, a prefetch's read of its new context tokens is one forward pass the verdict cannot cut (so the cache
really holds them); the artifact's formulas cut a prefetch anywhere, its re-read of the whole context included.
"""
from __future__ import annotations

from heterospec.replay.schedules import Cached


def pipelined(prob, ctx, eng, sw) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    if n == 0:
        return
    d, t, kvv, kvt, outs = prob.d, prob.t, prob.kvv, prob.kvt, prob.outcome
    scored, rescue = prob.scored or [True] * n, prob.r or [0] * n
    P = prob.prompt
    ready_d = ready_t = []
    if P > 0:
        if sw.disaggregated_prefill:
            pre = run("target", p.draft_prefill_disaggregated(P), kind="init", role="draft")
            ready_d = [run("link", ctx.system.link_ms(P * p.draft_kv_bytes_per_token), [pre], kind="migrate")]
            ready_t = [pre]
        else:
            ready_d = ready_t = [run("draft", p.draft_prefill(0, P), kind="init")]
    partials = {}   # context length -> (the stopped prefetch there (partial output kept by the target), its new)
    tc, pc = Cached(), Cached()   # the target's and the PRM's KV caches
    D = run("draft", p.draft_decode(kvv[0], d[0]), ready_d, kind="draft", disc=outs[0] != "accept",
            kv=kvv[0], cap=d[0])
    for i in range(n):
        out, r = outs[i], rescue[i]
        last = i + 1 == n
        L = run("link", ctx.comm(d[i]), [D], kind="comm")
        V = run("prm", p.prm_score(kvv[i] + d[i], pc.read(kvv[i] + d[i])), [L], kind="verify")
        if out != "accept":
            pc.drop_to(kvv[i])
        PF = new = None
        if sw.prefetch:
            cap = d[i] if out == "accept" else (r or t[i]) if out == "rescue" or r else d[i]
            if cap > 0:
                reused = out == "rescue" or r > 0
                new = tc.read(kvv[i])
                pf_full = p.target(kvv[i], cap, new)
                PF = run("target", pf_full, ready_t, until=V, kind="prefetch", disc=not reused, kv=kvv[i], cap=cap,
                         new=new, atomic=p.target_prefill(kvv[i], new) if p.prefix_cache else 0.0)
                if reused and not sw.partial_cache:  # only a complete prefetch is reused
                    PF.disc = lambda op=PF, full=pf_full: op.work < full
        if out == "accept":
            if sw.partial_cache and PF is not None:
                partials[kvv[i]] = PF, new
            if last:
                break
            ready_d = [D] if sw.draft_pipeline else [V]
            ready_t = [V]
        else:
            if sw.draft_pipeline and not last:
                _spec_draft(run, p, kvv[i] + d[i], d[i + 1], [D], V)
            before = V
            if PF is None and (out == "rescue" or r):
                new = tc.read(kvv[i])
            if r:   # BRSD: the rescue (from the prefetch) that the PRM rejected, which made it backtrack
                full_r = p.target(kvv[i], r, new)
                R0 = run("target", _from_prefetch(full_r, PF, full_r, sw), [V], kind="rewrite", disc=True,
                         kv=kvv[i], cap=r, new=new)
                before = run("prm", p.prm_score(kvv[i] + r, pc.read(kvv[i] + r)),
                             [run("link", ctx.comm(r), [R0], kind="comm")], kind="verify_target")
                pc.drop_to(kvt[i])
                if sw.draft_pipeline and not last:
                    _spec_draft(run, p, kvv[i] + r, d[i + 1], [R0], before)
            if out == "rescue":
                full = p.target(kvt[i], t[i], new)
                dur = _from_prefetch(full, PF, p.target(kvv[i], t[i], new), sw)
            else:   # backtrack: resume the anchor's stopped prefetch, if any; later contexts are abandoned
                kept, new_a = partials.pop(kvt[i], (None, None))
                full = p.target(kvt[i], t[i], new_a if kept is not None else tc.read(kvt[i]))
                dur = _resume(full, kept) if kept is not None else full
                for k in [k for k in partials if k >= kvt[i]]:
                    del partials[k]
            R = run("target", dur, [before], kind="rewrite", ref=V)
            tc.len = kvt[i] + t[i]   # its own step: cached
            L2 = run("link", ctx.comm(t[i]), [R], kind="comm")
            V2 = run("prm", p.prm_score(kvt[i] + t[i], pc.read(kvt[i] + t[i])), [L2], kind="verify_target") \
                if scored[i] else None
            if last:
                break
            S = run("draft", p.draft_prefill(kvt[i], t[i]), [R] if sw.shadow_sync else [L2], kind="sync")
            ready_d = [S, L2] if sw.draft_pipeline or V2 is None else [S, V2]
            ready_t = [V2 or L2]
        D = run("draft", p.draft_decode(kvv[i + 1], d[i + 1]), ready_d, kind="draft",
                disc=outs[i + 1] != "accept", kv=kvv[i + 1], cap=d[i + 1])


def _spec_draft(run, p, kv, n, deps, V):
    """The draft writes the next step while V decides; V rejects, so it is cancelled there."""
    run("draft", p.draft_decode(kv, n), deps, until=V, kind="spec_draft", disc=True, kv=kv, cap=n)


def _from_prefetch(full, PF, pf_full, sw):
    """The target's rescue given the prefetch of the same step (none: from scratch)."""
    if PF is None:
        return full
    return _resume(full, PF) if sw.partial_cache else _complete_or_redo(full, PF, pf_full)


def _resume(full, PF):
    return lambda: max(0.0, full - PF.work)


def _complete_or_redo(full, PF, pf_full):
    return lambda: 0.0 if PF.work >= pf_full else full
