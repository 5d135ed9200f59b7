"""Each rule's params digest (heterospec.config.digest): changing a key in any section a rule reads changes that
rule's digest and leaves the digest of every rule that reads nothing of it alone; the group entries a rule reads
beside the run's own count too, each composed once with the run's overrides; and the workflow's --config becomes
the run's overrides."""
from __future__ import annotations

from dataclasses import replace

import pytest
from omegaconf import OmegaConf, open_dict

from heterospec.config import compose_config
from heterospec.config.digest import READS, Entries, ResolvedRun
from heterospec.config.snakemake import run_overrides
from heterospec.errors import UserError

OVERRIDES = ["experiment=default"]
WILDCARDS = {"dataset": "synthetic", "algorithm": "brsd"}


# What each stage reads, from its code: a change to any of these keys must rerun the rule (READS may say more)
MUST_MOVE = {
    "config": ["seed", "paths.datasets"],
    "evaluate": ["eval_limit", "eval_max_new_tokens", "models.prompt", "models.target.dtype", "seed",
                 "system.torch_devices.draft", "dataset.limit"],
    "evaluate_target_sd": ["eval_limit", "models.draft.dtype", "algorithm.target_sd", "token_speculation.tree",
                           "token_speculation.chain_length", "system.draft.power_active_w"],
    "collect_shard": ["collect.limit", "models.prm.dtype", "system.torch_devices.target", "dataset.limit",
                      "algorithm.threshold", "algorithm.max_backtracks", "algorithm.target_decoding",
                      "algorithm.speculative_prefetch", "token_speculation.feedback.max_verify",
                      "system.draft.power_active_w"],
    "collect_timed": ["collect.limit", "collect.repeats", "models.prm.dtype", "system.torch_devices.target",
                      "dataset.limit", "algorithm.threshold", "algorithm.target_decoding", "seed",
                      "token_speculation.feedback.max_verify"],
    "quantize": ["quantize.alpha", "models.draft.dtype", "models.prompt", "eval_limit"],
    "hls_codegen": ["hls.kernel", "hls.pipeline", "models.draft.arch"],
    "hls_csim": ["hls.csim_prompts", "hls.csim_max_new_tokens", "models.prompt"],
    "hls_lib": ["hls.cxx"],
    "hls_model": ["hls.shell_margin", "hls.timing", "quantize.rope_positions", "models.draft.arch"],
    "kvmu_rtl": ["hls.shell_margin"],
    "hls_vendor": ["hls.resources"],
    "replay_import": ["replay.format", "replay.traces"],
    "replay": ["replay.engine", "replay.prefix_cache", "models.target.arch", "schedule.prefetch"],
    "report_ours": ["replay.engine", "models.target.arch", "schedule.prefetch", "collect.limit"],
    "report_tau_sweep": ["replay.engine", "models.target.arch", "collect.limit", "replay.token_speculation.source"],
    "replay_validate": ["replay.engine", "models.prm.arch", "schedule.prefetch", "system.link"],
    "serve": ["serving.requests", "serving.max_batch", "algorithm.threshold", "models.prm.dtype",
              "system.torch_devices.target", "collect.draft", "dataset.limit", "system.target.memory_gb"],
    "serving_validate": ["serving.requests", "models.prm.arch", "load.memory_fraction", "system.link"],
    "replay_load": ["load.requests", "load.slo.multiple", "replay.token_speculation.source", "models.target.arch",
                    "hls.pipeline", "collect.limit"],
    "replay_design_space": ["design_space.batches", "load.slo.multiple", "hls.pipeline", "collect.limit"],
    "dfvg_collect": ["dfvg.prompts", "token_speculation.tree", "models.target.dtype", "system.torch_devices.draft"],
    "dfvg_replay": ["dfvg.prompts", "models.draft.arch", "replay.call_overhead_ms"],
}


@pytest.fixture(scope="module")
def run():
    return ResolvedRun(compose_config(OVERRIDES), OVERRIDES)


def _leaf(cfg, key: str) -> str:
    """The first scalar key at or under ``key`` (not a ``name``: that says which entry a node is)."""
    node = OmegaConf.select(cfg, key) if key else cfg
    if not OmegaConf.is_config(node):
        return key
    if OmegaConf.is_dict(node) and len(node) == 0:
        return f"{key}.gpu"                       # an empty map (replay.call_overhead_ms): a new entry
    for k in node:
        sub = f"{key}.{k}" if key else str(k)
        child = OmegaConf.select(cfg, sub)
        if k != "name" and not OmegaConf.is_list(child) and not (OmegaConf.is_dict(child) and len(child) == 0):
            return _leaf(cfg, sub)
    raise AssertionError(f"{key}: no scalar key to change")


