"""The schedule-only check's latency profile: one problem's model calls priced at their own measured durations.

The validation's replay prices every call by a fit and composes the calls by a schedule; its error mixes the two
(and the machine's noise in single calls). :class:`TraceTimes` takes the fit out: each call the replay asks for is
answered with the wall time the sequential run of the same problem measured for that very call (nothing overlaps
there, so it is the call's own time), found by the step it belongs to. What is left of the error is the schedule
model's: how the calls overlap, how the target yields its shared core, the controller's time between calls.

Matching, per step of the problem (:class:`~heterospec.replay.problem.TracedProblem`, the same calls' view): the
draft's write of the step (its 1-token feed and its decode), the feed of a rescued or backtracked step into the draft
before its next write (asked as a rolled-back cache's ingest or as a rebuild from scratch, whichever the schedule
models), every PRM score and target write (a BRSD backtrack's failed rescue first). Work the sequential run never
did (a prefetch of a step the PRM accepts, a speculative draft after a rejected step) has no measured time: it is
priced by ``fallback`` (the fitted profile) and counted in ``unmatched``. A partial target write (a prefetch the verdict stops) is its call's prefill plus the decode's share of
the tokens written. The controller's time between calls and per problem is the fallback's (the model's). Two calls
the replay cannot tell apart (a BRSD draft step and its failed rescue of as many tokens, scored at one context
length) share their mean, so the problem's calls still sum to their measured total.
"""
from __future__ import annotations

from collections import defaultdict

from heterospec.replay.latency import LatencyProfile
from heterospec.replay.measured import MeasuredProfile
from heterospec.replay.problem import TracedProblem


class TraceTimes(LatencyProfile):
    """Milliseconds per call from one problem's own measured calls (module docstring)."""

    context_includes_prompt = True

    def __init__(self, prob: TracedProblem, calls: list[dict], fallback: MeasuredProfile):
        """``prob``: the problem's steps (prompt not in its contexts); ``calls``: its sequential run's ``model_calls/v1``
        rows (``step_idx``, ``call_idx``, ``role``, ``phase``, ``tokens_in``, ``tokens_out``, ``kv_len``, ``wall_ms``)."""
        self.name = "trace_times"
        self.fallback = fallback
        self.problem_ms = fallback.problem_ms
        self.dispatch = fallback.dispatch
        self.writes: dict[tuple, float] = {}           # (kv, n) -> a draft write's ms
        self.feeds: dict[tuple, float] = {}            # (kv, n) -> a draft feed's ms (prompt, ingest, restore)
        self.scores: dict[int, float] = {}             # context -> a PRM score's ms
        self.targets: dict[int, tuple] = {}            # context -> (prefill ms, tokens, decode ms) of a target write
        self.matched: set[tuple] = set()
        self.unmatched: set[tuple] = set()
        self.complete = _index(self, prob, calls)

    # --- the interface, each call looked up, else the fallback's price
    def draft_decode(self, kv: int, n: int) -> float:
        if n <= 0:
            return 0.0
        return self.dispatch.get("draft", 0.0) + self._own(("write", kv, n), self.writes.get((kv, n)),
                                                           lambda: self.fallback.draft_decode(kv, n) -
                                                           self.dispatch.get("draft", 0.0))

    def draft_prefill(self, kv: int, n: int) -> float:
        if n <= 0:
            return 0.0
        return self._own(("feed", kv, n), self.feeds.get((kv, n)), lambda: self.fallback.draft_prefill(kv, n))

    def prm_score(self, n: int, new: int | None = None) -> float:
        return self.dispatch.get("prm", 0.0) + self._own(("score", n), self.scores.get(n), lambda: (
            self.fallback.prm_score(n, new) - self.dispatch.get("prm", 0.0)))

    def target_prefill(self, kv: int, new: int | None = None) -> float:
        own = self.targets.get(kv)
        return self.dispatch.get("target", 0.0) + self._own(("prefill", kv), own and own[0], lambda: (
            self.fallback.target_prefill(kv, new) - self.dispatch.get("target", 0.0)))

    def target_decode(self, kv: int, g: int) -> float:
        if g <= 0:
            return 0.0
        own = self.targets.get(kv)
        if own is not None and 0 < g <= own[1]:   # a write of this step, or the part of it a stopped prefetch did
            return self._own(("decode", kv), own[2] * g / own[1], None)
        return self._own(("decode", kv, g), None, lambda: self.fallback.target_decode(kv, g))

    def _own(self, key: tuple, ms: float | None, fallback) -> float:
        if ms is not None:
            self.matched.add(key)
            return ms
        self.unmatched.add(key)
        return fallback()


