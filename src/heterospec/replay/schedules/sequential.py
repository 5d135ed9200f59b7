"""The 3-GPU baseline: draft a step, send it, PRM-verify it; on a rejection the target writes the step, its output
is sent and PRM-verified and the draft ingests it. Nothing overlaps."""
from __future__ import annotations


def sequential(prob, ctx, eng) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    prev = [run("draft", p.draft_prefill(0, prob.prompt), kind="init")] if prob.prompt > 0 else []
    for i in range(n):
        d, kvv, out = prob.d[i], prob.kvv[i], prob.outcome[i]
        reject = out != "accept"
        D = run("draft", p.draft_decode(kvv, d), prev, kind="draft", disc=reject, kv=kvv, cap=d)
        L = run("link", ctx.comm(d), [D], kind="comm")
        V = run("prm", p.prm_score(kvv + d), [L], kind="verify")
        prev = [V]
        if reject:
            t, kvt = prob.t[i], prob.kvt[i]
            R = run("target", p.target(kvt, t), [V], kind="rewrite", ref=V)
            L2 = run("link", ctx.comm(t), [R], kind="comm")
            V2 = run("prm", p.prm_score(kvt + t), [L2], kind="verify_target")
            prev = [V2]
            if i + 1 < n:
                prev.append(run("draft", p.draft_prefill(kvt, t), [L2], kind="sync"))

