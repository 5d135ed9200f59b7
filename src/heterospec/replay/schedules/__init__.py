"""Schedule policies: how one problem's steps become operations on the draft, PRM and target devices and the link.

A schedule is a set of switches (``ScheduleConfig``: prefetch, partial_cache, draft_pipeline with its
draft_lookahead, shadow_sync, disaggregated_prefill), named by its file in ``conf/schedule/`` (``sequential``,
``step_ahead``, ``hetero``, ``prefetch_only``). With every switch off the policy is :mod:`.sequential`, the 3-GPU
baseline; otherwise :mod:`.pipelined` composes the mechanisms (:mod:`.mechanisms`) the switches turn on. A policy is ``policy(problem, ctx, engine)``
(see :mod:`heterospec.replay.des`). Policies track the target's and the PRM's caches (:class:`Cached`) and pass
each call's ``new`` tokens to the profile, which charges them when it models a prefix cache.

Token-level speculative decoding (DFVG) replays verification rounds, not steps: :mod:`.dfvg` (``DFVG_DESIGNS``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from heterospec.errors import UserError

Policy = Callable[..., None]

DFVG_DESIGNS = ("fpga_gpu", "gpu_only")   # heterospec.replay.schedules.dfvg, driven by heterospec.dfvg.replay


class Cached:
    """How much of the current context a model (the target, the PRM) holds in its KV cache. Contexts grow step by
    step or roll back to a prefix; after a rejection the caller drops the cache to the prefix that stays valid."""
    __slots__ = ("len",)

    def __init__(self):
        self.len = 0

    def read(self, context: int) -> int:
        """Tokens of ``context`` the model must still process; afterwards it holds all of them."""
        new = context - self.len if context > self.len else 0
        self.len = context
        return new

    def drop_to(self, prefix: int) -> None:
        if self.len > prefix:
            self.len = prefix


@dataclass(frozen=True)
class Schedule:
    """A named set of ScheduleConfig switches and the policy that runs them."""
    name: str
    prefetch: bool = False
    partial_cache: bool = False
    draft_pipeline: bool = False
    shadow_sync: bool = False
    disaggregated_prefill: bool = False
    draft_lookahead: int = 1   # with draft_pipeline: steps the draft may run ahead of the PRM's verdicts

    def __post_init__(self):
        if self.draft_lookahead < 1:
            raise UserError(f"schedule '{self.name}': draft_lookahead is {self.draft_lookahead}, expected 1 or more "
                            f"(no pipelining: draft_pipeline: false)")

    @property
    def policy(self) -> Policy:
        from heterospec.replay.schedules.pipelined import pipelined
        from heterospec.replay.schedules.sequential import sequential
        if not any(getattr(self, f.name) for f in fields(self) if f.name not in ("name", "draft_lookahead")):
            return sequential
        return lambda prob, ctx, eng: pipelined(prob, ctx, eng, self)

    @classmethod
    def from_config(cls, cfg: Any) -> "Schedule":
        """From a ScheduleConfig, a DictConfig or a dict with the same keys."""
        get = cfg.get if hasattr(cfg, "get") else lambda k, d=None: getattr(cfg, k, d)
        kinds = {"name": str, "draft_lookahead": int}
        return cls(**{f.name: kinds.get(f.name, bool)(get(f.name, f.default)) for f in fields(cls)})


_CACHE: dict[str, Schedule] = {}


def schedule_names() -> list[str]:
    from heterospec.config import group_options
    return group_options("schedule")


def get_schedule(spec: str | Any) -> Schedule:
    """A schedule by name (``conf/schedule/<name>.yaml``) or from a ScheduleConfig-like object."""
    if not isinstance(spec, str):
        return spec if isinstance(spec, Schedule) else Schedule.from_config(spec)
    if spec not in _CACHE:
        from heterospec.config import group_entry
        if spec not in schedule_names():
            raise UserError(f"unknown schedule '{spec}'; choose one of {schedule_names()}")
        _CACHE[spec] = Schedule.from_config(group_entry("schedule", spec))
    return _CACHE[spec]