def _index(tt: TraceTimes, prob: TracedProblem, calls: list[dict]) -> bool:
    """Fill ``tt``'s tables from the problem's calls, step by step; False where a step's calls are not the ones its
    outcome implies (those steps are left to the fallback)."""
    P = prob.prompt
    kvv = [k + P for k in prob.kvv]
    kvt = [k + P for k in prob.kvt]
    rescue = prob.r or [0] * len(prob.d)
    scored = prob.scored or [True] * len(prob.d)
    by_step: dict[int, list[dict]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c["call_idx"]):
        if c["role"] == "draft" and c["phase"] == "prefill" and c["kv_len"] == 0:
            tt.feeds[(0, c["tokens_in"])] = c["wall_ms"]     # the prompt going in (init)
            continue
        by_step[c["step_idx"]].append(c)
    seen: dict[tuple, list] = defaultdict(list)    # (table, key) -> every call's ms found for it
    complete = True
    for i, idx in enumerate(sorted(by_step)[:len(prob.d)]):
        rows = by_step[idx]
        draft = [c for c in rows if c["role"] == "draft"]
        prm = [c["wall_ms"] for c in rows if c["role"] == "prm"]
        target = [c for c in rows if c["role"] == "target"]
        feed = sum(c["wall_ms"] for c in draft if c["phase"] == "prefill")
        decode = [c["wall_ms"] for c in draft if c["phase"] == "decode"]
        out = prob.outcome[i - 1] if i else "accept"
        if i and out != "accept":   # this write's feed is the draft taking in the previous step's target output
            seen[("feeds", (kvt[i - 1], prob.t[i - 1]))].append(feed)
            if out == "backtrack":   # asked as a rebuild from scratch where the schedule rolls no KV cache back
                seen[("feeds", (0, kvt[i - 1] + prob.t[i - 1]))].append(feed)
            feed = 0.0
        if decode:
            seen[("writes", (kvv[i], prob.d[i]))].append(feed + decode[0])
        contexts = [kvv[i] + prob.d[i]]
        if prob.outcome[i] != "accept":
            contexts += [kvv[i] + rescue[i]] if rescue[i] else []
            contexts += [kvt[i] + prob.t[i]] if scored[i] else []
        writes = _writes(target)
        kv_writes = ([(kvv[i], rescue[i])] if rescue[i] else []) + [(kvt[i], prob.t[i])]
        if prob.outcome[i] == "accept":
            kv_writes = []
        if len(decode) != 1 or len(prm) != len(contexts) or len(writes) != len(kv_writes):
            complete = False
            continue
        for n, ms in zip(contexts, prm):
            seen[("scores", n)].append(ms)
        for (kv, g), (pre, dec) in zip(kv_writes, writes):
            seen[("targets", kv)].append((pre, g, dec))
    for (table, key), found in seen.items():
        if table == "targets":   # shared per token of the decode, so that writes of other lengths share it fairly
            found = [f for f in found if f[1] > 0]
            if found:
                g = max(f[1] for f in found)
                tt.targets[key] = (sum(f[0] for f in found) / len(found), g,
                                   g * sum(f[2] / f[1] for f in found) / len(found))
        else:
            getattr(tt, table)[key] = sum(found) / len(found)
    return complete


def _writes(rows: list[dict]) -> list[tuple[float, float]]:
    """A role's writes, (prefill ms, decode ms) each: a prefill row and the decode row after it."""
    out, pre = [], 0.0
    for c in rows:
        if c["phase"] == "prefill":
            pre += c["wall_ms"]
        else:
            out.append((pre, c["wall_ms"]))
            pre = 0.0
    return out
