"""The mechanisms a schedule turns on, one module each in this package, registered by :func:`mechanism`.

A mechanism is a subclass of :class:`~heterospec.replay.schedules.pipeline.Pipeline` that overrides the hooks it
changes and calls ``super()`` for the rest. A schedule file (``conf/schedule/<name>.yaml``) turns it on by name
(``prefetch: true``) and may set the options it declares (``draft_lookahead: 2``). A new mechanism is a new module
here: every module of this package is imported when a schedule is first built, so nothing else names it.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from heterospec.errors import UserError
from heterospec.replay.schedules.pipeline import Pipeline

_REGISTRY: dict[str, type[Pipeline]] = {}
_loaded = False


def mechanism(name: str, *, requires: tuple[str, ...] = (), options: dict | None = None,
              check: Callable[[dict], str | None] | None = None, only_with: tuple[str, ...] | None = None):
    """Register a Pipeline subclass as mechanism ``name``: it needs the mechanisms ``requires``, declares
    ``options`` (name -> default; a schedule's value is cast to the default's type) and ``check(options)`` returns
    what is wrong with a schedule's values (None: nothing); ``only_with``: the only mechanisms that still change
    anything beside it (one that replaces the step loop)."""
    def register(cls: type[Pipeline]) -> type[Pipeline]:
        if name in _REGISTRY and _REGISTRY[name].__qualname__ != cls.__qualname__:
            raise ValueError(f"two mechanisms are called '{name}': {_REGISTRY[name]} and {cls}")
        cls.mechanism, cls.requires, cls.declared = name, tuple(requires), dict(options or {})
        cls.only_with = None if only_with is None else tuple(only_with)
        cls.check_options = staticmethod(check or (lambda opts: None))
        _REGISTRY[name] = cls
        return cls
    return register


def registered() -> dict[str, type[Pipeline]]:
    """Every mechanism, by name (the package's modules imported on the first call)."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return _REGISTRY


def compose(name: str, on: list[str]) -> type[Pipeline]:
    """The pipeline with mechanisms ``on`` mixed in, each before the ones it requires (so it can refine them)."""
    reg = registered()

    def depth(m: str) -> int:
        return 1 + max((depth(r) for r in reg[m].requires), default=0)
    for m in on:
        missing = [r for r in reg[m].requires if r not in on]
        if missing:
            raise UserError(f"schedule '{name}': {m} needs {' and '.join(missing)} (turn it on, or {m} off)")
        idle = [o for o in on if o != m and reg[m].only_with is not None and o not in reg[m].only_with]
        if idle:
            raise UserError(f"schedule '{name}': {m} replaces the step loop, so {' and '.join(idle)} would change "
                            f"nothing (turn it off)")
    bases = tuple(reg[m] for m in sorted(on, key=lambda m: (-depth(m), m)))
    return type(f"Schedule_{name}", bases, {}) if bases else Pipeline
