"""Each workflow rule's ``params.spec``: a short hash of the resolved config sections its stage reads, so Snakemake
reruns a job when any of them changes and never otherwise.

:data:`READS` declares, once per rule, the sections its stage reads: whole sections (a new key inside one is
covered without a change here) and :class:`Entries`, the group entries a stage composes beside the run's own (each
system a replay runs on, the dataset a job's wildcard names). :class:`ResolvedRun` resolves each entry at most once
per run; the run's own entry is never composed again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from heterospec.config import compose_config, hardware
from heterospec.config.schema import COLLECT_GRID, CollectConfig
from heterospec.config.collect_variants import base_algorithm, is_variant, timed_collects, variant_settings
from heterospec.errors import UserError


@dataclass(frozen=True)
class Entries:
    """Entries of a config group that a stage reads, each composed with the run's overrides."""
    group: str                      # what the override names: system | schedule | dataset | hardware@system.draft
    node: str                       # the part of the composed config read: system | schedule | system.draft
    # a config key listing the names, a wildcard ("{dataset}"), the names, or a function of the run's config
    names: str | tuple[str, ...] | Callable[[DictConfig], list[str]]


def _timed(cfg: DictConfig) -> list[str]:
    """The algorithm configs of the timed collects (heterospec.config.collect_variants.timed_collects)."""
    return list(dict.fromkeys(a for a, _ in timed_collects(cfg)))


# What token-level speculation with the run's draft reads (a speculative target write, the target_sd method): the
# token_speculation group and the draft device, whose fpga.draft_lanes bound the tree
SPECULATION = ("token_speculation", Entries("hardware@system.draft", "system.draft", "system.draft.name"))

# how one collect runs: its section without the grid (adding a collect to the grid reruns no other)
COLLECT_RUN = tuple(f"collect.{f.name}" for f in fields(CollectConfig) if f.name not in COLLECT_GRID)

READS: dict[str, tuple[str | Entries, ...]] = {
    "config": ("",),                                           # the whole resolved config
    "evaluate": (Entries("dataset", "dataset", "{dataset}"), "eval_limit", "eval_max_new_tokens", "models", "seed",
                 "system.torch_devices"),
    # the evaluate rule's target_sd method: what the others read, and its strategy (heterospec.evaluate)
    "evaluate_target_sd": (Entries("dataset", "dataset", "{dataset}"), "eval_limit", "eval_max_new_tokens", "models",
                           "seed", "system.torch_devices", "algorithm.target_sd", *SPECULATION),
    # the algorithm wildcard names an algorithm config or a collect variant (its algorithm keys and its draft)
    "collect_shard": (Entries("dataset", "dataset", "{dataset}"), Entries("collect_variant", "algorithm", "{algorithm}"),
                      "models", "system.torch_devices", *COLLECT_RUN, *SPECULATION),
    # the timed collects in one job: what each reads, and the seed of their interleaved order (heterospec.collect)
    "collect_timed": (Entries("dataset", "dataset", "{dataset}"), Entries("algorithm", "algorithm", _timed),
                      "models", "system.torch_devices", *COLLECT_RUN, *SPECULATION, "seed"),
    "quantize": ("quantize", "models", "eval_limit", "system.torch_devices"),
    "hls_codegen": ("hls", "models.draft"),
    "hls_csim": ("hls", "models.draft", "models.prompt"),
    "hls_lib": ("hls.cxx",),
    "hls_model": ("hls", "quantize.rope_positions", "models", Entries("hardware@system.draft", "system.draft",
                                                                      "hls.boards")),
    "kvmu_rtl": ("hls",),
    "hls_vendor": ("hls",),
    "replay_import": ("replay",),
    "replay": ("replay", "models", "schedule", Entries("system", "system", "replay.systems"),
               Entries("schedule", "schedule", "replay.schedules")),
    "report_ours": ("replay", "models", "schedule", "collect", Entries("system", "system", "replay.systems"),
                    Entries("schedule", "schedule", "replay.schedules")),
    "report_tau_sweep": ("replay", "models", "collect", Entries("system", "system", "replay.systems"),
                         Entries("schedule", "schedule", ("target_only", "step_ahead", "hetero", "target_sd",
                                                          "step_ahead_sd", "hetero_sd"))),
    # the load replay: its section, the replay's (profiles, token speculation, prefetch outcome), the models and the
    # HLS design (an FPGA draft's lanes), the collect's grid (our traces), each system and each method's schedule
    "replay_load": ("load", "replay", "models", "hls", "collect", Entries("system", "system", "load.systems"),
                    Entries("schedule", "schedule", ("target_only", "target_sd", "step_ahead", "hetero",
                                                     "step_ahead_sd", "hetero_sd"))),
    # the design space: the load replay's reads, its own section, its reference system and its boards and GPU
    "replay_design_space": ("design_space", "load", "replay", "models", "hls", "collect",
                            Entries("system", "system", "design_space.reference"),
                            Entries("hardware@system.draft", "system.draft", "design_space.boards"),
                            Entries("hardware@system.draft", "system.draft", "design_space.gpus"),
                            Entries("schedule", "schedule", ("target_only", "step_ahead", "hetero"))),
    "replay_validate": ("replay", "models", "schedule", Entries("system", "system", "replay.validate_system"),
                        Entries("schedule", "schedule", "replay.validate_schedules")),
    # a serving run: its section, the served algorithm, the trio, the devices (and their memory: the KV bound), the draft
    "serve": ("serving", Entries("collect_variant", "algorithm", "serving.algorithm"), "models", "system.torch_devices",
              Entries("system", "system", "system.name"), "collect.draft", "collect.threads_per_role",
              Entries("dataset", "dataset", "datasets")),
    # the outputs check, and the load replay on the collect system with the run's load settings (memory, curves)
    "serving_validate": ("serving", "models", "system.torch_devices", Entries("system", "system", "system.name"), "load"),
    "dfvg_collect": ("dfvg", "token_speculation", "models", "system.torch_devices",
                     Entries("dataset", "dataset", ("synthetic",))),
    "dfvg_replay": ("dfvg", "models", "replay.call_overhead_ms"),
}