def _bumped(v):
    return 1.0 if v is None else (not v) if isinstance(v, bool) else v + 1 if isinstance(v, (int, float)) else f"{v}x"


def _reads(rule: str, key: str, entries: bool) -> bool:
    """Whether ``rule`` reads ``key``: a section at, above or below it (with ``entries``: or the node of group
    entries it reads, which may or may not be the run's own)."""
    for s in READS[rule]:
        if isinstance(s, Entries):
            if not entries:
                continue
            s = s.node
        if not s or key == s or key.startswith(s + ".") or s.startswith(key + "."):
            return True
    return False


def _set(cfg, key, value):
    with open_dict(cfg):
        if value is None:                         # a key _leaf added: remove it again
            parent, _, leaf = key.rpartition(".")
            OmegaConf.select(cfg, parent).pop(leaf)
        else:
            OmegaConf.update(cfg, key, value)


def _digests(run):
    return {rule: run.spec(rule, WILDCARDS) for rule in READS}


def test_a_key_in_a_section_moves_the_rules_that_read_it_and_no_other(run):
    before = _digests(run)
    keys = {_leaf(run.cfg, s) for sections in READS.values() for s in sections if isinstance(s, str)}
    keys |= {_leaf(run.cfg, k) for ks in MUST_MOVE.values() for k in ks}
    assert set(MUST_MOVE) == set(READS) and len(keys) > 30
    for key in sorted(keys):
        old = OmegaConf.select(run.cfg, key)
        _set(run.cfg, key, _bumped(old))
        try:
            after = _digests(run)
        finally:
            _set(run.cfg, key, old)
        moved = {rule for rule in READS if after[rule] != before[rule]}
        must = {r for r, ks in MUST_MOVE.items() if any(key == _leaf(run.cfg, k) for k in ks)}
        assert must <= moved, f"{key} changed, but not the digest of {sorted(must - moved)}"
        assert {r for r in READS if _reads(r, key, False)} <= moved <= {r for r in READS if _reads(r, key, True)}, key
    assert _digests(run) == before


def test_each_group_entry_a_rule_reads_counts(run):
    before = _digests(run)
    for rule, sections in READS.items():
        for s in sections:
            if not isinstance(s, Entries):
                continue
            for name in run.names(s, WILDCARDS):
                node = run.entry(s.group, s.node, name)
                if not OmegaConf.is_config(node):          # a typed system or board (frozen): swap in a changed one
                    own = OmegaConf.select(run.cfg, s.node)
                    if own.get("name") == name:             # the run's own is rebuilt from the run's config
                        key = "power_active_w" if "power_active_w" in own else "link.bandwidth_gbs"
                        old = OmegaConf.select(own, key)
                        _set(own, key, old + 1)
                        try:
                            assert run.spec(rule, WILDCARDS) != before[rule], (rule, s.group, name)
                        finally:
                            _set(own, key, old)
                        continue
                    else:
                        run._entries[(s.group, name)] = replace(node, name=node.name + "x")
                        try:
                            assert run.spec(rule, WILDCARDS) != before[rule], (rule, s.group, name)
                        finally:
                            run._entries[(s.group, name)] = node
                        continue
                key = _leaf(node, "")
                old = OmegaConf.select(node, key)
                _set(node, key, _bumped(old))
                try:
                    assert run.spec(rule, WILDCARDS) != before[rule], (rule, s.group, name)
                finally:
                    _set(node, key, old)
    assert _digests(run) == before


def test_an_entry_is_composed_once_with_the_run_overrides():
    ov = ["experiment=default", "schedule.shadow_sync=true"]      # step_ahead's file says false
    run = ResolvedRun(compose_config(ov), ov)
    step_ahead = run.entry("schedule", "schedule", "step_ahead")
    assert step_ahead.name == "step_ahead" and step_ahead.shadow_sync and step_ahead.prefetch
    assert run.entry("schedule", "schedule", "step_ahead") is step_ahead
    assert run.entry("schedule", "schedule", "sequential") is run.cfg.schedule     # the run's own
    assert [b.name for b in run.resolved("hls_model")[-2:]] == ["u280", "v80"]
    with pytest.raises(UserError, match="not a schedule config"):
        run.entry("schedule", "schedule", "no_such_schedule")


def test_config_becomes_the_run_overrides():
    assert run_overrides({"experiment": "ci", "overrides": "a=1 'b=x y'", "name": ""}) == \
        ["experiment=ci", "a=1", "b=x y"]
    assert run_overrides({"experiment": "ci", "overrides": "[a=1,b=[2,3]]", "name": "mine"}) == \
        ["experiment=ci", "a=1", "b=[2,3]", "name=mine"]
    assert run_overrides({"experiment": "default"}) == ["experiment=default"]
