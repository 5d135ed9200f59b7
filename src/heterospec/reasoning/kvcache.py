"""The software twin of the paper's KV-cache management unit (:class:`KVMU`): three pointers over the draft's cache and
a log of every mode transition. The cache itself is :class:`heterospec.models.prefix_cache.PrefixCache`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

# KVMU modes (HeteroReason): the input multiplexer takes host tokens in INIT, sampler tokens in SPECULATION
INIT, SPECULATION, ACCEPT, ROLLBACK = "initialisation", "speculation", "accept", "rollback"


@dataclass
class KVMU:
    """Three pointers over the draft's KV cache and the four modes that move them.

    valid: end of the verified path; current: end of what the cache holds (including an
    unverified step); step_ahead: end of a step drafted ahead of verification (pipelining).
    """
    valid: int = 0
    current: int = 0
    step_ahead: int = 0
    log: list[tuple[int, str, int, int, int, str]] = field(default_factory=list)  # (t_ns, mode, v, c, s, why)

    def reset(self) -> None:
        """A new problem: every pointer at 0, the log empty."""
        self.valid = self.current = self.step_ahead = 0
        self.log = []

    def _record(self, mode: str, why: str) -> None:
        self.log.append((time.perf_counter_ns(), mode, self.valid, self.current, self.step_ahead, why))

    def initialise(self, length: int, why: str) -> None:
        """Host tokens written into the cache (prompt, shadow sync, re-init after a backtrack)."""
        self.current = self.step_ahead = length
        self._record(INIT, why)

    def speculate(self, start: int, length: int, ahead: bool) -> None:
        """The local sampler wrote tokens ``start..length``; ``ahead``: after a step still being verified,
        which then ends at ``current`` while ``step_ahead`` marks the end of the step drafted ahead."""
        self.current = start if ahead else length
        self.step_ahead = length
        self._record(SPECULATION, "step_ahead" if ahead else "draft")

    def accept(self, length: int, why: str = "prm") -> None:
        self.valid = length
        self._record(ACCEPT, why)

    def rollback(self, length: int, why: str) -> None:
        self.current = self.step_ahead = length
        self.valid = min(self.valid, length)
        self._record(ROLLBACK, why)
