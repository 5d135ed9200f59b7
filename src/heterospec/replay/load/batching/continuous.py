"""``continuous``: iteration-level batching (Orca, vLLM) of the target, or of a GPU draft. A waiting operation joins
the running batch as soon as it holds fewer than ``max_batch`` operations and their contexts leave room in the KV
cache (``kv_tokens``); it leaves when its work is done. With b operations at mean context c every iteration costs
``slowdown(b, c)`` times a batch-1 iteration, so each member advances at 1 / slowdown of its batch-1 pace
(processor sharing: :class:`~.server.Passes` on one lane whose members join between iterations)."""
from __future__ import annotations

from dataclasses import replace

from heterospec.replay.load.batching import policy
from heterospec.replay.load.batching.server import Passes


@policy("continuous")
class Continuous(Passes):
    joins = True

    def __init__(self, name, bounds, slowdown):
        super().__init__(name, replace(bounds, lanes=1), slowdown)
