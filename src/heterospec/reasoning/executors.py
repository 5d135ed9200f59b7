"""Executors: how the controller's requests run on the three devices.

* :class:`Sequential` — the paper's 3-GPU baseline: one model works at a time.
* :class:`StepAhead` — one worker per device, overlapped: the target prefetches the current step
  while the draft and PRM work (its partial output is cached and reused when reasoning returns to
  the same context), and the draft writes the next step while the PRM verifies this one (kept on
  accept, cancelled on reject).

For greedy decoding both make the same decisions: only the timing differs. How the target writes (plainly or with
token-level speculation, :mod:`heterospec.speculative.stepwise`) changes neither. Every model call is
recorded with the step it served and what became of it: a draft proposal and each PRM call carry the verdict
the controller settles on that step (:data:`heterospec.reasoning.controller.VERDICTS`), never one worked out here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from heterospec.reasoning.controller import ACCEPT, BACKTRACK, Node, finished
from heterospec.reasoning.roles import Call, Step


@dataclass
class Recorder:
    """Trace rows of one problem: one per model call, and one per step of the controller."""
    t0: int = field(default_factory=time.perf_counter_ns)
    rows: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    rounds: list[tuple[dict, list]] = field(default_factory=list)  # a speculative call's row and its Round records

    def add(self, calls: list[Call], role: str, device: str, step: int, attempt: int, outcome: str,
            score: float | None = None, step_idx: int | None = None, impl: str | None = None) -> list[dict]:
        idx = len(self.steps) - 1 if step_idx is None else step_idx   # default: the controller's current step
        new = [dict(step_idx=idx, step=step, attempt=attempt, role=role, device=device, impl=impl, phase=c.phase,
                    tokens_in=c.tokens_in,
                    tokens_out=c.tokens_out, kv_len=c.kv_len, start_ns=c.start_ns - self.t0,
                    end_ns=c.end_ns - self.t0, modelled_ms=c.modelled_ms, prm_score=score, outcome=outcome)
               for c in calls]
        self.rows.extend(new)
        self.rounds += [(row, c.rounds) for row, c in zip(new, calls) if c.rounds]
        return new

    def round_rows(self) -> list[dict]:
        """One row per token-level verification round of a speculative call (collect_rounds/v1), with its call's
        step and final outcome and its ``start_ns``, which joins it to the call's row."""
        keys = ("step_idx", "step", "attempt", "outcome", "start_ns")
        return [r.row(round=i, **{k: row[k] for k in keys}) for row, rounds in self.rounds for i, r in enumerate(rounds)]

    @staticmethod
    def relabel(rows: list[dict], outcome: str) -> None:
        for r in rows:
            r["outcome"] = outcome


class TracingExecutor:
    """Shared plumbing: the roles, the problem's prompt, the context of a path, the trace."""

    def __init__(self, draft, prm, target, max_tokens: int, devices: dict[str, str],
                 impls: dict[str, str] | None = None):
        self.draft, self.prm, self.target = draft, prm, target
        self.max_tokens, self.devices, self.impls = max_tokens, devices, impls or {}

    def begin(self, question: str, prompt_ids: list[int], seed: int) -> None:
        self.question, self.prompt_ids = question, list(prompt_ids)
        for role in (self.draft, self.prm, self.target):
            role.call("reset", seed)
        self.rec = Recorder()
        self._draft_rows: list[dict] = []   # the proposal awaiting its verdict
        self._scored: tuple[str, list[dict]] = ("draft", [])   # author and PRM rows of the step just verified

    def context(self, path: list[Node]) -> list[int]:
        ids = list(self.prompt_ids)
        for node in path:
            ids += node.step.tokens
        return ids

    def texts(self, path: list[Node], step: Step | None = None) -> list[str]:
        return [n.step.text for n in path] + ([step.text] if step is not None else [])

    def record(self, role: str, calls: list[Call], step: int, attempt: int, outcome: str, score=None,
               step_idx: int | None = None) -> list[dict]:
        return self.rec.add(calls, role, self.devices[role], step, attempt, outcome, score, step_idx,
                            self.impls.get(role))

    def new_step(self, path: list[Node]) -> None:
        """A draft proposal opens the controller's next step; its outcome follows the verdicts."""
        self.rec.steps.append(dict(step_idx=len(self.rec.steps), position=len(path), outcome="pending",
                                   draft_score=None))

    def scored(self, path: list[Node], author: str, score: float, calls: list[Call]) -> None:
        """Record a PRM call; its label waits for the controller's verdict."""
        rows = self.record("prm", calls, len(path), 0 if author == "draft" else 1, "pending", score)
        self._scored = (author, rows)
        if author == "draft":
            self.rec.steps[-1]["draft_score"] = score

    def settle(self, path: list[Node], step: Step, verdict: str) -> None:
        author, rows = self._scored
        self.rec.relabel(rows, verdict)
        if author == "draft":
            self.rec.relabel(self._draft_rows, verdict)
            self.rec.steps[-1]["outcome"] = "accept" if verdict == ACCEPT else "rescue"
        elif verdict == BACKTRACK:
            self.rec.steps[-1]["outcome"] = "backtrack"

    def finish(self) -> None:
        """Wait until every device is idle (cancelled work included)."""


