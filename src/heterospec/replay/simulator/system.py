"""What the simulator needs from a system (``SystemParams``) and what a schedule policy may use (``Ctx``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from heterospec.config.hardware import System
from heterospec.errors import UserError
from heterospec.replay.simulator.engines import DEVICES
from heterospec.replay.simulator.latency import LatencyProfile


@dataclass(frozen=True)
class SystemParams:
    """What the simulator needs from a System: powers per device, the link, device kinds."""
    name: str
    power_active_w: dict
    power_idle_w: dict
    kinds: dict
    link_bandwidth_gbs: float = 16.0
    link_latency_us: float = 1.0
    yields_to: dict = field(default_factory=dict)   # device -> device whose core it shares at a lower priority

    @classmethod
    def of(cls, system: System) -> "SystemParams":
        """From a typed System (heterospec.config.hardware: checked when it was built)."""
        return cls(name=system.name,
                   power_active_w={r: system.devices[r].power_active_w for r in DEVICES},
                   power_idle_w={r: system.devices[r].power_idle_w for r in DEVICES},
                   kinds={r: system.devices[r].kind for r in DEVICES},
                   link_bandwidth_gbs=system.link.bandwidth_gbs, link_latency_us=system.link.latency_us,
                   yields_to=dict(system.yields_to))

    def link_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        bw = self.link_bandwidth_gbs
        return self.link_latency_us * 1e-3 + (0.0 if math.isinf(bw) else nbytes / (bw * 1e9) * 1e3)


PREFETCH_OUTCOMES = ("auto", "recorded", "simulated")


@dataclass(frozen=True)
class SpeculationParams:
    """How the replay prices a target write made by token-level speculative decoding: each round the draft device
    drafts ``draft_len`` tokens, the link carries them, the target verifies them in one pass, and ``tau`` tokens come
    out (the accepted ones plus the target's own). ``strategy`` and ``source`` say whose numbers these are."""
    tau: float
    draft_len: int
    strategy: str = "chain"
    source: str = ""

    def __post_init__(self):
        where = f"replay.token_speculation ({self.strategy})"
        if not self.tau >= 1.0:
            raise UserError(f"{where}: tau={self.tau}, expected >= 1 (a round yields at least the target's own token)")
        if self.draft_len < 1 or self.tau > self.draft_len + 1:
            raise UserError(f"{where}: draft_len={self.draft_len}, tau={self.tau}: expected draft_len >= 1 and "
                            f"tau <= draft_len + 1")


@dataclass
class Ctx:
    """What a policy may use: the latency profile, the system, and whether the target's work on a rejected step is
    what the trace records (``recorded``; None: the profile's ``honours_trace``, see :mod:`heterospec.replay.profiles.registry`)."""
    profile: LatencyProfile
    system: SystemParams
    recorded: bool | None = None
    speculation: SpeculationParams | None = None   # the token_speculation mechanism's rounds (None: not configured)

    def __post_init__(self):
        if self.recorded is None:
            self.recorded = self.profile.honours_trace
        bw = self.system.link_bandwidth_gbs
        self._per_token_ms = 0.0 if math.isinf(bw) else self.profile.bytes_per_token / (bw * 1e9) * 1e3
        self._hop_ms = self.system.link_latency_us * 1e-3

    def comm(self, tokens: int) -> float:
        """Token ids over the link (``SystemParams.link_ms`` of their bytes)."""
        return self._hop_ms + tokens * self._per_token_ms if tokens > 0 else 0.0
