"""The HeteroReason artifact's own replays (v12 and v11), step by step as REFERENCE.md states them.

These reproduce the artifact's published latency numbers from its traces; they are closed-form recurrences, not a
discrete-event simulation (see :mod:`heterospec.replay.simulator.des` for that). Input: the events table of
:mod:`heterospec.replay.artifact.importer`. Output: one row per problem (``ARTIFACT_REPLAY_SCHEMA``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from heterospec.errors import UserError
from heterospec.replay.artifact.importer import TARGET_TRACE_MODES
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.profiles.paper import PAPER_PROFILES, paper_profile
from heterospec.store.parquet import versioned, write_parquet

SEMANTICS = ("v12", "v11")
DEFAULT_PROFILE = {"v12": "paper_v12", "v11": "paper_v11"}

ARTIFACT_REPLAY_SCHEMA = versioned("artifact_replay", 2, [
    pa.field("run", pa.string(), nullable=False),           # results/<run>/ ("" outside a run)
    pa.field("trace_set", pa.string(), nullable=False),     # with_bt / no_bt / ...
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("problem_idx", pa.int64(), nullable=False),
    pa.field("format", pa.string(), nullable=False),        # the trace's format
    pa.field("semantics", pa.string(), nullable=False),     # the replay rule used (v12 | v11)
    pa.field("profile", pa.string(), nullable=False),
    pa.field("events", pa.int32(), nullable=False),
    pa.field("draft_tokens", pa.int64(), nullable=False),   # sum of draft_tokens_spent
    pa.field("target_tokens", pa.int64(), nullable=False),  # target tokens the rule used (T or total)
    pa.field("target_wait_ms", pa.float64(), nullable=False),  # v12: target time not hidden by prefetch
    pa.field("latency_ms", pa.float64(), nullable=False),
])


@dataclass(frozen=True)
class Event:
    """The fields of one execution_trace event that the replay rules read."""
    status: str
    logical_step: int
    d: int                          # draft_tokens_spent
    target_tokens_spent: int = 0
    target_total_tokens: int | None = None
    target_mode: str | None = None
    target_critical_gen_tokens: int | None = None
    to_step: int | None = None
    bt_target_mode: str | None = None
    bt_target_tokens: int | None = None
    bt_target_critical_gen_tokens: int | None = None


@dataclass
class Replayed:
    latency_ms: float
    target_tokens: int = 0
    target_wait_ms: float = 0.0


def _total(e: Event) -> int:
    """target_total_tokens, falling back to target_tokens_spent (v11 events have no total)."""
    return e.target_total_tokens if e.target_total_tokens is not None else e.target_tokens_spent


def replay_v12(events: list[Event], prompt_tokens: int, p: LatencyProfile) -> Replayed:
    """The artifact's v12 ("rescue serial then parallel") replay of one problem."""
    if not events:
        return Replayed(0.0)
    d0 = events[0].d
    lat = p.init(prompt_tokens) + p.draft_decode(0, d0)
    w = p.draft_decode(0, d0)
    dkv, kv = d0, 0
    stack: list[tuple[int, int]] = []
    used_t = 0
    wait_total = 0.0
    last = len(events) - 1
    def next_draft(after: float, nd: int | None) -> None:
        """The draft writes the next step while ``after`` (the last verification) runs: the longer one counts."""
        nonlocal lat, w, dkv
        if nd is None:
            lat += after
            return
        w = max(after, p.draft_decode(dkv, nd))
        lat += w
        dkv += nd

    def target_step(t: int, verify: float) -> float:
        """The target's step of ``t`` tokens: the part its prefetch window (w + verify) did not hide is waited for;
        returns the verification of the target's step."""
        nonlocal lat, wait_total, used_t
        used_t += t
        wait = max(0.0, p.target(kv, t) - (w + verify))
        wait_total += wait
        lat += verify + wait
        return p.prm_score(kv + t) + p.comm(t)

    for i, e in enumerate(events):
        d = e.d
        verify = p.prm_score(kv + d) + p.comm(d)
        nd = events[i + 1].d if i < last else None
        if e.status == "accept_pure_draft":
            kv += d
            stack.append((e.logical_step, d))
            next_draft(verify, nd)
        elif e.status == "target_rescue":
            t = _total(e)
            tv = target_step(t, verify)
            kv += t
            dkv = kv
            stack.append((e.logical_step, t))
            next_draft(tv, nd)
        elif e.status == "BACKTRACK_EVENT":
            t = _total(e) or d
            if e.to_step is None:
                raise UserError(f"BACKTRACK_EVENT at step {e.logical_step} has no to_step")
            while stack and stack[-1][0] > e.to_step:
                _, tok = stack.pop()
                kv -= tok
                dkv -= tok
            tv = target_step(t, verify)
            kv += t
            dkv += t
            stack.append((e.to_step, t))
            next_draft(tv, nd)
        else:
            raise UserError(f"v12 replay: status '{e.status}' at step {e.logical_step} is not a v12 status")
    return Replayed(lat, used_t, wait_total)


def v11_counts(e: Event) -> tuple[int, int, bool]:
    """(total, critical, mode recorded) for a rescue / accept_via_prefetch / backtrack event (v11 rule)."""
    if e.status == "BACKTRACK_EVENT":
        if e.bt_target_mode is not None and e.bt_target_mode in TARGET_TRACE_MODES:
            return e.bt_target_tokens or 0, e.bt_target_critical_gen_tokens or 0, True
        return e.d, e.d, False
    if e.target_mode in TARGET_TRACE_MODES:
        crit = e.target_critical_gen_tokens
        total = _total(e)
        return total, total if crit is None else crit, True
    if e.status == "target_rescue":
        n = max(1, e.target_tokens_spent)
        return n, n, False
    return 1, 1, False


