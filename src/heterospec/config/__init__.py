"""Compose the Hydra config of a run, checked against the structured schemas.

``load(["experiment=ci", "hardware@system.draft=v80"])`` is what every stage and the
Snakefile call, so the command line, Snakemake and a test all see the same config.
"""
from __future__ import annotations

import hashlib
from dataclasses import is_dataclass
import os
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from heterospec.config.drafts import check_draft
from heterospec.config.ranges import check_ranges
from heterospec.config.schema import Config, HardwareConfig, ScheduleConfig, SystemConfig, register
from heterospec.errors import UserError

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
RESULTS_DIR = Path("results")
CONF_PATH_ENV = "HETEROSPEC_CONF_PATH"   # extra config folders (os.pathsep-separated), searched after conf/
GROUP_SCHEMAS = {"hardware": HardwareConfig, "system": SystemConfig, "schedule": ScheduleConfig}

# Keys that moved: an override or a config file that sets one stops with one line naming its replacement.
RETIRED = {
    "models.draft.quantized": "collect.draft=w8a8 (the one key that chooses the draft implementation)",
    "collect.draft_kernel": "collect.draft=<board> (the one key that chooses the draft implementation)",
    "dfvg.draft_kernel": "token_speculation.draft_decoder",
    **{f"dfvg.{k}": f"token_speculation.{k}" for k in ("chain_length", "hf_start", "feedback", "tree")},
}


def retired(key: str) -> str | None:
    """The replacement of a retired config key (or of a key under one), else None."""
    key = re.sub(r"^models\.(prm|target)\.quantized$", "models.draft.quantized", key)
    for old, new in RETIRED.items():
        if key == old or key.startswith(old + "."):
            return f"{key} is retired; use {new}" if key == old else f"{key} is retired; use {new}{key[len(old):]}"
    return None


def conf_dirs() -> list[Path]:
    """The config search path: the checkout's conf/, then the folders in $HETEROSPEC_CONF_PATH (e.g. a new board's
    hardware/<name>.yaml kept outside the checkout)."""
    extra = [Path(p) for p in os.environ.get(CONF_PATH_ENV, "").split(os.pathsep) if p]
    return [CONF_DIR, *extra]


def group_options(group: str) -> list[str]:
    """Every entry name of a config group over the search path."""
    return sorted({p.stem for d in conf_dirs() for p in (d / group).glob("*.yaml")})


def entry_path(group: str, name: str) -> Path:
    """The file of a group entry: the first over the search path (``conf/<group>/<name>.yaml`` when none exists)."""
    found = (d / group / f"{name}.yaml" for d in conf_dirs() if (d / group / f"{name}.yaml").is_file())
    return next(found, Path("conf") / group / f"{name}.yaml")


def group_entry(group: str, name: str) -> DictConfig:
    """One ``hardware``, ``system`` or ``schedule`` entry by name, checked against its schema, without composing a
    run (a system's ``/hardware@<role>: <name>`` defaults are read too). One line on any error."""
    path = entry_path(group, name)
    if not path.is_file():
        raise UserError(f"'{name}' is not a {group} config; choose one of {group_options(group)}")
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as e:  # a YAML syntax error
        raise UserError(f"{path}: {_one_line(e)}") from None
    for item in raw.pop("defaults", None) or []:
        m = re.fullmatch(r"/?hardware@(\w+)", next(iter(item), "")) if isinstance(item, dict) and len(item) == 1 else None
        if group == "system" and m:
            raw[m.group(1)] = OmegaConf.to_container(group_entry("hardware", str(item[m.group(0)])))
        elif item != "_self_":
            raise UserError(f"{path}: defaults entry {item!r}; a {group} entry may list only /hardware@<role>: <name>")
    try:
        schema = GROUP_SCHEMAS[group]   # a schedule is a plain mapping: its mechanisms check it when it is loaded
        entry = OmegaConf.merge(OmegaConf.structured(schema) if is_dataclass(schema) else OmegaConf.create({}), raw)
    except Exception as e:  # a misspelt key or a value of the wrong type
        raise UserError(f"{path}: {_one_line(e)}") from None
    if is_dataclass(schema):
        check_ranges(schema, entry, f"{path}: ")
    return entry


