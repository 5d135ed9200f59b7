"""Schedule policies: how one problem's steps become operations on the draft, PRM and target devices and the link.

A schedule is a file in ``conf/schedule/`` (``sequential``, ``step_ahead``, ``prefetch_only``, ``hetero``) that
names the mechanisms it turns on (``prefetch: true``) and sets their options (``draft_lookahead: 1``). The policy
is the step loop of :mod:`.pipeline` (all mechanisms off: the 3-GPU baseline) with those mechanisms mixed in, one
module each in :mod:`.mechanisms`. A new mix is a new YAML file; a new mechanism is a new module there.
A policy is ``policy(problem, ctx, engine)`` (see :mod:`heterospec.replay.simulator.des`).

Token-level speculative decoding (DFVG) replays verification rounds, not steps: :mod:`.dfvg` (``DFVG_DESIGNS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from heterospec.errors import UserError
from heterospec.replay.schedules.mechanisms import compose, registered

Policy = Callable[..., None]

DFVG_DESIGNS = ("fpga_gpu", "gpu_only")   # heterospec.replay.schedules.dfvg, driven by heterospec.dfvg.replay


@dataclass(frozen=True)
class Schedule:
    """A name, the mechanisms it turns on and their options (every declared option, defaults filled in)."""
    name: str
    mechanisms: tuple[str, ...] = ()
    options: dict = field(default_factory=dict, compare=False)

    @cached_property
    def pipeline(self) -> type:
        return compose(self.name, list(self.mechanisms))

    @property
    def policy(self) -> Policy:
        cls, opts = self.pipeline, self.options
        return lambda prob, ctx, eng: cls(prob, ctx, eng, opts).replay()

    @classmethod
    def from_config(cls, cfg: Any, where: str = "") -> "Schedule":
        """From a schedule file's mapping (a DictConfig or a dict): ``name``, then each key a mechanism (true or
        false) or an option a mechanism declares. An unknown key, an option of a mechanism that is off, or a
        mechanism without the ones it needs is a UserError: a key that would change nothing is refused."""
        items = dict(cfg.items()) if hasattr(cfg, "items") else dict(vars(cfg))
        name = str(items.pop("name", "") or "")
        where = where or f"schedule '{name}'"
        if not name:
            raise UserError(f"{where}: no name")
        reg = registered()
        owner = {o: m for m, c in reg.items() for o in c.declared}
        on, given = [], {}
        for key, value in items.items():
            if key in reg:
                if not isinstance(value, bool):
                    raise UserError(f"{where}: {key} is {value!r}, expected true or false")
                if value:
                    on.append(key)
            elif key in owner:
                given[key] = value
            else:
                raise UserError(f"{where}: unknown key '{key}'; mechanisms: {sorted(reg)}, options: {sorted(owner)}")
        options = {}
        for m in sorted(reg):
            declared = reg[m].declared
            opts = {}
            for o, default in declared.items():
                value = given.get(o, default)
                try:
                    opts[o] = type(default)(value)
                except (TypeError, ValueError):
                    raise UserError(f"{where}: {o} is {value!r}, expected a {type(default).__name__}") from None
                if m not in on and opts[o] != default:
                    raise UserError(f"{where}: {o} is {value!r} but {m} is off (it changes nothing)")
            if m in on and (msg := reg[m].check_options(opts)):
                raise UserError(f"{where}: {msg}")
            options.update(opts)
        sched = cls(name, tuple(sorted(on)), options)
        sched.pipeline   # a missing required mechanism fails here, not in a worker
        return sched


_CACHE: dict[str, Schedule] = {}


def schedule_names() -> list[str]:
    from heterospec.config import group_options
    return group_options("schedule")


def get_schedule(spec: str | Any) -> Schedule:
    """A schedule by name (``conf/schedule/<name>.yaml``), or from a schedule mapping (the composed ``schedule``)."""
    if not isinstance(spec, str):
        return spec if isinstance(spec, Schedule) else Schedule.from_config(spec)
    if spec not in _CACHE:
        from heterospec.config import entry_path, group_entry
        if spec not in schedule_names():
            raise UserError(f"unknown schedule '{spec}'; choose one of {schedule_names()}")
        _CACHE[spec] = Schedule.from_config(group_entry("schedule", spec), str(entry_path("schedule", spec)))
    return _CACHE[spec]
