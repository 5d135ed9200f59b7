"""Batching policies: how a device takes work from its queue under load, one module each in this package,
registered by :func:`policy` (like the schedules' mechanisms).

* ``serial``           one operation at a time, first come first served (the link; any device at batch 1);
* ``lanes``            independent lanes (an FPGA draft's copies of its design point), each a pass of up to
                       ``max_batch`` sequences (1: the batch-1 streaming kernel), a waiting one joining at the next pass;
* ``batched_prefill``  one batch of the waiting operations, up to ``max_batch`` (the PRM scores the waiting steps
                       in one batched prefill); those that arrive meanwhile wait for the next batch;
* ``continuous``       iteration-level batching (Orca, vLLM): an operation joins the running batch as soon as a slot
                       and KV room are free.

In every policy a member of a batch leaves when its own work is done, and every member advances at the batch's pace
(:class:`~.server.Passes`).

A policy is a :class:`~.server.Server` subclass; :class:`Bounds` are its device's limits. A new policy is a new
module here: every module of this package is imported on the first lookup, so nothing else names it.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass

from heterospec.errors import UserError

_REGISTRY: dict[str, type] = {}
_loaded = False


@dataclass(frozen=True)
class Bounds:
    """A device's limits under load: independent ``lanes``, operations per pass or batch (``max_batch``), the
    context tokens its KV cache holds at once (``kv_tokens``; inf: not bounded), and its ``pace``: a batch-1 pass
    on one lane over the profile's batch-1 price (1: the profile prices the device as it runs; an FPGA lane with
    its share of the board's memory channels: the board's bandwidth over the lane's)."""
    lanes: int = 1
    max_batch: int = 1
    kv_tokens: float = math.inf
    pace: float = 1.0


def policy(name: str):
    """Register a Server subclass as batching policy ``name``."""
    def register(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"two batching policies are called '{name}'")
        cls.policy = name
        _REGISTRY[name] = cls
        return cls
    return register


def policies() -> dict[str, type]:
    """Every batching policy by name (this package's modules imported on the first call)."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return _REGISTRY


def get_policy(name: str, key: str = "load.batching") -> type:
    reg = policies()
    if name not in reg:
        raise UserError(f"{key}: unknown batching policy '{name}'; choose one of {sorted(reg)}")
    return reg[name]
