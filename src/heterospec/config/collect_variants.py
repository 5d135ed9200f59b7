"""Collect variants: named collects beside the algorithm configs (``collect.variants``).

A name in ``collect.algorithms`` is an algorithm config (``conf/algorithm/<name>.yaml``) or a variant: an algorithm
config with some of its keys set (``brsd_sd``: BRSD whose target writes speculate token by token) and the draft
implementation that writes (``brsd_u280``: the U280's generated kernel; ``brsd_w8a8``: the W8A8 export in torch).
:func:`variant_config` turns a name into the run's config as that collect sees it; the models stay the run's, so a
variant never trains anything of its own.
"""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from heterospec.config import compose_config, group_options
from heterospec.errors import UserError

DRAFTS = ("model", "w8a8")      # besides a board of hls.boards


def algorithm_configs() -> list[str]:
    """The algorithm configs a collect can name (conf/algorithm/*.yaml over the config search path)."""
    return group_options("algorithm")


def check_collect(cfg: DictConfig) -> None:
    """Every name in ``collect.algorithms`` is an algorithm config or a variant, and every variant it names is
    well-formed; one line otherwise (before any job starts)."""
    known = algorithm_configs()
    for name in cfg.collect.algorithms:
        _check_name(cfg, name, known)


def _check_name(cfg: DictConfig, name: str, known: list[str]) -> None:
    if name not in known and name not in cfg.collect.variants:
        raise UserError(f"collect.algorithms: '{name}' is neither an algorithm config {known} nor a variant "
                        f"{sorted(cfg.collect.variants)} (collect.variants)")
    if name in cfg.collect.variants:
        _check_variant(cfg, name, known)


def _check_variant(cfg: DictConfig, name: str, known: list[str]) -> None:
    v = cfg.collect.variants[name]
    if v.algorithm not in known:
        raise UserError(f"collect.variants.{name}.algorithm: '{v.algorithm}', expected one of {known}")
    if v.draft not in DRAFTS and v.draft not in cfg.hls.boards:
        raise UserError(f"collect.variants.{name}.draft: '{v.draft}', expected one of {[*DRAFTS]} or a board of "
                        f"hls.boards {list(cfg.hls.boards)}")
    extra = sorted(set(v.executors) - set(cfg.collect.executors))
    if extra:
        raise UserError(f"collect.variants.{name}.executors: {extra[0]!r} is not in collect.executors "
                        f"{list(cfg.collect.executors)}")
    unknown = sorted(set(v.overrides) - set(cfg.algorithm))
    if unknown:
        raise UserError(f"collect.variants.{name}.overrides: no algorithm key {unknown[0]!r} "
                        f"(expected keys of conf/algorithm: {sorted(cfg.algorithm)})")


def executors(cfg: DictConfig, name: str) -> list[str]:
    """The executors collect ``name`` runs: its variant's subset of ``collect.executors``, else all of them."""
    own = list(cfg.collect.variants[name].executors) if is_variant(cfg, name) else []
    return [e for e in cfg.collect.executors if e in own] if own else list(cfg.collect.executors)


def is_variant(cfg: DictConfig, name: str) -> bool:
    return name in cfg.collect.variants and name not in algorithm_configs()


def own_draft(cfg: DictConfig, name: str) -> bool:
    """Whether collect ``name`` is drafted by the run's own draft (an algorithm config, or a variant with draft
    ``model``): only such collects' timings feed the replay's fit and validation."""
    return not is_variant(cfg, name) or cfg.collect.variants[name].draft == "model"


def variant_settings(cfg: DictConfig, name: str, base_algorithm: DictConfig) -> DictConfig:
    """What a collect named ``name`` runs with: ``{algorithm, draft}``, the algorithm being ``base_algorithm`` (the
    composed config the name or its variant names) with the variant's keys set."""
    if not is_variant(cfg, name):
        return OmegaConf.create({"algorithm": base_algorithm, "draft": "model"})
    v = cfg.collect.variants[name]
    alg = OmegaConf.merge(base_algorithm, dict(v.overrides))
    return OmegaConf.create({"algorithm": alg, "draft": str(v.draft)})


def base_algorithm(cfg: DictConfig, name: str) -> str:
    """The algorithm config a collect name runs (itself, or its variant's)."""
    return str(cfg.collect.variants[name].algorithm) if is_variant(cfg, name) else name


def variant_config(cfg: DictConfig, overrides: list[str], name: str) -> DictConfig:
    """The run's config as collect ``name`` sees it: ``algorithm`` composed from its config with the run's overrides
    and the variant's keys; the draft set by the variant (``w8a8``: ``models.draft.quantized``; a board:
    ``collect.draft_kernel``). A plain algorithm config leaves the draft as the run has it."""
    _check_name(cfg, name, algorithm_configs())
    base = base_algorithm(cfg, name)
    alg = cfg.algorithm if cfg.algorithm.name == base else compose_config([*overrides, f"algorithm={base}"]).algorithm
    settings = variant_settings(cfg, name, alg)
    out = cfg.copy()
    with open_dict(out):
        out.algorithm = settings.algorithm
        if settings.draft == "w8a8":
            out.models.draft.quantized, out.collect.draft_kernel = True, "none"
        elif settings.draft != "model":
            out.models.draft.quantized, out.collect.draft_kernel = False, settings.draft
    return out
