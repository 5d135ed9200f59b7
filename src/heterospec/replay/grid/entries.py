"""The group entries a replay runs besides the run's own: each system and schedule it names, composed with the
run's overrides (so ``schedule.*`` and ``hardware@system.*`` overrides apply to every one)."""
from __future__ import annotations

from typing import Any

from heterospec.config import compose_config, hardware
from heterospec.errors import UserError
from heterospec.replay.schedules import schedule_names


def system_configs(cfg: Any) -> list[Any]:
    """``replay.systems`` as typed Systems (the run's own with its overrides); an unknown name is one line."""
    return [hardware.system(name, cfg) for name in cfg.replay.systems]


def schedule_configs(cfg: Any, overrides: list[str]) -> list[Any]:
    """The schedules the replay runs, each composed through the ``schedule`` Hydra group with the run's overrides
    (so ``schedule.*`` overrides apply to every one): the one a ``schedule=<name>`` override picks, else every
    ``replay.schedules`` entry (an empty list: the run's ``schedule``)."""
    picked = any(o.split("=", 1)[0].lstrip("+~") == "schedule" for o in overrides)
    if picked or not cfg.replay.schedules:
        return [cfg.schedule]
    return [compose_schedule(cfg, overrides, name, "replay.schedules") for name in cfg.replay.schedules]


def compose_schedule(cfg: Any, overrides: list[str], name: str, where: str) -> Any:
    """Schedule ``name`` from the ``schedule`` group with the run's overrides (``where``: the key that named it)."""
    if name not in schedule_names():
        raise UserError(f"unknown schedule '{name}' in {where}; choose one of {schedule_names()}")
    return cfg.schedule if cfg.schedule.name == name else compose_config([*overrides, f"schedule={name}"]).schedule
