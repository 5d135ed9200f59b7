"""The 3-GPU baseline: draft a step, send it, PRM-verify it; on a rejection the target writes the step, its output
is sent, PRM-verified when the algorithm scores target steps (BRSD; RSD trusts a rescue), and the draft ingests it.
A BRSD backtrack first pays for the rescue the PRM rejected, then the target's rewrite at the anchor. Nothing
overlaps."""
from __future__ import annotations

from heterospec.replay.schedules import Cached


def sequential(prob, ctx, eng) -> None:
    p, run = ctx.profile, eng.run
    n = len(prob.d)
    scored, rescue = prob.scored or [True] * n, prob.r or [0] * n
    tc, pc = Cached(), Cached()   # the target's and the PRM's KV caches
    prev = [run("draft", p.draft_prefill(0, prob.prompt), kind="init")] if prob.prompt > 0 else []
    for i in range(n):
        d, kvv, out = prob.d[i], prob.kvv[i], prob.outcome[i]
        reject = out != "accept"
        D = run("draft", p.draft_decode(kvv, d), prev, kind="draft", disc=reject, kv=kvv, cap=d)
        L = run("link", ctx.comm(d), [D], kind="comm")
        V = run("prm", p.prm_score(kvv + d, pc.read(kvv + d)), [L], kind="verify")
        prev = [V]
        if reject:
            t, kvt, r = prob.t[i], prob.kvt[i], rescue[i]
            pc.drop_to(kvv)
            before = V
            if r:   # the rescue that failed verification and made BRSD backtrack: written, sent, scored, dropped
                new = tc.read(kvv)
                R0 = run("target", p.target(kvv, r, new), [V], kind="rewrite", disc=True, kv=kvv, cap=r, new=new)
                before = run("prm", p.prm_score(kvv + r, pc.read(kvv + r)),
                             [run("link", ctx.comm(r), [R0], kind="comm")], kind="verify_target")
                pc.drop_to(kvt)
            R = run("target", p.target(kvt, t, tc.read(kvt)), [before], kind="rewrite", ref=V)
            tc.len = kvt + t   # its own step: cached
            L2 = run("link", ctx.comm(t), [R], kind="comm")
            prev = [run("prm", p.prm_score(kvt + t, pc.read(kvt + t)), [L2], kind="verify_target")] if scored[i] \
                else [L2]
            if i + 1 < n:
                prev.append(run("draft", p.draft_prefill(kvt, t), [L2], kind="sync"))
