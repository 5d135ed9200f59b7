"""``serial``: one operation at a time, first come first served (the link; any device kept at batch 1)."""
from __future__ import annotations

from dataclasses import replace

from heterospec.replay.load.batching import policy
from heterospec.replay.load.batching.server import Passes


@policy("serial")
class Serial(Passes):
    def __init__(self, name, bounds, slowdown):
        super().__init__(name, replace(bounds, lanes=1, max_batch=1), slowdown)
