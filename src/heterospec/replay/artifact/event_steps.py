"""The artifact's events (:mod:`heterospec.replay.artifact.importer`) as the simulator's steps
(:data:`heterospec.replay.simulator.steps.REPLAY_STEPS_SCHEMA`)."""
from __future__ import annotations

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.replay.artifact.replays import Event, v11_counts
from heterospec.replay.simulator.steps import REPLAY_STEPS_SCHEMA


def steps_from_events(events: pa.Table, trace_set: str = "artifact") -> pa.Table:
    """Artifact events -> steps. v12 traces: target tokens ``target_total_tokens``, else ``target_tokens_spent``;
    a backtrack with 0 uses its draft tokens; the PRM scores the target's step. v11 traces: target and critical
    tokens by the v11 rule (:func:`heterospec.replay.artifact.replays.v11_counts`; ``accept_via_prefetch`` is a rescue whose
    output came from the prefetch); the target's step is not scored (the v11 rule charges no PRM call for it)."""
    cols = events.select(["dataset", "source", "format", "prompt_tokens", "status", "logical_step",
                          "draft_tokens_spent", "target_tokens_spent", "target_total_tokens", "to_step",
                          "target_mode", "target_critical_gen_tokens", "bt_target_mode", "bt_target_tokens",
                          "bt_target_critical_gen_tokens"]).to_pydict()
    n = len(cols["source"])
    rows: list[dict] = []
    i = 0
    while i < n:
        src = cols["source"][i]
        stack: list[tuple[int, int]] = []
        kv = dkv = pending = 0   # pending: the draft's context for the next step's draft, by the rule
        k = 0
        while i < n and cols["source"][i] == src:
            status, d = cols["status"][i], cols["draft_tokens_spent"][i]
            draft_kv = pending
            if k == 0 or cols["format"][i] == "v12":
                dkv = pending + d    # v12 (and both at the start): the draft's step joins its counter
            total = cols["target_total_tokens"][i]
            t = total if total is not None else cols["target_tokens_spent"][i]
            step = cols["logical_step"][i]
            kv_v, rb, crit = kv, 0, None
            v11 = cols["format"][i] == "v11"
            if v11 and status != "accept_pure_draft":
                t, crit, _ = v11_counts(Event(status, step, d, cols["target_tokens_spent"][i], total,
                                              cols["target_mode"][i], cols["target_critical_gen_tokens"][i],
                                              cols["to_step"][i], cols["bt_target_mode"][i],
                                              cols["bt_target_tokens"][i], cols["bt_target_critical_gen_tokens"][i]))
            if status == "accept_pure_draft":
                outcome, t = "accept", 0
                stack.append((step, d))
                kv += d
            elif status in ("target_rescue", "accept_via_prefetch"):
                outcome = "rescue"
                t = max(1, t) if status == "accept_via_prefetch" and not v11 else t
                stack.append((step, t))
                kv += t
            elif status == "BACKTRACK_EVENT":
                outcome = "backtrack"
                t = t or d
                to = cols["to_step"][i]
                while stack and stack[-1][0] > to:
                    rb += stack.pop()[1]
                kv -= rb
                stack.append((to, t))
                step = to
                kv += t
            else:
                raise UserError(f"{src}: unknown status '{status}'")
            if v11:
                pending = dkv
                dkv += d if outcome == "accept" else 0
            else:
                pending = dkv if outcome == "accept" else kv if outcome == "rescue" else dkv - rb + t
            rows.append(dict(trace_set=trace_set, dataset=cols["dataset"][i], problem=src, source="artifact", step_idx=k,
                             logical_step=step, outcome=outcome, prompt_tokens=cols["prompt_tokens"][i] or 0,
                             draft_tokens=d, target_tokens=t, kv_verify=kv_v, kv_target=kv_v - rb,
                             rollback_tokens=rb, path_tokens=kv, target_scored=not v11, rescue_tokens=0,
                             critical_tokens=crit, draft_kv=draft_kv))
            k += 1
            i += 1
    return pa.Table.from_pylist(rows, schema=REPLAY_STEPS_SCHEMA)
