"""Draft pipelining (T2): the draft writes the next step while the PRM scores this one, speculating that it is
accepted, at most ``draft_lookahead`` steps ahead of the PRM's verdicts (the paper's pipelining: 1). A rejection
cancels the speculative draft at the verdict."""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline


def _check(opts: dict) -> str | None:
    k = opts["draft_lookahead"]
    return None if k >= 1 else f"draft_lookahead is {k}, expected 1 or more (no pipelining: draft_pipeline: false)"


@mechanism("draft_pipeline", options={"draft_lookahead": 1}, check=_check)
class DraftPipeline(Pipeline):
    def __init__(self, prob, ctx, eng, options):
        super().__init__(prob, ctx, eng, options)
        self.ahead = options["draft_lookahead"]
        self.settled: list = []   # per step of the current run of drafts: the op whose end settles it

    def draft_after_accept(self, i, D, V):
        self.settled.append(V)
        a = self.ahead
        return [D, self.settled[-1 - a]] if len(self.settled) > a else [D]

    def draft_after_reject(self, S, L2, V2):
        self.settled = [V2 or L2]
        return [S, L2]

    def sync_deps(self, R, L2, V2):
        """The draft takes the target's step in while the PRM scores it: the next step, drafted ahead of that verdict,
        starts with it."""
        return super().sync_deps(R, L2, None)

    def rejected(self, i, D, V, last):
        super().rejected(i, D, V, last)
        if not last:
            prob = self.prob
            self.speculate(prob.kv_verify[i] + prob.draft_tokens[i], prob.draft_tokens[i + 1], [D], V)

    def rescue_rejected(self, i, R0, ver, last):
        super().rescue_rejected(i, R0, ver, last)
        if not last:
            prob = self.prob
            self.speculate(prob.kv_verify[i] + self.rescue[i], prob.draft_tokens[i + 1], [R0], ver)

    def speculate(self, kv: int, n: int, deps: list, V) -> None:
        """The draft writes the next step while V decides; V rejects, so it is cancelled there (as the profile's
        ``cancel_units`` cut a write)."""
        atomic, grain = self.p.cancel_units("draft", kv, n)
        self.run("draft", self.p.draft_decode(kv, n), deps, until=V, kind="spec_draft", disc=True, kv=kv, cap=n,
                 atomic=atomic, grain=grain)
