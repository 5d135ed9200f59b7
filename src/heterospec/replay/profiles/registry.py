"""Latency profiles: how long each model call takes, in milliseconds.

Every profile implements :class:`LatencyProfile`: one method per role and phase, taking ``kv`` (tokens already in
that model's context) and ``n`` / ``g`` (tokens processed or generated). The ``paper`` profiles here are the
HeteroReason artifact's fitted formulas; ``roofline`` (:mod:`.roofline`, from the hardware configs and model shapes),
``measured`` (:mod:`.measured`, fitted from our own traces) and ``hls`` (:mod:`.hls`, the HLS stage's draft
performance table) implement the same interface; :func:`get_profile` builds any of them by name.

Context lengths: the artifact's model counts only generated tokens as context (``context_includes_prompt`` False);
the hardware-derived and measured profiles count the prompt too, and the simulator adds it for them.

Recorded prefetch outcomes (``honours_trace``): the paper profiles take the target's work on a rejected step from
what the trace records, as the artifact's formulas do: v11 traces' critical tokens (0: the prefetch completed the
step), and for v12 traces the artifact's prefetch window (the target works on a step from the start of its draft).
The hardware-derived and measured profiles simulate the prefetch instead. ``replay.prefetch_outcome`` overrides it.

Prefix caching: the schedules say how many of a target or PRM call's context tokens are ``new`` (not in that
model's KV cache: after a rejection only the common prefix stays valid). A profile with ``prefix_cache`` charges
only those (``roofline``, ``hls``: the serving stacks' automatic prefix caching, and what our executors do); the
artifact's formulas re-read the whole context on every call, and the ``measured`` fit is by context, so they ignore it.

Paper formulas (REFERENCE.md), closed forms of the artifact's per-token sums:

* draft(kv, n)  = sum_{i=1..n} (a_d + b_d (kv+i))           = n a_d + b_d (n kv + n(n+1)/2)
* prm(n)        = a_p + b_p n
* target(kv, g) = b_pre kv + sum_{i=1..g} (a_t + b_t (kv+i)) = b_pre kv + g a_t + b_t (g kv + g(g+1)/2)
* comm(t)       = t * bytes_per_token / (bandwidth GB/s)    (in ms)
* init(P)       = a_pf + b_pf P + P * kv_bytes_per_token / (bandwidth GB/s)  for P > 0 (0 when a_pf = b_pf = 0)
"""
from __future__ import annotations

from typing import Callable

from heterospec.errors import UserError
from heterospec.replay.profiles.hls import HlsProfile
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.profiles.measured import MeasuredProfile
from heterospec.replay.profiles.paper import PAPER_PROFILES, paper_profile
from heterospec.replay.profiles.roofline import RooflineProfile

_REGISTRY: dict[str, Callable[..., LatencyProfile]] = {
    name: (lambda name=name, system=None, **_: paper_profile(name, system)) for name in PAPER_PROFILES}


def _roofline(**kw) -> LatencyProfile:
    kw = _need(kw, "roofline", "system", "models")
    return RooflineProfile(kw["system"], kw["models"], kw.get("overheads"), kw.get("checkpoints"),
                           prefix_cache=kw.get("prefix_cache", True))


def _measured(**kw) -> LatencyProfile:
    return MeasuredProfile.from_fit(_need(kw, "measured", "fit")["fit"])


def _hls(**kw) -> LatencyProfile:
    kw = _need(kw, "hls", "system", "models", "perf")
    return HlsProfile(kw["system"], kw["models"], kw["perf"], kw.get("overheads"), kw.get("checkpoints"),
                      prefix_cache=kw.get("prefix_cache", True))

def _need(kw: dict, name: str, *keys: str) -> dict:
    missing = [k for k in keys if kw.get(k) is None]
    if missing:
        raise UserError(f"the {name} profile needs {', '.join(missing)} (only hardware-configured runs provide it)")
    return kw


_REGISTRY.update(roofline=_roofline, measured=_measured, hls=_hls)


def register(name: str, factory: Callable[..., LatencyProfile]) -> None:
    """Add a profile (``factory(**kwargs)`` builds it; e.g. ``system=`` for hardware-derived profiles)."""
    _REGISTRY[name] = factory


def profile_names() -> list[str]:
    return sorted(_REGISTRY)


def get_profile(name: str, **kwargs) -> LatencyProfile:
    """The profile called ``name``; an unknown name is a UserError listing the valid ones.

    Keyword arguments feed the hardware-derived ones: ``system`` (a :class:`heterospec.config.hardware.System`), ``models`` (a ModelsConfig),
    ``overheads``, ``checkpoints`` and ``prefix_cache`` (roofline, hls), ``perf`` (hls: the HLS perf table), ``fit`` (measured)."""
    if name not in _REGISTRY:
        raise UserError(f"unknown latency profile '{name}'; choose one of {profile_names()}")
    return _REGISTRY[name](**kwargs)
