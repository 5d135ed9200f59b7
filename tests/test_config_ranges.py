"""Every config number is checked once, against the range its schema field declares (heterospec.config.ranges).

The cases are generated from the schema: each declared bound is tried with a value just outside it (refused in one
line naming the key, the value and the range) and, when the bound is closed, with the bound itself (accepted), so a
range added to the schema is tested without editing this file.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import typing

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, snakemake
from heterospec.config import CONF_PATH_ENV, compose_config, group_entry
from heterospec.config import schema
from heterospec.config.ranges import RANGE, Range, check_ranges, holds_numbers, numeric_fields
from heterospec.config.schema import Config
from heterospec.errors import UserError


def _cases() -> list[tuple[str, typing.Any, Range, float, bool]]:
    """(key, field type, range, value, accepted) at each declared bound: just outside it, and on it when closed."""
    out = []
    for key, tp, f in numeric_fields(Config):
        if RANGE not in f.metadata:   # undeclared: test_every_numeric_field_declares_its_range names it
            continue
        rng, whole = f.metadata[RANGE], int in _scalars(tp)
        step = 1 if whole else 0.5
        if rng.lo is not None:
            out.append((key, tp, rng, rng.lo if rng.open_lo else rng.lo - step, False))
            out.append((key, tp, rng, rng.lo + step if rng.open_lo else rng.lo, True))
        if rng.hi is not None:
            out.append((key, tp, rng, rng.hi + step, False))
            out.append((key, tp, rng, rng.hi, True))
    return out


def _scalars(tp) -> set:
    return {tp} if tp in (int, float) else {s for a in typing.get_args(tp) for s in _scalars(a)}


def _shaped(tp, key: str, x: float) -> tuple[typing.Any, str, float]:
    """``x`` in the shape a field of type ``tp`` holds (a list or mapping of numbers holds one): (the field's value,
    the key of ``x`` in it, ``x`` as the field's number type)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if origin is list:
        inner, k, leaf = _shaped(args[0], f"{key}[0]", x)
        return [inner], k, leaf
    if origin is dict:
        inner, k, leaf = _shaped(args[1], f"{key}.x", x)
        return {"x": inner}, k, leaf
    if origin in (typing.Union, types.UnionType):
        return _shaped(args[0], key, x)
    leaf = int(x) if tp is int else float(x)
    return leaf, key, leaf


@pytest.fixture(scope="module")
def ci():
    """The ci experiment's config as plain data (composed once: composing takes seconds on a busy machine)."""
    return OmegaConf.to_container(compose_config(["experiment=ci"]), resolve=True)


def _with(cfg: dict, key: str, value) -> dict:
    """A copy of ``cfg`` with ``key`` (dotted; ``*`` stands for any mapping key) set, its parents made as needed."""
    cfg = copy.deepcopy(cfg)
    *parents, last = key.replace("*", "x").split(".")
    node = cfg
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[last] = value
    return cfg


CASES = _cases()


@pytest.mark.parametrize("key, tp, rng, x, accepted", CASES,
                         ids=[f"{c[0]}={c[3]}" for c in CASES])
def test_every_declared_bound_holds(ci, key, tp, rng, x, accepted):
    value, leaf_key, leaf = _shaped(tp, key.replace("*", "x"), x)   # a mapping's entry is called x (_with)
    cfg = _with(ci, key, value)
    if accepted:
        check_ranges(Config, cfg)
        return
    with pytest.raises(UserError) as e:
        check_ranges(Config, cfg)
    assert str(e.value) == f"config error: {leaf_key}={leaf} must be {rng}"


def test_ranges_read_as_a_user_writes_them():
    """The range's words, hand-written for each kind of bound."""
    assert [str(r) for r in (Range(0, 1), Range(0, 1, open_lo=True), Range(0), Range(0, open_lo=True),
                             Range(-1), Range(hi=3), Range())] == \
        ["in [0, 1]", "in (0, 1]", ">= 0", "> 0", ">= -1", "<= 3", "any number"]


def test_every_numeric_field_declares_its_range():
    """A number in any schema dataclass (reachable from Config or not yet) is declared with ``number(...)``: with a
    range, or unbounded on purpose (``number(default)``)."""
    undeclared = [f"{cls.__name__}.{f.name}"
                  for _, cls in inspect.getmembers(schema, dataclasses.is_dataclass) if cls.__module__ == schema.__name__
                  for f in dataclasses.fields(cls)
                  if holds_numbers(typing.get_type_hints(cls)[f.name]) and RANGE not in f.metadata]
    assert not undeclared, f"declare these with heterospec.config.ranges.number(default, ge=/gt=/le=): {undeclared}"


@pytest.mark.parametrize("override, line", [
    ("algorithm.max_backtracks=-3", "config error: algorithm.max_backtracks=-3 must be >= 0"),
    ("algorithm.threshold=1.7", "config error: algorithm.threshold=1.7 must be in [0, 1]"),
    ("hls.contexts=[0,-4]", "config error: hls.contexts[1]=-4 must be >= 0"),
    ("models.prm.train.lr=0", "config error: models.prm.train.lr=0.0 must be > 0"),
], ids=lambda v: v if "=" in v and "error" not in v else "")
def test_a_value_outside_its_range_stops_compose_in_one_line(override, line):
    with pytest.raises(UserError) as e:
        compose_config(["experiment=ci", override])
    assert str(e.value) == line


def test_a_hardware_or_system_entry_read_alone_is_checked(tmp_path, monkeypatch):
    """group_entry (a board or a system named by a stage, not composed into the run) checks ranges too; the line
    names the file."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "system").mkdir()
    board = OmegaConf.load(ROOT / "conf" / "hardware" / "u280.yaml")
    board.name, board.fpga.hbm.channels = "u280_bad", 0
    OmegaConf.save(board, tmp_path / "hardware" / "u280_bad.yaml")
    system = OmegaConf.load(ROOT / "conf" / "system" / "hetero_u280.yaml")
    system.name, system.link = "slow_link", {"bandwidth_gbs": -16.0}
    OmegaConf.save(system, tmp_path / "system" / "slow_link.yaml")
    monkeypatch.setenv(CONF_PATH_ENV, str(tmp_path))
    with pytest.raises(UserError) as e:
        group_entry("hardware", "u280_bad")
    assert str(e.value) == f"{tmp_path / 'hardware' / 'u280_bad.yaml'}: fpga.hbm.channels=0 must be >= 1"
    with pytest.raises(UserError) as e:
        group_entry("system", "slow_link")
    assert str(e.value) == f"{tmp_path / 'system' / 'slow_link.yaml'}: link.bandwidth_gbs=-16.0 must be > 0"
    assert group_entry("hardware", "u280").fpga.hbm.channels == 32


def test_the_workflow_refuses_a_value_outside_its_range(tmp_path):
    """``snakemake -n`` stops before planning anything, with the compose line."""
    r = snakemake("-n", "--directory", str(tmp_path), "--config", "experiment=ci",
                  "overrides=algorithm.max_backtracks=-3")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("heterospec:")]
    assert lines == ["heterospec: config error: algorithm.max_backtracks=-3 must be >= 0"], r.stderr
    assert "results/" not in r.stdout
