"""DFVG's token-level designs: a draft tree per round, verified by the target in one pass.

* ``fpga_gpu``  the draft on the FPGA, the target on the GPU, stage-decoupled: while the GPU verifies tree i the
                FPGA already drafts tree i+1 from its own guess (its main path accepted, its next token as the
                target's). A right guess (the trace's ``guess_hit``) means tree i+1 is ready when the GPU is; a
                wrong one discards the speculative tree when the alignment message (accepted path + the target's
                token, over the link) arrives, and the FPGA redrafts from the true context. Rolling its KV cache
                back is a pointer reset (the KVMU), so the rollback costs the message and the redraft.
* ``gpu_only``  draft and target share one GPU: draft, verify, draft, ... nothing overlaps, nothing crosses a link.

Per round (from the trace): the draft ingests ``catch_up`` tokens (what was accepted since its last pass), then
runs ``draft_passes - 1`` tree levels of ``width`` nodes (one pass each: the lanes share the weight stream); the
tree (token id + parent index per node) crosses the link; the target verifies 1 + ``nodes`` tokens in one pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heterospec.speculative.rounds import Round

TREE_BYTES_PER_NODE = 8       # int32 token id + int32 parent index


@dataclass
class Costs:
    """Milliseconds of each DFVG operation from a latency profile (:mod:`heterospec.replay.profiles.registry`)."""
    profile: Any

    def prompt_target(self, n: int) -> float:
        return self.profile.target_prefill(n)

    def ingest(self, kv: int, n: int) -> float:
        return self.profile.draft_prefill(kv, n)

    def level(self, kv: int, width: int) -> float:
        """One tree level: with an HLS table, one token's pass (the lanes share it); else one pass over the level."""
        if getattr(self.profile, "decode_table", None) is not None:
            return self.profile.draft_decode(kv, 1)
        return self.profile.draft_prefill(kv, width)

    def verify(self, kv: int, n: int) -> float:
        return self.profile.devices["target"].forward(kv, n)

    def decode(self, kv: int, n: int) -> float:
        return self.profile.target_decode(kv, n)


def draft_ms(c: Costs, r: Round) -> float:
    kv = r.kv_draft + r.catch_up
    return c.ingest(r.kv_draft, r.catch_up) + sum(c.level(kv + lvl, r.width) for lvl in range(r.draft_passes - 1))


def dfvg(prompt: int, rounds: list[Round], costs: Costs, link_ms, eng, design: str, align_bytes: int = 4) -> dict:
    """Issue one generation's operations on ``eng`` (a :class:`heterospec.replay.simulator.engines.FastEngine`)."""
    run = eng.run
    fpga = design == "fpga_gpu"
    draft_res = "draft" if fpga else "target"
    V = run("target", costs.prompt_target(prompt), kind="init")
    D = A = run(draft_res, costs.ingest(0, prompt), kind="init", role="draft")
    hit_prev, discarded, hits = False, 0.0, 0
    for i, r in enumerate(rounds):
        D = run(draft_res, draft_ms(costs, r), [D] if (fpga and hit_prev) else [A, V], kind="draft", role="draft")
        L = run("link", link_ms(r.nodes * TREE_BYTES_PER_NODE), [D], kind="tree") if fpga else D
        V = run("target", costs.verify(r.kv_target, r.nodes + 1), [L, V], kind="verify")
        A = run("link", link_ms((r.accepted + 1) * align_bytes), [V], kind="align") if fpga else V
        if fpga and i + 1 < len(rounds) and not r.guess_hit:     # the tree drafted ahead is discarded at A
            S = run(draft_res, draft_ms(costs, rounds[i + 1]), [D], until=A, kind="spec_draft", disc=True,
                    role="draft")
            discarded += S.end - S.start
        hits += bool(fpga and r.guess_hit and i + 1 < len(rounds))
        hit_prev = r.guess_hit
    return dict(discarded_draft_ms=discarded, guess_hits=hits)


DESIGNS = {"fpga_gpu": "draft on the FPGA, verify on the GPU, overlapped", "gpu_only": "draft and verify on one GPU"}
