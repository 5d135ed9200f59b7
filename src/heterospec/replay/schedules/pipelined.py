"""The speculative pipeline behind step_ahead, prefetch_only and hetero; the schedule's switches say what overlaps.

Per step i: the draft writes it (with ``draft_pipeline``, right after step i-1's draft, speculating that i-1 is
accepted); with ``prefetch`` the target starts writing step i at the same moment and stops when the PRM decides.
Accept: the prefetched tokens are discarded. Reject (rescue): the target finishes the step from its prefetched
prefix (``partial_cache``; without it only a complete prefetch is reused), the speculative next draft is cancelled,
the target's step is sent, PRM-verified, and ingested by the draft — after the transfer, or, with ``shadow_sync``,
while the target is still writing. Backtrack: the prefetch was for the abandoned context and is discarded; the
target writes the replacement step from the rolled-back context (the KVMU's rollback is a pointer reset).
With ``disaggregated_prefill`` the draft's prompt is prefilled on the target GPU and its KV state moved over the
link once; the target can start its own work as soon as that prefill is done.
"""
from __future__ import annotations


def pipelined(prob, ctx, eng, sw) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    if n == 0:
        return
    d, t, kvv, kvt, outs = prob.d, prob.t, prob.kvv, prob.kvt, prob.outcome
    P = prob.prompt
    ready_d = ready_t = []
    if P > 0:
        if sw.disaggregated_prefill:
            pre = run("target", p.draft_prefill_disaggregated(P), kind="init", role="draft")
            ready_d = [run("link", ctx.system.link_ms(P * p.draft_kv_bytes_per_token), [pre], kind="migrate")]
            ready_t = [pre]
        else:
            ready_d = ready_t = [run("draft", p.draft_prefill(0, P), kind="init")]
    D = run("draft", p.draft_decode(kvv[0], d[0]), ready_d, kind="draft", disc=outs[0] != "accept",
            kv=kvv[0], cap=d[0])
    for i in range(n):
        out = outs[i]
        last = i + 1 == n
        L = run("link", ctx.comm(d[i]), [D], kind="comm")
        V = run("prm", p.prm_score(kvv[i] + d[i]), [L], kind="verify")
        PF = None
        if sw.prefetch:
            cap = t[i] if out == "rescue" else d[i]
            if cap > 0:
                reused = out == "rescue"
                pf_full = p.target(kvv[i], cap)
                PF = run("target", pf_full, ready_t, until=V, kind="prefetch", disc=not reused, kv=kvv[i], cap=cap)
                if reused and not sw.partial_cache:  # only a complete prefetch is reused
                    PF.disc = lambda op=PF, full=pf_full: op.end - op.start < full
        if out == "accept":
            if last:
                break
            ready_d = ready_t = [D] if sw.draft_pipeline else [V]
        else:
            if sw.draft_pipeline and not last:
                run("draft", p.draft_decode(kvv[i] + d[i], d[i + 1]), [D], until=V, kind="spec_draft", disc=True,
                    kv=kvv[i] + d[i], cap=d[i + 1])
            full = p.target(kvt[i], t[i])
            if PF is not None and out == "rescue":
                dur = _resume(full, PF) if sw.partial_cache else _complete_or_redo(full, PF, p.target(kvv[i], t[i]))
            else:
                dur = full
            R = run("target", dur, [V], kind="rewrite", ref=V)
            L2 = run("link", ctx.comm(t[i]), [R], kind="comm")
            V2 = run("prm", p.prm_score(kvt[i] + t[i]), [L2], kind="verify_target")
            if last:
                break
            S = run("draft", p.draft_prefill(kvt[i], t[i]), [R] if sw.shadow_sync else [L2], kind="sync")
            ready_d = [S, L2] if sw.draft_pipeline else [S, V2]
            ready_t = [R] if sw.draft_pipeline else [V2]
        D = run("draft", p.draft_decode(kvv[i + 1], d[i + 1]), ready_d, kind="draft",
                disc=outs[i + 1] != "accept", kv=kvv[i + 1], cap=d[i + 1])


def _resume(full, PF):
    return lambda: max(0.0, full - (PF.end - PF.start))


def _complete_or_redo(full, PF, pf_full):
    return lambda: 0.0 if PF.end - PF.start >= pf_full else full
