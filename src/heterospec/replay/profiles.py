"""Latency profiles: how long each model call takes, in milliseconds.

Every profile implements :class:`LatencyProfile`: one method per role and phase, taking ``kv`` (tokens already in
that model's context) and ``n`` / ``g`` (tokens processed or generated). The ``paper`` profiles here are the
HeteroReason artifact's fitted formulas; ``roofline`` (:mod:`.roofline`, from the hardware configs and model shapes),
``measured`` (:mod:`.measured`, fitted from our own traces) and ``hls`` (:mod:`.hls`, the HLS stage's draft
performance table) implement the same interface; :func:`get_profile` builds any of them by name.

Context lengths: the artifact's model counts only generated tokens as context (``context_includes_prompt`` False);
the hardware-derived and measured profiles count the prompt too, and the simulator adds it for them.

Recorded prefetch outcomes (``honours_trace``): the paper profiles take the target's work on a rejected step from
what the trace records, as the artifact's formulas do: v11 traces' critical tokens (0: the prefetch completed the
step), and for v12 traces the artifact's prefetch window (the target works on a step from the start of its draft).
The hardware-derived and measured profiles simulate the prefetch instead. ``replay.prefetch_outcome`` overrides it.

Prefix caching: the schedules say how many of a target or PRM call's context tokens are ``new`` (not in that
model's KV cache: after a rejection only the common prefix stays valid). A profile with ``prefix_cache`` charges
only those (``roofline``, ``hls``: the serving stacks' automatic prefix caching, and what our executors do); the
artifact's formulas re-read the whole context on every call, and the ``measured`` fit is by context, so they ignore it.

Paper formulas (REFERENCE.md), closed forms of the artifact's per-token sums:

* draft(kv, n)  = sum_{i=1..n} (a_d + b_d (kv+i))           = n a_d + b_d (n kv + n(n+1)/2)
* prm(n)        = a_p + b_p n
* target(kv, g) = b_pre kv + sum_{i=1..g} (a_t + b_t (kv+i)) = b_pre kv + g a_t + b_t (g kv + g(g+1)/2)
* comm(t)       = t * bytes_per_token / (bandwidth GB/s)    (in ms)
* init(P)       = a_pf + b_pf P + P * kv_bytes_per_token / (bandwidth GB/s)  for P > 0 (0 when a_pf = b_pf = 0)
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Callable

from heterospec.errors import UserError

ROLES = ("draft", "prm", "target")
PHASES = ("prefill", "decode", "score")


class LatencyProfile(ABC):
    """Milliseconds per model call. ``name`` identifies the profile in result tables."""

    name: str = "abstract"
    bytes_per_token: int = 4            # what one token costs on the link (an int32 id)
    draft_kv_bytes_per_token: int = 0   # draft KV-cache bytes per token (state migration)
    context_includes_prompt: bool = False  # kv arguments count the prompt (the simulator adds it when True)
    problem_ms: float = 0.0             # per problem, outside every call (the measured profile's controller time)
    prefix_cache: bool = False          # target and PRM read only their ``new`` context tokens (module docstring)
    honours_trace: bool = False         # rejected steps' target work as the trace records it (module docstring)

    # --- per role and phase
    @abstractmethod
    def draft_decode(self, kv: int, n: int) -> float:
        """The draft generates ``n`` tokens after ``kv`` in context."""

    @abstractmethod
    def draft_prefill(self, kv: int, n: int) -> float:
        """The draft ingests ``n`` tokens (prompt, or target tokens to catch up) after ``kv`` in context."""

    @abstractmethod
    def prm_score(self, n: int, new: int | None = None) -> float:
        """The PRM scores a context of ``n`` tokens (all steps so far plus the new one), ``new`` of them not in its
        cache (None: all)."""

    @abstractmethod
    def target_prefill(self, kv: int, new: int | None = None) -> float:
        """The target reads its context of ``kv`` tokens before generating, ``new`` of them not in its cache
        (None: all)."""

    @abstractmethod
    def target_decode(self, kv: int, g: int) -> float:
        """The target generates ``g`` tokens after ``kv`` in context (no prefill)."""

    # --- derived
    def draft_ingest(self, kv: int, n: int) -> float:
        """The draft ingests the target's step of ``n`` tokens (its KV-cache synchronisation): a prefill."""
        return self.draft_prefill(kv, n)

    def draft_prefill_disaggregated(self, n: int) -> float:
        """The draft's prompt prefill run on the target's GPU (T1); the same as on the draft unless overridden."""
        return self.draft_prefill(0, n)

    def target(self, kv: int, g: int, new: int | None = None) -> float:
        """Prefill plus decode: the artifact's target(kv, g)."""
        return self.target_prefill(kv, new) + self.target_decode(kv, g)

    def comm(self, tokens: int, bandwidth_gbs: float = 16.0) -> float:
        """Token ids over the link: ``tokens * bytes_per_token`` at ``bandwidth_gbs`` (the artifact's comm(t))."""
        return tokens * self.bytes_per_token / (bandwidth_gbs * 1e9) * 1e3

    def init(self, prompt_tokens: int, bandwidth_gbs: float = 16.0) -> float:
        """One-time start of a problem: prefill the prompt for the draft on a GPU, migrate its KV state."""
        if prompt_tokens <= 0:
            return 0.0
        return self.draft_prefill(0, prompt_tokens) + \
            prompt_tokens * self.draft_kv_bytes_per_token / (bandwidth_gbs * 1e9) * 1e3

    def call(self, role: str, phase: str, kv: int, n: int) -> float:
        """Generic dispatch for a model call (role, phase prefill/decode/score)."""
        if role == "draft" and phase == "decode":
            return self.draft_decode(kv, n)
        if role == "draft" and phase == "prefill":
            return self.draft_prefill(kv, n)
        if role == "prm" and phase in ("score", "prefill"):
            return self.prm_score(kv + n, n)
        if role == "target" and phase == "decode":
            return self.target_decode(kv, n)
        if role == "target" and phase == "prefill":
            return self.target_prefill(kv + n, n)
        raise UserError(f"no latency for role '{role}' phase '{phase}'; roles {list(ROLES)}, phases {list(PHASES)}")

    def tokens_within(self, role: str, kv: int, ms: float, cap: int, new: int | None = None) -> int:
        """How many tokens (at most ``cap``) ``role`` generates in ``ms`` (target: including its prefill of ``new``)."""
        f = self.draft_decode if role == "draft" else (lambda kv, k: self.target(kv, k, new))
        lo, hi = 0, cap
        if f(kv, cap) <= ms:
            return cap
        while lo < hi:  # largest k with f(kv, k) <= ms
            mid = (lo + hi + 1) // 2
            if f(kv, mid) <= ms:
                lo = mid
            else:
                hi = mid - 1
        return lo


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

