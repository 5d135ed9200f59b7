"""The ``paper`` latency profiles: the HeteroReason artifact's fitted formulas (closed forms in :mod:`.registry`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from heterospec.config.hardware import Device, System, device
from heterospec.errors import UserError
from heterospec.replay.simulator.latency import LatencyProfile


@dataclass(frozen=True)
class PaperConstants:
    """The artifact's fitted constants (ms). ``semantics`` names the replay rule they belong to."""
    semantics: str
    draft_alpha: float
    draft_beta: float
    prm_alpha: float
    prm_beta: float
    target_pre_beta: float
    target_alpha: float
    target_gen_beta: float
    draft_prefill_alpha: float = 0.0
    draft_prefill_beta: float = 0.0
    draft_kv_bytes_per_token: int = 0
    bytes_per_token: int = 4
    bandwidth_gbs: float = 16.0


PAPER_V12 = PaperConstants(
    semantics="v12", draft_alpha=5.74, draft_beta=0.002464,
    prm_alpha=14.415957692625284, prm_beta=0.1948780118493466,
    target_pre_beta=0.24499333805234357, target_alpha=19.442100036975807, target_gen_beta=0.0004155445761835332,
    draft_prefill_alpha=16.123062162697437, draft_prefill_beta=0.006210464885094716, draft_kv_bytes_per_token=12288)
PAPER_V11 = PaperConstants(
    semantics="v11", draft_alpha=5.74, draft_beta=0.004928, prm_alpha=8.0, prm_beta=0.0018,
    target_pre_beta=0.0018, target_alpha=23.16, target_gen_beta=0.000084)
PAPER_V11_CONFIG2 = replace(PAPER_V11, target_alpha=7.1, target_gen_beta=0.000017)


class PaperProfile(LatencyProfile):
    """The artifact's formulas with one constant set; sums in closed form (O(1) per call)."""
    honours_trace = True

    def __init__(self, name: str, c: PaperConstants):
        self.name = name
        self.c = c
        self.semantics = c.semantics
        self.bytes_per_token = c.bytes_per_token
        self.draft_kv_bytes_per_token = c.draft_kv_bytes_per_token
        self.bandwidth_gbs = c.bandwidth_gbs

    def draft_decode(self, kv: int, n: int) -> float:
        c = self.c
        return n * c.draft_alpha + c.draft_beta * (n * kv + n * (n + 1) / 2)

    def draft_prefill(self, kv: int, n: int) -> float:
        # The artifact fits only the prompt prefill (a + b P); no constants: no cost.
        if n <= 0 or (self.c.draft_prefill_alpha == 0.0 and self.c.draft_prefill_beta == 0.0):
            return 0.0
        return self.c.draft_prefill_alpha + self.c.draft_prefill_beta * n

    def draft_ingest(self, kv: int, n: int) -> float:
        return 0.0   # the artifact's formulas draft the next step straight from the target's context

    def prm_score(self, n: int, new: int | None = None) -> float:
        return self.c.prm_alpha + self.c.prm_beta * n

    def target_prefill(self, kv: int, new: int | None = None) -> float:
        return self.c.target_pre_beta * kv

    def target_decode(self, kv: int, g: int) -> float:
        c = self.c
        return g * c.target_alpha + c.target_gen_beta * (g * kv + g * (g + 1) / 2)

    def target(self, kv: int, g: int, new: int | None = None) -> float:
        c = self.c   # prefill + decode in one expression (the simulator calls this most)
        return c.target_pre_beta * kv + g * c.target_alpha + c.target_gen_beta * (g * kv + g * (g + 1) / 2)

    def comm(self, tokens: int, bandwidth_gbs: float | None = None) -> float:
        return super().comm(tokens, self.bandwidth_gbs if bandwidth_gbs is None else bandwidth_gbs)

    def init(self, prompt_tokens: int, bandwidth_gbs: float | None = None) -> float:
        return super().init(prompt_tokens, self.bandwidth_gbs if bandwidth_gbs is None else bandwidth_gbs)

    def tokens_within(self, role: str, kv: int, ms: float, cap: int, new: int | None = None) -> int:
        # Solve the quadratic a k + b (k kv + k(k+1)/2) <= ms' exactly, then clamp (guards rounding).
        c = self.c
        if role == "draft":
            a, b, budget = c.draft_alpha, c.draft_beta, ms
        else:
            a, b, budget = c.target_alpha, c.target_gen_beta, ms - self.target_prefill(kv)
        if budget <= 0 or cap <= 0:
            return 0
        lin = a + b * (kv + 0.5)
        k = budget / lin if b == 0 else (-lin + math.sqrt(lin * lin + 2 * b * budget)) / b
        k = max(0, min(cap, int(k)))
        f = self.draft_decode if role == "draft" else self.target
        while k < cap and f(kv, k + 1) <= ms:
            k += 1
        while k > 0 and f(kv, k) > ms:
            k -= 1
        return k


PAPER_PROFILES = {"paper_v12": PAPER_V12, "paper_v11": PAPER_V11, "paper_v11_config2": PAPER_V11_CONFIG2}

# The draft's measured ms per generated token (α_d) by the draft device's hardware config (docs/replay.md, "Draft
# prices"): u280: the artifact's config1.json; rtx3090: the artifact's measured BBeam1 Config1 runs (AE_alg
# reference_runs: draft_time / draft_tokens over its four datasets, 11,131.5 s / 1,214,124 tokens).
DRAFT_MS_PER_TOKEN = {"u280": 5.74, "rtx3090": 9.168}
SCALED_FROM = "u280"   # an FPGA draft the artifact does not price (v80): this one's price scaled by memory bandwidth


def draft_price(draft: Device) -> float | None:
    """α_d for a draft device: measured, or for another FPGA the U280's scaled by memory bandwidth (a memory-bound
    decode; v80: 5.74 x 460 / 820); None (the constants' own) for any other device."""
    if draft.name in DRAFT_MS_PER_TOKEN:
        return DRAFT_MS_PER_TOKEN[draft.name]
    if draft.kind != "fpga":
        return None
    return DRAFT_MS_PER_TOKEN[SCALED_FROM] * device(SCALED_FROM).memory.bandwidth_gbs / draft.memory.bandwidth_gbs


def paper_profile(name: str, system: System | None = None) -> PaperProfile:
    """Paper profile ``name``, with the draft's price for ``system``'s draft device (no system: the constants')."""
    if name not in PAPER_PROFILES:
        raise UserError(f"unknown paper profile '{name}'; choose one of {sorted(PAPER_PROFILES)}")
    c = PAPER_PROFILES[name]
    price = draft_price(system.draft) if system is not None else None
    return PaperProfile(name, c if price is None else replace(c, draft_alpha=price))
