"""The software twin of the paper's KV-cache management unit (:class:`KVMU`): three pointers over the draft's cache and
a log of every mode transition. The cache itself is :class:`heterospec.models.prefix_cache.PrefixCache`.

The twin moves its pointers as the hardware KVMU (:mod:`heterospec.hls.kvmu`) does, one row per transition a write
implies, so that the generated kernel driven through its own commands (:mod:`heterospec.hls.kernel_draft`) logs the
same rows from its registers. Two rules of that unit shape the rows:

* INIT commits: host tokens (the prompt, the target's tokens, whether the PRM has verified them yet or not) are
  valid as soon as they are written, and a re-initialisation (a backtrack, or a reject whose rewrite shares the
  rejected step's first tokens) is one INIT that keeps the common prefix and writes the rest;
* ROLLBACK lands on ``valid`` only, and ``current`` moves only when a step's last token is written with its mark.
  So a step drafted ahead keeps its last sampled token back (in the sampler, not yet in the cache): when the step
  before it is accepted, ACCEPT commits that step and the held-back token is written with its mark, making the step
  drafted ahead the one under verification without writing any of it again. Nor can it drop a step drafted ahead
  and keep the one under verification: a cancelled draft goes at the next write by a rollback or a re-init, even
  when it wrote nothing (so the rows do not depend on how far it got).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

# KVMU modes (HeteroReason): the input multiplexer takes host tokens in INIT, sampler tokens in SPECULATION
INIT, SPECULATION, ACCEPT, ROLLBACK = "initialisation", "speculation", "accept", "rollback"


@dataclass
class KVMU:
    """Three pointers over the draft's KV cache and the four modes that move them.

    valid: end of the committed path (verified steps and host tokens); current: end of the step under verification;
    step_ahead: end of what the cache holds (a step drafted ahead of the verdict, its last token held back).
    """
    valid: int = 0
    current: int = 0
    step_ahead: int = 0
    held_back: bool = False   # the step drafted ahead ended: its last token waits in the sampler
    log: list[tuple[int, str, int, int, int, str]] = field(default_factory=list)  # (t_ns, mode, v, c, s, why)

    def reset(self) -> None:
        """A new problem: every pointer at 0, the log empty."""
        self.valid = self.current = self.step_ahead = 0
        self.held_back = False
        self.log = []

    def _record(self, mode: str, why: str) -> None:
        self.log.append((time.perf_counter_ns(), mode, self.valid, self.current, self.step_ahead, why))

    def initialise(self, length: int, why: str) -> None:
        """The cache holds and commits the context up to ``length``: host tokens in (prompt, shadow sync, a target
        step still under verification) after what it kept, re-initialised first when it held more (backtrack,
        reject)."""
        self.valid = self.current = self.step_ahead = length
        self.held_back = False
        self._record(INIT, why)

    def speculate(self, start: int, length: int, ahead: bool, held_back: bool = False) -> None:
        """The local sampler wrote tokens ``start..length``. A step for the PRM is marked (current moves to its end);
        one drafted ahead is not, and when it ended (``held_back``) its last token is not written yet."""
        if ahead:
            self.step_ahead = length - int(held_back)
            self.held_back = held_back
        else:
            self.current = self.step_ahead = length
        self._record(SPECULATION, "step_ahead" if ahead else "draft")

    def accept(self, why: str = "prm") -> None:
        """The step under verification is accepted (valid = current); a step drafted ahead of it with its last token
        held back goes to verification: that token is written, marked (current = step_ahead = its end)."""
        self.valid = self.current
        if self.held_back:
            self.current = self.step_ahead = self.step_ahead + 1
            self.held_back = False
        self._record(ACCEPT, why)

    def rollback(self, why: str) -> None:
        """The step under verification and anything drafted ahead of it are dropped: back to valid."""
        self.current = self.step_ahead = self.valid
        self.held_back = False
        self._record(ROLLBACK, why)