# The draft's ms per generated token (α_d) by the draft device's hardware config (docs/replay.md, "Draft prices"):
# u280: the artifact's config1.json; rtx3090: the artifact's measured BBeam1 Config1 runs (AE_alg reference_runs:
# draft_time / draft_tokens over its four datasets, 11,131.5 s / 1,214,124 tokens); v80: not priced by the artifact,
# the U280's scaled by HBM bandwidth (460 / 820 GB/s; a memory-bound decode). Other devices keep the constants' α_d.
DRAFT_MS_PER_TOKEN = {"u280": 5.74, "rtx3090": 9.168, "v80": 5.74 * 460 / 820}


def _draft_device(system) -> str | None:
    """The hardware name of a SystemConfig's draft device (None: no system, or one without names)."""
    try:
        return str(system.draft.name) if system is not None else None
    except (AttributeError, KeyError):
        return None


def _paper(name: str, c: PaperConstants, system=None, **_) -> "PaperProfile":
    price = DRAFT_MS_PER_TOKEN.get(_draft_device(system))
    return PaperProfile(name, c if price is None else replace(c, draft_alpha=price))


_REGISTRY: dict[str, Callable[..., LatencyProfile]] = {
    name: (lambda name=name, c=c, **kw: _paper(name, c, **kw)) for name, c in PAPER_PROFILES.items()}


def _roofline(**kw) -> LatencyProfile:
    from heterospec.replay.roofline import RooflineProfile
    kw = _need(kw, "roofline", "system", "models")
    return RooflineProfile(kw["system"], kw["models"], kw.get("overheads"), kw.get("checkpoints"),
                           prefix_cache=kw.get("prefix_cache", True))


def _measured(**kw) -> LatencyProfile:
    from heterospec.replay.measured import MeasuredProfile
    return MeasuredProfile.from_fit(_need(kw, "measured", "fit")["fit"])


def _hls(**kw) -> LatencyProfile:
    from heterospec.replay.hls import HlsProfile
    kw = _need(kw, "hls", "system", "models", "perf")
    return HlsProfile(kw["system"], kw["models"], kw["perf"], kw.get("overheads"), kw.get("checkpoints"),
                      prefix_cache=kw.get("prefix_cache", True))


def _need(kw: dict, name: str, *keys: str) -> dict:
    missing = [k for k in keys if kw.get(k) is None]
    if missing:
        raise UserError(f"the {name} profile needs {', '.join(missing)} (only hardware-configured runs provide it)")
    return kw


_REGISTRY.update(roofline=_roofline, measured=_measured, hls=_hls)


def register(name: str, factory: Callable[..., LatencyProfile]) -> None:
    """Add a profile (``factory(**kwargs)`` builds it; e.g. ``system=`` for hardware-derived profiles)."""
    _REGISTRY[name] = factory


def profile_names() -> list[str]:
    return sorted(_REGISTRY)


def get_profile(name: str, **kwargs) -> LatencyProfile:
    """The profile called ``name``; an unknown name is a UserError listing the valid ones.

    Keyword arguments feed the hardware-derived ones: ``system`` (a SystemConfig), ``models`` (a ModelsConfig),
    ``overheads``, ``checkpoints`` and ``prefix_cache`` (roofline, hls), ``perf`` (hls: the HLS perf table), ``fit`` (measured)."""
    if name not in _REGISTRY:
        raise UserError(f"unknown latency profile '{name}'; choose one of {profile_names()}")
    return _REGISTRY[name](**kwargs)
