"""The 3-GPU baseline: draft a step, send it, PRM-verify it; on a rejection the target writes the step, its output
is sent, PRM-verified when the algorithm scores target steps (BRSD; RSD trusts a rescue), and the draft ingests it.
A BRSD backtrack first pays for the rescue the PRM rejected, then the target's rewrite at the anchor. Nothing
overlaps."""
from __future__ import annotations


def sequential(prob, ctx, eng) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    scored, rescue = prob.scored or [True] * n, prob.r or [0] * n
    prev = [run("draft", p.draft_prefill(0, prob.prompt), kind="init")] if prob.prompt > 0 else []
    for i in range(n):
        d, kvv, out = prob.d[i], prob.kvv[i], prob.outcome[i]
        reject = out != "accept"
        D = run("draft", p.draft_decode(kvv, d), prev, kind="draft", disc=reject, kv=kvv, cap=d)
        L = run("link", ctx.comm(d), [D], kind="comm")
        V = run("prm", p.prm_score(kvv + d), [L], kind="verify")
        prev = [V]
        if reject:
            t, kvt, r = prob.t[i], prob.kvt[i], rescue[i]
            before = V
            if r:   # the rescue that failed verification and made BRSD backtrack: written, sent, scored, dropped
                R0 = run("target", p.target(kvv, r), [V], kind="rewrite", disc=True, kv=kvv, cap=r)
                before = run("prm", p.prm_score(kvv + r), [run("link", ctx.comm(r), [R0], kind="comm")],
                             kind="verify_target")
            R = run("target", p.target(kvt, t), [before], kind="rewrite", ref=V)
            L2 = run("link", ctx.comm(t), [R], kind="comm")
            prev = [run("prm", p.prm_score(kvt + t), [L2], kind="verify_target")] if scored[i] else [L2]
            if i + 1 < n:
                prev.append(run("draft", p.draft_prefill(kvt, t), [L2], kind="sync"))