# Groups the stages read through a typed lookup, not a compose: the digest hashes exactly what they read.
TYPED = {"system": hardware.system, "hardware@system.draft": hardware.device}


def digest(*nodes) -> str:
    """Short hash of config nodes (or plain values), resolved."""
    text = "\n".join(OmegaConf.to_yaml(n, resolve=True) if OmegaConf.is_config(n) else repr(n) for n in nodes)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def section(cfg: DictConfig, key: str):
    """``cfg`` at a dotted key ("" is the whole config); a key the config lacks is one line."""
    if not key:
        return cfg
    node = OmegaConf.select(cfg, key, default=KeyError)
    if node is KeyError:
        raise UserError(f"heterospec.config.digest: no config key '{key}' (READS names it)")
    return node


class ResolvedRun:
    """The run's config plus each group entry its stages read, each composed at most once."""

    def __init__(self, cfg: DictConfig, overrides: list[str]):
        self.cfg, self.overrides = cfg, list(overrides)
        self._entries: dict[tuple[str, str], object] = {}

    def entry(self, group: str, node: str, name: str):
        """Group entry ``name`` as the stage sees it: the run's own node when it is that entry; a system or board
        as the typed lookup the stages use (:mod:`heterospec.config.hardware`, read without a compose)."""
        if group == "collect_variant":       # an algorithm config, or a variant: its algorithm's keys set, its draft
            base = self.entry("algorithm", node, base_algorithm(self.cfg, name))
            return variant_settings(self.cfg, name, base) if is_variant(self.cfg, name) else base
        own = section(self.cfg, node)
        if group in TYPED:
            if OmegaConf.is_dict(own) and own.get("name") == name:
                return TYPED[group](name, self.cfg)            # the run's own, with its overrides: never cached
            if (group, name) not in self._entries:
                self._entries[(group, name)] = TYPED[group](name, self.cfg)
            return self._entries[(group, name)]
        if OmegaConf.is_dict(own) and own.get("name") == name:
            return own
        if (group, name) not in self._entries:
            self._entries[(group, name)] = section(compose_config([*self.overrides, f"{group}={name}"]), node)
        return self._entries[(group, name)]

    def dataset(self, name: str):
        return self.entry("dataset", "dataset", name)

    def names(self, entries: Entries, wildcards: dict[str, str]) -> list[str]:
        if isinstance(entries.names, tuple):
            return list(entries.names)
        if callable(entries.names):
            return entries.names(self.cfg)
        if entries.names.startswith("{"):
            return [wildcards[entries.names.strip("{}")]]
        listed = section(self.cfg, entries.names)
        return [str(listed)] if isinstance(listed, str) else [str(n) for n in listed]

    def resolved(self, rule: str, wildcards: dict[str, str] | None = None) -> list:
        """The nodes ``rule`` reads, in :data:`READS` order."""
        out = []
        for s in READS[rule]:
            if isinstance(s, Entries):
                out += [self.entry(s.group, s.node, n) for n in self.names(s, wildcards or {})]
            else:
                out.append(section(self.cfg, s))
        return out

    def spec(self, rule: str, wildcards: dict[str, str] | None = None) -> str:
        return digest(rule, *self.resolved(rule, wildcards))
