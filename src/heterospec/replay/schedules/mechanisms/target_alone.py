"""The target alone: no draft step, no PRM; the target writes the whole solution (the baselines ``target_only`` and,
with ``token_speculation``, ``target_sd``, which under greedy verification writes exactly the same tokens).

The solution's length is the trace's accepted path (``Problem.path``): what step-level speculation kept. For our
own runs the target's own greedy solutions have their measured lengths in the evaluate stage; for the artifact's
traces the path is the only length there is (an approximation, stated in the figures' captions).
"""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline, Write


@mechanism("target_alone", only_with=("token_speculation",))
class TargetAlone(Pipeline):
    def replay(self) -> None:
        prob, p = self.prob, self.p
        g = prob.accepted_tokens
        if g <= 0:
            return
        kv = prob.prompt_tokens if p.context_includes_prompt else 0   # the target reads the prompt, then writes
        self.target_write(Write(kv, g, kv, p.target(kv, g, kv)), [], kind="write", kv=kv, cap=g, new=kv)
