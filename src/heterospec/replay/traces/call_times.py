"""The schedule-only check's latency profile: one problem's model calls priced at their own measured durations.

The validation's replay prices every call by a fit and composes the calls by a schedule; its error mixes the two
(and the machine's noise in single calls). :class:`TraceTimes` takes the fit out: each call the replay asks for is
answered with the time the measured run of that problem under that executor took for that very call, found by the
step it belongs to. What is left of the error is the schedule model's: how the calls overlap, how the target yields
its shared core, the controller's time between calls.

* A sequential run's calls are each its own time (nothing overlaps).
* An overlapped run's (step_ahead; :func:`overlapped_rows`) are the same run's calls, so the comparison is free of
  the noise between two runs: a call of a role that yields its core (``system.yields_to``) counts its wall time less
  the owner's calls that overlapped it (the replay's yield model adds back the replayed owner's); a draft the verdict
  cancelled is no step's work, a prefetch the accept stopped gives the target's pace at that context, and a stopped
  prefetch that a later rewrite resumed is part of that rewrite (:func:`_target_writes`).

Matching, per step of the problem (:class:`~heterospec.replay.simulator.problem.TracedProblem`, the same calls' view): the
draft's write of the step (its 1-token feed and its decode), the feed of a rescued or backtracked step into the draft
before its next write (asked as a rolled-back cache's ingest or as a rebuild from scratch, whichever the schedule
models), every PRM score and target write (a BRSD backtrack's failed rescue first). Work the measured run did not do
in full (for a sequential run, a prefetch or a speculative draft; for an overlapped one, the part of a cancelled
call the verdict cut) has no measured time: it is priced by ``fallback`` (the fitted profile) and counted in
``unmatched``. A partial target write (a prefetch the verdict stops) is its call's prefill plus the decode's share of
the tokens written. The controller's time between calls and per problem is the fallback's (the model's). Two calls
the replay cannot tell apart (a BRSD draft step and its failed rescue of as many tokens, scored at one context
length) share their mean, so the problem's calls still sum to their measured total.
"""
from __future__ import annotations

from collections import defaultdict

from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.profiles.measured import MeasuredProfile
from heterospec.replay.simulator.problem import TracedProblem


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
        self.paces: dict[int, tuple] = {}              # context -> the same of a prefetch the accept stopped there
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
        own = self.targets.get(kv) or self.paces.get(kv)
        return self.dispatch.get("target", 0.0) + self._own(("prefill", kv), own and own[0], lambda: (
            self.fallback.target_prefill(kv, new) - self.dispatch.get("target", 0.0)))

    def target_decode(self, kv: int, g: int) -> float:
        if g <= 0:
            return 0.0
        own = self.targets.get(kv)
        if own is not None and 0 < g <= own[1]:   # a write of this step, or the part of it a stopped prefetch did
            return self._own(("decode", kv), own[2] * g / own[1], None)
        pace = self.paces.get(kv)
        if pace is not None:                       # a prefetch the accept stopped: its measured time per token
            return self._own(("decode", kv), pace[2] * g / pace[1], None)
        return self._own(("decode", kv, g), None, lambda: self.fallback.target_decode(kv, g))

    def cancel_units(self, role: str, kv: int, n: int, new: int | None = None) -> tuple[float, float]:
        """As the fallback's (our executors cancel between tokens), a target write's at its own measured pace."""
        if role == "target" and n > 0:
            return self.target_prefill(kv, new), self.target_decode(kv, n) / n
        return self.fallback.cancel_units(role, kv, n, new)

    def _own(self, key: tuple, ms: float | None, fallback) -> float:
        if ms is not None:
            self.matched.add(key)
            return ms
        self.unmatched.add(key)
        return fallback()


