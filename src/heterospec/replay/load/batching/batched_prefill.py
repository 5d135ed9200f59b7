"""``batched_prefill``: the PRM scores the steps waiting for it in one batched prefill (up to ``max_batch`` steps
within the KV bound); steps that arrive meanwhile wait for the next batch. Each step leaves when its own tokens are
scored (:class:`~.server.Passes`)."""
from __future__ import annotations

from dataclasses import replace

from heterospec.replay.load.batching import policy
from heterospec.replay.load.batching.server import Passes


@policy("batched_prefill")
class BatchedPrefill(Passes):
    joins = False

    def __init__(self, name, bounds, slowdown):
        super().__init__(name, replace(bounds, lanes=1), slowdown)