class Sequential(TracingExecutor):
    """One call at a time, in the controller's order."""

    def propose(self, path: list[Node]) -> Step:
        self.new_step(path)
        ctx = self.context(path)
        step = self.draft.call("write", ctx, len(ctx), self.max_tokens)
        self._draft_rows = self.record("draft", step.calls, len(path), 0, "pending")
        return step

    def verify(self, path: list[Node], step: Step, author: str) -> float:
        score, calls = self.prm.call("score", self.question, self.texts(path, step))
        self.scored(path, author, score, calls)
        return score

    def rewrite(self, path: list[Node], why: str) -> Step:
        ctx = self.context(path)
        step = self.target.call("write", ctx, len(ctx), self.max_tokens)
        self.record("target", step.calls, len(path), 1 if why == "rescue" else 2, why)
        return step


class StepAhead(TracingExecutor):
    """Target prefetch with a partial-output cache, and draft pipelining."""

    def __init__(self, *args, prefetch: bool = True, draft_pipeline: bool = True, plain_prefetch: bool = False,
                 **kw):
        """``plain_prefetch``: the target writes speculatively (a SpeculativeTarget) but prefetches plainly."""
        super().__init__(*args, **kw)
        self.use_prefetch, self.use_pipeline = prefetch, draft_pipeline
        self.plain_prefetch = plain_prefetch

    def begin(self, question: str, prompt_ids: list[int], seed: int) -> None:
        super().begin(question, prompt_ids, seed)
        self.prefetch: tuple[tuple, int, object] | None = None   # (context, step, handle) of the target
        self.partials: dict[tuple, tuple[Step, list[dict]]] = {}  # context -> target output + its trace rows
        self.ahead: tuple[tuple, int, object] | None = None      # (context, step, handle) of the draft
        self.zombies: list[tuple[str, object, tuple, int, int]] = []  # cancelled work still finishing, + its step_idx
        self.started: dict[int, int] = {}                        # id(handle) -> the controller's step that started it

    # -- the draft ------------------------------------------------------------------------------
    def propose(self, path: list[Node]) -> Step:
        self.new_step(path)
        ctx = self.context(path)
        self._reap(block=False)
        if self.use_prefetch:
            self._start_prefetch(ctx, len(path))
        if self.ahead is not None and self.ahead[0] == tuple(ctx):  # drafted while the PRM verified
            step = self.ahead[2].result()
            self.started.pop(id(self.ahead[2]))
            self.ahead = None
        else:
            self._cancel_ahead()
            step = self.draft.call("write", ctx, len(ctx), self.max_tokens)
        self._draft_rows = self.record("draft", step.calls, len(path), 0, "pending")
        return step

    def _cancel_ahead(self) -> None:
        if self.ahead is not None:
            ctx, pos, handle = self.ahead
            self.draft.cancel(handle)
            self.zombies.append(("draft", handle, ctx, pos, self.started.pop(id(handle))))
            self.ahead = None

    # -- the PRM, with the next draft step overlapped ---------------------------------------------
    def verify(self, path: list[Node], step: Step, author: str) -> float:
        handle = self.prm.submit("score", self.question, self.texts(path, step))
        if self.use_pipeline and finished(step) is None:
            self._cancel_ahead()
            ctx = self.context(path)
            nxt = ctx + step.tokens
            self.ahead = (tuple(nxt), len(path) + 1, self.draft.submit("write", nxt, len(ctx), self.max_tokens))
            self.started[id(self.ahead[2])] = len(self.rec.steps) - 1
        score, calls = handle.result()
        self.scored(path, author, score, calls)
        return score

    def settle(self, path: list[Node], step: Step, verdict: str) -> None:
        super().settle(path, step, verdict)
        if self._scored[0] != "draft":
            return                          # a rewrite's verdict moves no device work
        if verdict == ACCEPT:
            self._stop_prefetch()           # its output so far is cached for a later return here
        else:
            self._cancel_ahead()            # the step it continued was rejected

    # -- the target ------------------------------------------------------------------------------
    def _start_prefetch(self, ctx: list[int], pos: int) -> None:
        key = tuple(ctx)
        if self.prefetch is not None and self.prefetch[0] == key:
            return
        self._stop_prefetch()
        if key in self.partials:
            return                          # already have output for this context
        how = (None, True) if self.plain_prefetch else ()      # (step_start, plain)
        self.prefetch = (key, pos, self.target.submit("write", ctx, len(ctx), self.max_tokens, *how))
        self.started[id(self.prefetch[2])] = len(self.rec.steps) - 1

    def _stop_prefetch(self) -> None:
        if self.prefetch is not None:
            key, pos, handle = self.prefetch
            self.target.cancel(handle)
            self.zombies.append(("target", handle, key, pos, self.started.pop(id(handle))))
            self.prefetch = None

    def rewrite(self, path: list[Node], why: str) -> Step:
        ctx = self.context(path)
        key, attempt = tuple(ctx), 1 if why == "rescue" else 2
        if self.prefetch is not None and self.prefetch[0] == key:     # the prefetch is this very step
            step = self.prefetch[2].result()
            self.started.pop(id(self.prefetch[2]))
            self.prefetch = None
            self.record("target", step.calls, len(path), attempt, "prefetch_hit")
            return step
        self._reap(block=False, want=key)
        cached, rows = self.partials.pop(key, (None, []))
        if cached is not None and (cached.complete or len(cached.tokens) >= self.max_tokens):
            self.rec.relabel(rows, "prefetch_hit")                     # a stopped prefetch had finished it
            return Step(cached.tokens, cached.text, cached.complete, cached.eos)
        if cached is not None:                                         # resume the partial output
            self.rec.relabel(rows, "partial_reuse")
            step = self.target.call("write", ctx + cached.tokens, len(ctx), self.max_tokens, len(ctx))
            self.record("target", step.calls, len(path), attempt, "partial_reuse")
            return step
        step = self.target.call("write", ctx, len(ctx), self.max_tokens)
        self.record("target", step.calls, len(path), attempt, why)
        return step

    # -- cancelled work --------------------------------------------------------------------------
    def _reap(self, block: bool, want: tuple | None = None) -> None:
        """Collect finished cancelled work: record it, and keep the target's output as a partial."""
        keep = []
        for role, handle, key, pos, idx in self.zombies:
            if block or handle.done() or key == want:
                step = handle.result()
                rows = self.record(role, step.calls, pos, 0 if role == "draft" else 1, "cancelled", step_idx=idx)
                old = self.partials.get(key)
                if role == "target" and step.tokens and (old is None or len(step.tokens) > len(old[0].tokens)):
                    self.partials[key] = (step, rows)
            else:
                keep.append((role, handle, key, pos, idx))
        self.zombies = keep

    def finish(self) -> None:
        self._cancel_ahead()
        self._stop_prefetch()
        self._reap(block=True)
