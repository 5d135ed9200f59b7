"""The latency-profile interface: how long each model call takes, in milliseconds (:mod:`heterospec.replay.profiles.registry` builds them)."""
from __future__ import annotations

from abc import ABC, abstractmethod

from heterospec.errors import UserError
from heterospec.trio import ROLES

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
    def target_verify(self, kv: int, n: int) -> float:
        """The target checks ``n`` drafted tokens (a token-level speculation round) after ``kv`` in one pass. By
        default one decode step: at batch 1 a pass is bound by reading the weights, a few more tokens add little
        (the hardware-derived profiles price the pass itself)."""
        return self.target_decode(kv, 1)

    def draft_round(self, kv: int, n: int) -> float:
        """The draft drafts ``n`` tokens of a token-level speculation round after ``kv``: by default a decode of
        ``n`` tokens (the measured profile fits the rounds themselves)."""
        return self.draft_decode(kv, n)

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

    def cancel_units(self, role: str, kv: int, n: int, new: int | None = None) -> tuple[float, float]:
        """How a cancel cuts a write of ``n`` tokens after ``kv`` (a prefetch, a draft ahead of its verdict):
        ``(atomic, grain)``, the first ms it cannot cut and the ms of each token after them, whose token in progress
        finishes (0: it stops where it is). By default the artifact's rule, a cancel stops the work at once, except
        that a target reading its context through a prefix cache finishes that read."""
        if role == "target" and self.prefix_cache:
            return self.target_prefill(kv, new), 0.0
        return 0.0, 0.0

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
