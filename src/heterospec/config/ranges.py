"""The range of each numeric config key, declared on its schema field with :func:`number` and checked in one place.

``steps: int = number(1000, ge=1)`` declares the field and its range; :func:`check_ranges` walks a schema dataclass
and a config node together and stops at the first number outside its field's range, in one line naming the key,
the value and the range. A list or mapping of numbers (``contexts: list[int]``) holds the range for each number.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from heterospec.errors import UserError

RANGE = "range"   # the field metadata key that holds a number's Range


@dataclass(frozen=True)
class Range:
    """The values a number may take: at least ``lo`` (above it when ``open_lo``) and at most ``hi``; None: no bound."""
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False

    def holds(self, x: float) -> bool:
        above = self.lo is None or (x > self.lo if self.open_lo else x >= self.lo)
        return above and (self.hi is None or x <= self.hi)

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.open_lo else '['}{self.lo:g}, {self.hi:g}]"
        if self.lo is not None:
            return f"{'>' if self.open_lo else '>='} {self.lo:g}"
        return f"<= {self.hi:g}" if self.hi is not None else "any number"


def number(default: Any = MISSING, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           factory: Any = None) -> Any:
    """A numeric schema field with its range: ``ge`` (at least), ``gt`` (above), ``le`` (at most); no bound given
    declares it unbounded on purpose. ``factory`` makes a list or mapping default (each number in it is checked)."""
    if ge is not None and gt is not None:
        raise ValueError("number(): give ge or gt, not both")
    meta = {RANGE: Range(lo=gt if gt is not None else ge, hi=le, open_lo=gt is not None)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def check_ranges(schema: type, node: Any, where: str = "config error: ") -> None:
    """Stop at the first number in ``node`` outside its ``schema`` field's range: ``<where><key>=<value> must be
    <range>``. Keys the node lacks, nulls and missing values are left to the schema's own type checks."""
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
    for key, x, rng in _numbers(schema, node, ""):
        if not rng.holds(x):
            raise UserError(f"{where}{key}={x} must be {rng}")


def numeric_fields(schema: type, prefix: str = "") -> Iterator[tuple[str, Any, dataclasses.Field]]:
    """Every field of ``schema`` and the dataclasses under it that holds numbers: (dotted key, type, field). A
    mapping of dataclasses (``collect.variants``) is walked as ``<key>.*``."""
    for f, tp in _fields(schema):
        sub, many = _dataclass_in(tp)
        if sub is not None:
            yield from numeric_fields(sub, f"{prefix}{f.name}.{'*.' if many else ''}")
        elif holds_numbers(tp):
            yield f"{prefix}{f.name}", tp, f


def holds_numbers(tp: Any) -> bool:
    """Whether a field of this type holds numbers: int or float, alone, optional, or in a list or mapping."""
    if tp in (int, float):
        return True
    return any(holds_numbers(a) for a in typing.get_args(tp) if a is not type(None))


def _numbers(schema: type, node: Any, prefix: str) -> Iterator[tuple[str, float, Range]]:
    """(key, number, its range) for every ranged number of ``node`` (a plain container) under ``schema``."""
    if not isinstance(node, dict):
        return
    for f, tp in _fields(schema):
        if f.name not in node:
            continue
        value, key = node[f.name], f"{prefix}{f.name}"
        sub, many = _dataclass_in(tp)
        if sub is not None:
            for k, v in (value.items() if many and isinstance(value, dict) else [(None, value)]):
                yield from _numbers(sub, v, f"{key}.{k}." if many else f"{key}.")
        elif RANGE in f.metadata:
            for k, x in _leaves(value, key):
                yield k, x, f.metadata[RANGE]


def _leaves(value: Any, key: str) -> Iterator[tuple[str, float]]:
    """The numbers in a value, each with its key (``hls.contexts[2]``, ``hls.resources.lut_per_mac``)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{key}[{i}]")


def _fields(schema: type) -> Iterator[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        yield f, hints[f.name]


def _dataclass_in(tp: Any) -> tuple[type | None, bool]:
    """The dataclass a field holds (itself or optional: many=False; a mapping of them: many=True), else None."""
    if dataclasses.is_dataclass(tp):
        return tp, False
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 and dataclasses.is_dataclass(args[0]):
        return args[0], False
    if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return args[1], True
    return None, False
