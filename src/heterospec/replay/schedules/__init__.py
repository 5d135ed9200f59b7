"""Schedule policies: how one problem's steps become operations on the draft, PRM and target devices and the link.

Each policy is ``policy(problem, ctx, engine)`` (see :mod:`heterospec.replay.des`); register new ones with
:func:`register`.
"""
from __future__ import annotations

from typing import Callable

from heterospec.errors import UserError

Policy = Callable[..., None]
_REGISTRY: dict[str, Policy] = {}


def register(name: str, policy: Policy) -> None:
    _REGISTRY[name] = policy


def schedule_names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get_schedule(name: str) -> Policy:
    _load()
    if name not in _REGISTRY:
        raise UserError(f"unknown schedule '{name}'; choose one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def _load() -> None:
    if not _REGISTRY:
        from heterospec.replay.schedules import hetero, prefetch_only, sequential, step_ahead  # noqa: F401
