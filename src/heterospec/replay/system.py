"""What the simulator needs from a system config (``SystemParams``) and what a schedule policy may use (``Ctx``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from heterospec.errors import UserError
from heterospec.replay.engines import DEVICES
from heterospec.replay.profiles import LatencyProfile


@dataclass(frozen=True)
class SystemParams:
    """What the simulator needs from a SystemConfig: powers per device, the link, device kinds."""
    name: str
    power_active_w: dict
    power_idle_w: dict
    kinds: dict
    link_bandwidth_gbs: float = 16.0
    link_latency_us: float = 1.0
    yields_to: dict = field(default_factory=dict)   # device -> device whose core it shares at a lower priority

    @classmethod
    def from_config(cls, cfg: Any) -> "SystemParams":
        """From a SystemConfig dataclass, a DictConfig or a plain dict with the same keys."""
        def get(o, k, default=None):
            if isinstance(o, dict):
                return o.get(k, default)
            try:
                return o[k] if hasattr(o, "__getitem__") and not hasattr(o, "__dataclass_fields__") else getattr(o, k)
            except (KeyError, AttributeError):
                return default
        try:
            devs = {r: get(cfg, r) for r in DEVICES}
            link = get(cfg, "link") or {}
            sysp = cls(name=str(get(cfg, "name")),
                       power_active_w={r: float(get(devs[r], "power_active_w")) for r in DEVICES},
                       power_idle_w={r: float(get(devs[r], "power_idle_w")) for r in DEVICES},
                       kinds={r: str(get(devs[r], "kind", "gpu")) for r in DEVICES},
                       link_bandwidth_gbs=float(get(link, "bandwidth_gbs", 16.0)),
                       link_latency_us=float(get(link, "latency_us", 1.0)),
                       yields_to={str(k): str(v) for k, v in dict(get(cfg, "yields_to") or {}).items()})
        except (TypeError, ValueError) as e:
            raise UserError(f"system config '{get(cfg, 'name')}': missing or bad power/link field ({e})") from None
        for k, v in sysp.yields_to.items():
            if k not in DEVICES or v not in DEVICES or k == v:
                raise UserError(f"system config '{sysp.name}': yields_to {k}: {v} must name two of {list(DEVICES)}")
            if v in sysp.yields_to:
                raise UserError(f"system config '{sysp.name}': yields_to chains {k} -> {v} -> {sysp.yields_to[v]}")
        return sysp

    def link_ms(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        bw = self.link_bandwidth_gbs
        return self.link_latency_us * 1e-3 + (0.0 if math.isinf(bw) else nbytes / (bw * 1e9) * 1e3)


PREFETCH_OUTCOMES = ("auto", "recorded", "simulated")


@dataclass
class Ctx:
    """What a policy may use: the latency profile, the system, and whether the target's work on a rejected step is
    what the trace records (``recorded``; None: the profile's ``honours_trace``, see :mod:`.profiles`)."""
    profile: LatencyProfile
    system: SystemParams
    recorded: bool | None = None

    def __post_init__(self):
        if self.recorded is None:
            self.recorded = self.profile.honours_trace
        bw = self.system.link_bandwidth_gbs
        self._per_token_ms = 0.0 if math.isinf(bw) else self.profile.bytes_per_token / (bw * 1e9) * 1e3
        self._hop_ms = self.system.link_latency_us * 1e-3

    def comm(self, tokens: int) -> float:
        """Token ids over the link (``SystemParams.link_ms`` of their bytes)."""
        return self._hop_ms + tokens * self._per_token_ms if tokens > 0 else 0.0