def _one_line(exc: BaseException) -> str:
    """Hydra/OmegaConf errors as one line: the innermost message plus the key it names."""
    while exc.__cause__ is not None and str(exc.__cause__).strip():
        exc = exc.__cause__
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    msg = lines[0] if lines else type(exc).__name__
    m = re.search(r"Could not find '(\w+)/([^']*)'", msg)
    if m and any((d / m.group(1)).is_dir() for d in conf_dirs()):
        options = group_options(m.group(1))
        msg = f"'{m.group(2)}' is not a {m.group(1)} config; choose one of {options}"
    key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), "")
    if key and retired(key):
        return retired(key)
    if key and key not in msg:
        msg += f" (key: {key})"
    return msg


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The resolved run config for these Hydra overrides; raises UserError with one line on any error."""
    overrides = list(overrides)
    for o in overrides:
        moved = retired(o.split("=", 1)[0].lstrip("+~"))
        if moved:
            raise UserError(f"config error: {moved}")
    register()
    extra = [f"file://{d.resolve()}" for d in conf_dirs()[1:]]
    search = [f"hydra.searchpath=[{','.join(extra)}]"] if extra else []
    if not CONF_DIR.is_dir():
        raise UserError(f"{CONF_DIR}: config directory not found (is heterospec installed from its checkout?)")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[*search, *overrides], return_hydra_config=True)
    except Exception as e:  # Hydra raises several unrelated types for user mistakes
        raise UserError(f"config error: {_one_line(e)}") from None
    finally:
        GlobalHydra.instance().clear()
    try:  # `+key=value` can add keys Hydra's struct mode lets through; the schema must still hold
        plain = OmegaConf.to_container(cfg, resolve=False)
        plain.pop("hydra", None)
        OmegaConf.merge(OmegaConf.structured(Config), plain)
    except Exception as e:
        raise UserError(f"config error: {_one_line(e)}") from None
    choices = cfg.hydra.runtime.choices
    with _open(cfg):
        del cfg["hydra"]
        cfg.experiment = choices.get("experiment", cfg.experiment)
        if not cfg.name:
            cfg.name = run_name(cfg.experiment, [o for o in overrides if not o.startswith(("experiment=", "name="))])
    try:
        OmegaConf.resolve(cfg)
    except Exception as e:
        raise UserError(f"config error: {_one_line(e)}") from None
    _check(cfg)
    return cfg


class _open:
    """Temporarily lift struct mode (to drop the hydra node and fill derived fields)."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def __enter__(self):
        OmegaConf.set_struct(self.cfg, False)

    def __exit__(self, *exc):
        OmegaConf.set_struct(self.cfg, True)


def run_name(experiment: str, overrides: list[str]) -> str:
    """``<experiment>`` alone, or ``<experiment>+<hash of overrides>`` so runs that differ coexist."""
    if not overrides:
        return experiment
    digest = hashlib.sha1("\n".join(sorted(overrides)).encode()).hexdigest()[:8]
    return f"{experiment}+{digest}"


def _check(cfg: DictConfig) -> None:
    """Checks of values, not types: each number's declared range (heterospec.config.ranges), then what a range
    cannot say."""
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", cfg.name):
        raise UserError(f"config error: name '{cfg.name}' may hold only letters, digits and _ . + -")
    for ds in cfg.datasets:
        if ds not in group_options("dataset"):
            valid = group_options("dataset")
            raise UserError(f"config error: datasets lists '{ds}', which is not one of {valid}")
    check_ranges(Config, cfg)
    try:
        check_draft(str(cfg.collect.draft), "collect.draft", cfg.hls.boards)
    except UserError as e:
        raise UserError(f"config error: {e}") from None


def dataset_config(cfg: DictConfig, name: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The ``dataset`` group entry ``name`` composed with the run's overrides."""
    if cfg.dataset.name == name:
        return cfg.dataset
    return compose_config([*overrides, f"dataset={name}"]).dataset


def run_dir(cfg: DictConfig) -> Path:
    """``results/<run name>``: where every output of this run lives."""
    return RESULTS_DIR / cfg.name


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
