"""One problem's steps as the simulator reads them, from the steps table (:mod:`heterospec.replay.simulator.steps`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa


@dataclass
class TracedProblem:
    """One problem's steps as plain lists (see :mod:`heterospec.replay.simulator.steps`)."""
    dataset: str
    problem: str
    prompt_tokens: int
    outcome: list                         # per step, as the steps table's columns of the same names
    draft_tokens: list
    target_tokens: list
    kv_verify: list
    kv_target: list
    path_tokens: list
    trace_set: str = ""
    target_scored: list | None = None     # the PRM scores the target's step (None: every one, as in BRSD)
    rescue_tokens: list | None = None     # tokens of a failed rescue before a backtrack (None: none)
    critical_tokens: list | None = None   # recorded target tokens left after the prefetch (None: not recorded)
    draft_kv: list | None = None          # the draft's context by the trace's replay rule (None: kv_verify)

    @property
    def accepted_tokens(self) -> int:
        return self.path_tokens[-1] if self.path_tokens else 0

    @property
    def backtracks(self) -> int:
        return sum(1 for o in self.outcome if o == "backtrack")

    def with_prompt_in_context(self) -> "TracedProblem":
        """The same steps with context lengths counting the prompt (for profiles that model it)."""
        P = self.prompt_tokens
        return replace(self, kv_verify=[k + P for k in self.kv_verify], kv_target=[k + P for k in self.kv_target])


def problems_from_steps(steps: pa.Table) -> list[TracedProblem]:
    cols = steps.select(["dataset", "problem", "prompt_tokens", "outcome", "draft_tokens", "target_tokens",
                         "kv_verify", "kv_target", "path_tokens", "trace_set", "target_scored",
                         "rescue_tokens", "critical_tokens", "draft_kv"]).to_pydict()
    out: list[TracedProblem] = []
    n = len(cols["problem"])
    i = 0
    while i < n:
        j = i
        key = (cols["trace_set"][i], cols["dataset"][i], cols["problem"][i])
        while j < n and (cols["trace_set"][j], cols["dataset"][j], cols["problem"][j]) == key:
            j += 1
        out.append(TracedProblem(key[1], key[2], cols["prompt_tokens"][i], cols["outcome"][i:j],
                           cols["draft_tokens"][i:j], cols["target_tokens"][i:j], cols["kv_verify"][i:j],
                           cols["kv_target"][i:j], cols["path_tokens"][i:j], key[0], cols["target_scored"][i:j],
                           cols["rescue_tokens"][i:j], cols["critical_tokens"][i:j],
                           None if cols["draft_kv"][i] is None else cols["draft_kv"][i:j]))
        i = j
    return out
