"""Disaggregated prefill (T1): the draft's prompt is prefilled on the target's GPU and its KV state moved over the
link once; the target's own work waits only for the prefill."""
from __future__ import annotations

from heterospec.replay.schedules.mechanisms import mechanism
from heterospec.replay.schedules.pipeline import Pipeline


@mechanism("disaggregated_prefill")
class DisaggregatedPrefill(Pipeline):
    def prompt(self):
        P, p, run = self.prob.prompt_tokens, self.p, self.run
        if P <= 0:
            return [], []
        pre = run("target", p.draft_prefill_disaggregated(P), kind="init", role="draft")
        return [run("link", self.ctx.system.link_ms(P * p.draft_kv_bytes_per_token), [pre], kind="migrate")], [pre]
