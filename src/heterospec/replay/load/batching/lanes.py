"""``lanes``: the FPGA draft's independent lanes (copies of its design point, as many as its resources fit), each
a streaming decoder that takes the next waiting operation; with ``max_batch`` B > 1 a lane's weight pass carries up
to B sequences (priced by the HLS performance model's batch-B pass), a waiting one joining at the next pass and each
leaving when its own tokens are done (:class:`~.server.Passes`)."""
from __future__ import annotations

from heterospec.replay.load.batching import policy
from heterospec.replay.load.batching.server import Passes


@policy("lanes")
class Lanes(Passes):
    joins = True