def _index(tt: TraceTimes, prob: TracedProblem, calls: list[dict]) -> bool:
    """Fill ``tt``'s tables from the problem's calls, step by step; False where a step's calls of a role are not the
    ones its outcome implies (those calls are left to the fallback).

    The calls of an overlapped run (``call_outcome`` given, :func:`overlapped_rows`) have more than the sequential
    run's: a cancelled draft ahead of a rejected step and a target prefetch the verdict stopped are not the step's
    own work (the replay cuts them where the verdict comes); a stopped prefetch tells the target's pace at its
    context, and one that a later rewrite resumed is part of that rewrite (:func:`_target_writes`)."""
    P = prob.prompt_tokens
    kvv = [k + P for k in prob.kv_verify]
    kvt = [k + P for k in prob.kv_target]
    rescue = prob.rescue_tokens or [0] * len(prob.draft_tokens)
    scored = prob.target_scored or [True] * len(prob.draft_tokens)
    by_step: dict[int, list[dict]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c["call_idx"]):
        if c["role"] == "draft" and c["phase"] == "prefill" and c["kv_len"] == 0:
            tt.feeds[(0, c["tokens_in"])] = c["wall_ms"]     # the prompt going in (init)
            continue
        if c.get("call_outcome") == "cancelled" and c["role"] == "draft":
            continue
        by_step[c["step_idx"]].append(c)
    writes_of, stopped = _target_writes([c for rs in by_step.values() for c in rs if c["role"] == "target"])
    seen: dict[tuple, list] = defaultdict(list)    # (table, key) -> every call's ms found for it
    complete = True
    for i, idx in enumerate(sorted(by_step)[:len(prob.draft_tokens)]):
        rows = by_step[idx]
        draft = [c for c in rows if c["role"] == "draft"]
        prm = [c["wall_ms"] for c in rows if c["role"] == "prm"]
        feed = sum(c["wall_ms"] for c in draft if c["phase"] == "prefill")
        decode = [c["wall_ms"] for c in draft if c["phase"] == "decode"]
        out = prob.outcome[i - 1] if i else "accept"
        if i and out != "accept":   # this write's feed is the draft taking in the previous step's target output
            seen[("feeds", (kvt[i - 1], prob.target_tokens[i - 1]))].append(feed)
            if out == "backtrack":   # asked as a rebuild from scratch where the schedule rolls no KV cache back
                seen[("feeds", (0, kvt[i - 1] + prob.target_tokens[i - 1]))].append(feed)
            feed = 0.0
        if len(decode) == 1:
            seen[("writes", (kvv[i], prob.draft_tokens[i]))].append(feed + decode[0])
        else:
            complete = False
        contexts = [kvv[i] + prob.draft_tokens[i]]
        if prob.outcome[i] != "accept":
            contexts += [kvv[i] + rescue[i]] if rescue[i] else []
            contexts += [kvt[i] + prob.target_tokens[i]] if scored[i] else []
        if len(prm) == len(contexts):
            for n, ms in zip(contexts, prm):
                seen[("scores", n)].append(ms)
        else:
            complete = False
        kv_writes = [] if prob.outcome[i] == "accept" else \
            ([(kvv[i], rescue[i])] if rescue[i] else []) + [(kvt[i], prob.target_tokens[i])]
        writes = writes_of.get(idx, [])
        if len(writes) == len(kv_writes):
            for (kv, g), w in zip(kv_writes, writes):
                seen[("targets", kv)].append((w[0], g, w[2]))
        else:
            complete = False
        if not kv_writes and stopped.get(idx):   # a prefetch the accept stopped: the target's pace here
            seen[("paces", kvv[i])] += stopped[idx]
    for (table, key), found in seen.items():
        if table in ("targets", "paces"):   # shared per token of the decode, so that writes of other lengths share it
            found = [f for f in found if f[1] > 0]
            if found:
                g = max(f[1] for f in found)
                getattr(tt, table)[key] = (sum(f[0] for f in found) / len(found), g,
                                           g * sum(f[2] / f[1] for f in found) / len(found))
        else:
            getattr(tt, table)[key] = sum(found) / len(found)
    return complete


def _target_writes(rows: list[dict]) -> tuple[dict[int, list[tuple]], dict[int, list[tuple]]]:
    """The target's writes per step, (prefill ms, tokens, decode ms) each, and the prefetches stopped at each step
    that nothing resumed. A sequential run's are its prefill and decode rows in pairs. In an overlapped run a
    prefetch the verdict stopped (``call_outcome`` ``cancelled``) is no write of its step, and one a later rewrite
    resumed (``partial_reuse``: the resumed write's prefill starts where the stopped decode ended) joins that
    rewrite: the write is the stopped part's prefill, then both parts' work."""
    pairs = []   # [step_idx, prefill row, decode row]
    pre = None
    for c in sorted(rows, key=lambda c: c.get("start_ns", c["call_idx"])):
        if c["phase"] == "prefill":
            pre = c if pre is None else {**pre, "wall_ms": pre["wall_ms"] + c["wall_ms"]}
        else:
            pairs.append((pre, c))
            pre = None
    writes: dict[int, list[tuple]] = defaultdict(list)
    stopped: dict[int, list[tuple]] = defaultdict(list)
    open_parts: dict[int, tuple] = {}   # context where a stopped part ends -> (prefill ms, tokens, decode ms)
    for p, d in pairs:
        pre_ms = p["wall_ms"] if p else 0.0
        how = d.get("call_outcome")
        if p is not None and how == "partial_reuse" and p["kv_len"] + p["tokens_in"] in open_parts:
            p0, g0, d0 = open_parts.pop(p["kv_len"] + p["tokens_in"])
            writes[d["step_idx"]].append((p0, g0 + d["tokens_out"], d0 + pre_ms + d["wall_ms"]))
        elif how in ("partial_reuse", "cancelled"):
            part = (pre_ms, d["tokens_out"], d["wall_ms"])
            if how == "partial_reuse":
                open_parts[d["kv_len"] + d["tokens_out"]] = part
            else:
                stopped[d["step_idx"]].append(part)
        else:
            writes[d["step_idx"]].append((pre_ms, d["tokens_out"], d["wall_ms"]))
    return writes, stopped


def overlapped_rows(rows: list[dict], yields_to: dict[str, str]) -> list[dict]:
    """One problem's calls of an overlapped run (``start_ns``, ``end_ns``, ``call_outcome``) with ``wall_ms`` the
    call's own work: for a role that yields its core to another (``system.yields_to``: the target to the PRM on
    cpu3), its wall time less the time the other's calls overlapped it, which the replay's yield model adds back
    as the replayed owner's calls overlap it."""
    out = []
    for c in rows:
        ms = (c["end_ns"] - c["start_ns"]) / 1e6
        owner = yields_to.get(c["role"])
        if owner:
            ms -= sum(max(0, min(c["end_ns"], o["end_ns"]) - max(c["start_ns"], o["start_ns"]))
                      for o in rows if o["role"] == owner) / 1e6
        out.append({**c, "wall_ms": max(ms, 0.0)})
    return out
