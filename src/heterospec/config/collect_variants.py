"""Collect variants: named collects beside the algorithm configs (``collect.variants``).

A name in ``collect.algorithms`` is an algorithm config (``conf/algorithm/<name>.yaml``) or a variant: an algorithm
config with some of its keys set (``brsd_sd``: BRSD whose target writes speculate token by token) and the draft
implementation that writes (``brsd_u280``: the U280's generated kernel; ``brsd_w8a8``: the W8A8 export in torch).
:func:`variant_config` turns a name into the run's config as that collect sees it; the models stay the run's, so a
variant never trains anything of its own.

The draft implementation is one key, ``collect.draft`` (a variant's ``draft`` over it), resolved by
:func:`draft_implementation`, which the workflow, the collect stage and the job sizes all call.
"""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from heterospec.config import compose_config, group_options
from heterospec.config.drafts import check_draft
from heterospec.errors import UserError



def draft_implementation(cfg: DictConfig, name: str | None = None) -> str:
    """What drafts in collect ``name`` (None: the run's own collects): the variant's ``draft``, else ``collect.draft``:
    ``model`` (the trained checkpoint in torch), ``w8a8`` (the quantize stage's int8 export in torch) or a board of
    ``hls.boards`` (its generated kernel). Anything else is one line naming the key."""
    own = str(cfg.collect.variants[name].draft) if name is not None and is_variant(cfg, name) else ""
    impl, key = (own, f"collect.variants.{name}.draft") if own else (str(cfg.collect.draft), "collect.draft")
    return check_draft(impl, key, cfg.hls.boards)


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
    draft_implementation(cfg, name)
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


def timed_collects(cfg: DictConfig) -> list[tuple[str, str]]:
    """The timed collects, (algorithm, executor): every algorithm config of ``collect.algorithms`` (drafted by the
    run's draft, the traces the replay fits and validates) under every executor. The collect stage runs them in one
    job, interleaved (heterospec.collect.run_timed); each collect variant runs in a job of its own, its executors
    interleaved in it (:func:`paired_variants`)."""
    return [(a, e) for a in cfg.collect.algorithms if not is_variant(cfg, a) for e in executors(cfg, a)]


def paired_variants(cfg: DictConfig) -> list[str]:
    """The collect variants of ``collect.algorithms`` that run more than one executor: each runs its executors in
    one job, interleaved problem by problem over one session (heterospec.collect.run_variant), so that the
    step-ahead speedup compares runs of the same minutes on the same cores. A variant of one executor runs it alone
    (rule collect_shard)."""
    return [a for a in cfg.collect.algorithms if is_variant(cfg, a) and len(executors(cfg, a)) > 1]


def is_variant(cfg: DictConfig, name: str) -> bool:
    return name in cfg.collect.variants and name not in algorithm_configs()


def own_draft(cfg: DictConfig, name: str) -> bool:
    """Whether collect ``name`` is drafted by the run's own draft implementation (an algorithm config, or a variant
    drafting as ``collect.draft`` does): only such collects' timings feed the replay's fit and validation."""
    return draft_implementation(cfg, name) == draft_implementation(cfg)


def variant_settings(cfg: DictConfig, name: str, base_algorithm: DictConfig) -> DictConfig:
    """What a collect named ``name`` runs with: ``{algorithm, draft}``, the algorithm being ``base_algorithm`` (the
    composed config the name or its variant names) with the variant's keys set."""
    if not is_variant(cfg, name):
        return OmegaConf.create({"algorithm": base_algorithm, "draft": draft_implementation(cfg)})
    v = cfg.collect.variants[name]
    alg = OmegaConf.merge(base_algorithm, dict(v.overrides))
    return OmegaConf.create({"algorithm": alg, "draft": draft_implementation(cfg, name)})


def base_algorithm(cfg: DictConfig, name: str) -> str:
    """The algorithm config a collect name runs (itself, or its variant's)."""
    return str(cfg.collect.variants[name].algorithm) if is_variant(cfg, name) else name


def variant_config(cfg: DictConfig, overrides: list[str], name: str) -> DictConfig:
    """The run's config as collect ``name`` sees it: ``algorithm`` composed from its config with the run's overrides
    and the variant's keys; ``collect.draft`` set to the variant's draft implementation. A plain algorithm config
    leaves the draft as the run has it."""
    _check_name(cfg, name, algorithm_configs())
    base = base_algorithm(cfg, name)
    alg = cfg.algorithm if cfg.algorithm.name == base else compose_config([*overrides, f"algorithm={base}"]).algorithm
    settings = variant_settings(cfg, name, alg)
    out = cfg.copy()
    with open_dict(out):
        out.algorithm = settings.algorithm
        out.collect.draft = settings.draft
    return out
