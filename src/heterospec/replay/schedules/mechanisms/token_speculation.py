"""Token-level speculation in the target's writes: a rescue, a backtrack's rewrite or a failed rescue is written in
verification rounds instead of token by token (the mechanism of DFVG and SpecReason+Decode, under step-level
speculation).

A write of ``g`` tokens after ``kv`` in context (:class:`~heterospec.replay.schedules.pipeline.Write`) becomes
ceil(g / tau) rounds (:class:`~heterospec.replay.simulator.system.SpeculationParams`: ``tau`` tokens out of each round, the
accepted ones plus the target's own; ``draft_len`` drafted). Round j at context kv_j = kv + j tau: the draft device
drafts ``draft_len`` tokens (``draft_round(kv_j, draft_len)``, by default ``draft_decode``: its first pass also
takes in last round's bonus token), the link carries them and brings the verdict back, the target verifies them in one pass
(``target_verify(kv_j, draft_len + 1)``). The target first reads the context it has not cached, as a plain write does.

The write is two operations: the draft's share on the **draft device**, then the target's share (verify passes and
link) on the target. Uncontended, that is the rounds' latency (draft and verify alternate; nothing overlaps within a
write). The draft device is one resource: drafting for a rewrite queues behind the draft's own steps and the steps
it drafts ahead, which is the contention between the two levels of speculation.

A prefetch runs while the draft device writes the step, so by default (``speculative_prefetch: false``) it decodes
plainly and only what is left of the step after the verdict is written in rounds (what the prefetch wrote is not
written again). With ``speculative_prefetch: true`` the artifact's v12 window (the target works on a rejected step
from the start of its draft) speculates from the start and its drafting queues behind the draft's own step. The
simulated prefetch (hardware and measured profiles) always decodes plainly.
"""
from __future__ import annotations

import math

from heterospec.errors import UserError
from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline, Write, left_after


def rounds_ms(p, ctx, spec, kv: int, g: int) -> tuple[float, float]:
    """(draft ms, target ms) of writing ``g`` tokens after ``kv`` in rounds (no context read)."""
    k, tau = spec.draft_len, spec.tau
    draft = target = 0.0
    for j in range(math.ceil(g / tau) if g > 0 else 0):
        kv_j = kv + int(j * tau)
        draft += p.draft_round(kv_j, k)
        target += p.target_verify(kv_j, k + 1) + ctx.comm(k) + ctx.comm(min(g - int(j * tau), math.ceil(tau)))
    return draft, target


@mechanism("token_speculation", options={"speculative_prefetch": False})
class TokenSpeculation(Pipeline):
    def __init__(self, prob, ctx, eng, options):
        super().__init__(prob, ctx, eng, options)
        if ctx.speculation is None:
            raise UserError("schedule with token_speculation: the replay has no replay.token_speculation settings")
        self.spec = ctx.speculation
        self.speculative_prefetch = options["speculative_prefetch"]

    def window_write(self, w: Write, start: list, after, V, disc: bool = False):
        if self.speculative_prefetch:   # speculated from the start: its drafting waits for the draft device
            PF = self.target_write(w, start, kind="prefetch", disc=disc, kv=w.kv, cap=w.g, new=w.new)
            return self.run("target", 0.0, [after, PF], kind="rewrite", ref=V)
        # plain while the draft writes the step, cut at the verdict; the rest in rounds
        PF = self.run("target", w.full, start, until=after, kind="prefetch", disc=disc, kv=w.kv, cap=w.g, new=w.new)
        rest = Write(w.kv, w.g, w.new, w.full, lambda: left_after(w.full, PF.work))
        return self.target_write(rest, [after, PF], kind="rewrite", ref=V, disc=disc, kv=w.kv, cap=w.g, new=w.new)

    def split(self, w: Write):
        """A callable (evaluated once, when the write starts) giving (draft ms, target ms) of what is left of ``w``."""
        p, memo = self.p, []

        def parts() -> tuple[float, float]:
            if not memo:
                left = w.ms() if callable(w.ms) else w.ms
                if left <= 0 or w.g <= 0:
                    memo.append((0.0, 0.0))
                else:
                    done = max(0.0, w.full - left)       # plain-decoding ms a prefetch already spent on this write
                    m = p.tokens_within("target", w.kv, done, w.g, w.new) if done > 0 else 0
                    read = p.target_prefill(w.kv, w.new) if m == 0 else 0.0
                    d, t = rounds_ms(p, self.ctx, self.spec, w.kv + m, w.g - m)
                    memo.append((d, read + t))
            return memo[0]
        return parts

    def target_write(self, w: Write, deps: list, **kw):
        parts = self.split(w)
        D = self.run("draft", lambda: parts()[0], deps, kind="sd_draft", role="draft", disc=kw.get("disc", False),
                     until=kw.get("until"))
        return self.run("target", lambda: parts()[1], [*deps, D], **kw)