def replay_v11(events: list[Event], p: LatencyProfile) -> Replayed:
    """The artifact's v11 ("critical tokens") replay of one problem (no init cost)."""
    if not events:
        return Replayed(0.0)
    lat = p.draft_decode(0, events[0].d)
    dkv, kv = events[0].d, 0
    used_t = 0
    last = len(events) - 1
    for i, e in enumerate(events):
        d = e.d
        prm = p.prm_score(kv + d) + p.comm(d)
        nd = events[i + 1].d if i < last else None
        if e.status == "accept_pure_draft":
            lat += max(prm, p.draft_decode(dkv, nd)) if nd is not None else prm
            kv += d
            dkv += d
        elif e.status in ("target_rescue", "accept_via_prefetch", "BACKTRACK_EVENT"):
            total, crit, recorded = v11_counts(e)
            used_t += total
            if e.status == "BACKTRACK_EVENT":
                tgt = p.target(kv, crit)
            else:
                tgt = p.target(kv, crit) if (crit > 0 or not recorded) else 0.0
            lat += prm + tgt
            if nd is not None:
                lat += p.draft_decode(dkv, nd)
            kv += total
        else:
            raise UserError(f"v11 replay: unknown status '{e.status}' at step {e.logical_step}")
    return Replayed(lat, used_t, 0.0)


# ----------------------------------------------------------------------------- tables
_EVENT_COLS = ("status", "logical_step", "draft_tokens_spent", "target_tokens_spent", "target_total_tokens",
               "target_mode", "target_critical_gen_tokens", "to_step", "bt_target_mode", "bt_target_tokens",
               "bt_target_critical_gen_tokens")


def problems(events: pa.Table):
    """Yield (first-row dict of per-problem fields, [Event, ...]) per problem, in table order."""
    cols = events.select(["dataset", "source", "problem_idx", "format", "prompt_tokens", *_EVENT_COLS]).to_pydict()
    src = cols["source"]
    n = len(src)
    start = 0
    while start < n:
        end = start
        while end < n and src[end] == src[start]:
            end += 1
        head = {k: cols[k][start] for k in ("dataset", "source", "problem_idx", "format", "prompt_tokens")}
        evs = [Event(cols["status"][i], cols["logical_step"][i], cols["draft_tokens_spent"][i],
                     cols["target_tokens_spent"][i], cols["target_total_tokens"][i], cols["target_mode"][i],
                     cols["target_critical_gen_tokens"][i], cols["to_step"][i], cols["bt_target_mode"][i],
                     cols["bt_target_tokens"][i], cols["bt_target_critical_gen_tokens"][i])
               for i in range(start, end)]
        yield head, evs
        start = end


def replay_table(events: pa.Table, semantics: str | None = None, profile: str | LatencyProfile | None = None,
                 trace_set: str = "", run: str = "") -> pa.Table:
    """Replay every problem of an events table. ``semantics`` None: each trace's own format's rule;
    ``profile`` None: that rule's paper profile (paper_v12 / paper_v11)."""
    if semantics is not None and semantics not in SEMANTICS:
        raise UserError(f"unknown replay semantics '{semantics}'; choose one of {list(SEMANTICS)}")
    cache: dict[str, LatencyProfile] = {}

    def prof(sem: str) -> LatencyProfile:
        if isinstance(profile, LatencyProfile):
            return profile
        name = profile or DEFAULT_PROFILE[sem]
        if name not in cache:
            cache[name] = paper_profile(name)
        return cache[name]

    rows = []
    for head, evs in problems(events):
        sem = semantics or head["format"]
        p = prof(sem)
        r = replay_v12(evs, head["prompt_tokens"] or 0, p) if sem == "v12" else replay_v11(evs, p)
        rows.append(dict(head, run=run, trace_set=trace_set, semantics=sem, profile=p.name, events=len(evs),
                         draft_tokens=sum(e.d for e in evs), target_tokens=r.target_tokens,
                         target_wait_ms=r.target_wait_ms, latency_ms=r.latency_ms))
    for r in rows:
        r.pop("prompt_tokens")
    return pa.Table.from_pylist(rows, schema=ARTIFACT_REPLAY_SCHEMA)


def replay_for_profiles(events: pa.Table, profiles: list[str], trace_set: str = "", run: str = "") -> pa.Table:
    """The artifact's formulas with every paper profile in ``profiles`` whose rule is a trace's own format (a format
    none of them matches: its default profile), so each DES row under a paper profile has its formula partner."""
    by_format: dict[str, list[str]] = {}
    for name in profiles:
        if name in PAPER_PROFILES:
            by_format.setdefault(PAPER_PROFILES[name].semantics, []).append(name)
    formats = events.column("format")
    parts = []
    for fmt in sorted(set(formats.to_pylist())):
        sub = events.filter(pa.compute.equal(formats, fmt))
        parts += [replay_table(sub, fmt, name, trace_set, run) for name in by_format.get(fmt, [DEFAULT_PROFILE[fmt]])]
    return pa.concat_tables(parts) if parts else ARTIFACT_REPLAY_SCHEMA.empty_table()


def write_replay(table: pa.Table, path: str | Path) -> Path:
    return write_parquet(table, path, ARTIFACT_REPLAY_SCHEMA)
