"""Partial-output reuse: a rescue resumes its prefetch's partial output; a backtrack's rewrite resumes a stopped
prefetch, but only one made for the same step in the same context (:class:`Path` names contexts)."""
from __future__ import annotations

import itertools

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline, Write, left_after


class Path:
    """The accepted path as a stack of steps, each with an id that names its context: two contexts with the same
    id hold the same steps, so a stopped prefetch is reused only by a rewrite of the same step in the same context."""
    __slots__ = ("steps", "kv", "id")
    _ids = itertools.count(1)

    def __init__(self, kv: int = 0):
        self.steps: list[tuple[int, int]] = []   # (tokens, id of the context after the step)
        self.kv = kv                             # the context before the first step (the prompt, where counted)
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


@mechanism("partial_cache", requires=("prefetch",))
class PartialCache(Pipeline):
    def __init__(self, prob, ctx, eng, options):
        super().__init__(prob, ctx, eng, options)
        self.path = Path(prob.kv_verify[0] if prob.kv_verify else 0)   # contexts as the profile counts them: with the prompt or not
        self.partials: dict = {}   # context id -> the prefetch stopped there
        self.kept = None           # the stopped prefetch a backtrack's rewrite resumes

    def unused(self, PF, full):
        return False   # a partial output is reused as far as it got

    def reuse(self, full, PF, pf_full):
        return lambda: left_after(full, PF.work)

    def accepted(self, i):
        super().accepted(i)
        if self.PF is not None:
            self.partials[self.path.id] = self.PF
        self.path.push(self.prob.draft_tokens[i])

    def rewrite(self, i, before, V, ready_d):
        backtrack = self.prob.outcome[i] == "backtrack"
        if backtrack:
            self.path.rollback_to(self.prob.kv_target[i])
            self.kept = None if self.recorded else self.partials.pop(self.path.id, None)
        R = super().rewrite(i, before, V, ready_d)
        self.kept = None
        if backtrack:   # the stopped prefetches of contexts no longer on the path
            live = {0} | {c for _, c in self.path.steps}
            for k in [k for k in self.partials if k not in live]:
                del self.partials[k]
        self.path.push(self.prob.target_tokens[i])
        return R

    def rewrite_plan(self, i):
        if self.kept is None:
            return super().rewrite_plan(i)
        kept, kvt, t = self.kept, self.prob.kv_target[i], self.prob.target_tokens[i]
        full = self.p.target(kvt, t, kept.new)
        return Write(kvt, t, kept.new, full, lambda: left_after(full, kept.work))
