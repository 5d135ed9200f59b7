"""Hydra configs: every experiment composes, datasheets hold, and mistakes fail with one clear line."""
from __future__ import annotations

import re

import pytest

from conftest import ROOT, heterospec
from heterospec.config import compose_config
from heterospec.config.hardware import Device, System
from heterospec.errors import UserError

EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (ROOT / "conf" / "hardware").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    assert cfg.experiment == experiment and cfg.name == experiment
    # an experiment decodes datasets, or (artifact_replay) replays published traces only
    assert (cfg.datasets or cfg.replay.trace_sets) and cfg.models.draft and System.of(cfg.system).target.memory.bandwidth_gbs > 0


# the schedules the replay_methods view (heterospec.store.catalog) compares; the workflow draws the `methods` figure
# for every run that replays, so a run replaying none of them schedules a figure with no rows (a missing output)
METHOD_SCHEDULES = {"step_ahead", "step_ahead_sd", "target_only", "target_sd", "hetero", "hetero_sd"}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_replaying_experiment_replays_what_its_figures_compare(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    if cfg.replay.get("enabled", True) and cfg.replay.trace_sets:
        assert set(cfg.replay.schedules) & METHOD_SCHEDULES, f"replay.schedules {list(cfg.replay.schedules)}"


@pytest.mark.parametrize("hw", HARDWARE)
def test_every_device_swaps_in(hw):
    draft = Device.of(compose_config([f"hardware@system.draft={hw}"]).system.draft)
    assert draft.name == hw and draft.memory.bandwidth_gbs > 0 and draft.memory.type
    assert draft.power_active_w >= draft.power_idle_w > 0


def test_datasheets_match_reference():
    u280 = System.of(compose_config(["system=hetero_u280"]).system).draft
    f = u280.fabric
    assert (f.dsp, f.lut, f.ff, f.bram36, f.uram, f.dsp_kind) == (9024, 1303680, 2607360, 2016, 960, "dsp48e2")
    assert u280.memory.bandwidth_gbs == 460 and (f.banks["hbm"].channels, f.banks["hbm"].channel_gbs) == (32, 14.375)
    assert abs(u280.peak_tflops["int8"] - 3.61) < 0.005          # 9,024 DSPs x 2 ops x 200 MHz, derived
    gpu = System.of(compose_config(["system=gpu3"]).system)
    assert gpu.target.name == "rtx3090" and gpu.target.memory.bandwidth_gbs == 936 and gpu.target.peak_tflops["fp16"] == 71
    assert gpu.torch_devices == {"draft": "cuda:0", "prm": "cuda:1", "target": "cuda:2"}
    assert Device.of(compose_config(["hardware@system.target=h200"]).system.target).memory.bandwidth_gbs == 4800


def test_paper_algorithm_settings():
    # the algorithm groups hold the paper's settings; the default experiment sets the tiny PRM's own threshold
    brsd = compose_config(["experiment=paper_config1", "algorithm=brsd"]).algorithm
    assert (brsd.threshold, brsd.max_backtracks, brsd.ancestor_limit, brsd.max_steps, brsd.max_tokens_per_call,
            brsd.temperature, brsd.seed) == (0.7, 5, 10, 100, 2048, 0.0, 43)
    assert brsd.backtrack and not compose_config(["algorithm=rsd"]).algorithm.backtrack
    assert compose_config(["algorithm=brsd"]).algorithm.threshold == 0.4


def test_real_model_configs():
    c1, c2 = compose_config(["models=config1"]).models, compose_config(["models=config2"]).models
    assert c1.draft.path == "Qwen/Qwen2.5-0.5B-Instruct" and c1.prm.path == "Qwen/Qwen2.5-Math-PRM-7B"
    assert c1.target.path == "Qwen/Qwen2.5-7B-Instruct" and c2.target.path == "Qwen/Qwen2.5-1.5B-Instruct"


def test_overrides_give_their_own_run_name():
    a = compose_config(["experiment=ci", "hardware@system.draft=v80"])
    b = compose_config(["experiment=ci", "hardware@system.draft=u280"])
    assert a.name.startswith("ci+") and b.name.startswith("ci+") and a.name != b.name
    assert compose_config(["experiment=ci", "name=mine", "eval_limit=3"]).name == "mine"


@pytest.mark.parametrize("overrides, needle", [
    (["models.draft.arch.hiden_size=3"], "hiden_size"),          # misspelt key
    (["+models.draft.extra=1"], "extra"),                          # added key outside the schema
    (["algorithm.threshold=high"], "algorithm.threshold"),        # wrong type
    (["eval_limit=ten"], "eval_limit"),
    (["models=config9"], "config9"),                               # unknown group option
    (["hardware@system.draft=u999"], "u999"),
    (["experiment=nope"], "nope"),
    (["datasets=[synthetic,mathx]"], "mathx"),
    (["algorithm.threshold=1.5"], "threshold"),
])
def test_config_errors_are_one_line(overrides, needle):
    with pytest.raises(UserError) as e:
        compose_config(overrides)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_cli_config_error_exit_code_and_single_line():
    r = heterospec("config", "models.target.train.stepz=5")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "stepz" in lines[0] and "Traceback" not in r.stderr


def test_cli_prints_resolved_config():
    r = heterospec("config", "experiment=ci", "hardware@system.draft=v80")
    assert r.returncode == 0, r.stderr
    assert "name: v80" in r.stdout and "# run ci+" in r.stdout


def test_config_is_read_only_through_heterospec_config():
    """No module outside heterospec.config, rule file or benchmark loads a config file itself or reaches for the
    config folder: each reads the one composed and checked config (compose_config, group_entry)."""
    reads = re.compile(r"OmegaConf\.load|\byaml\.(safe_)?load|initialize_config|from hydra\b|import hydra\b|"
                       r"\bCONF_DIR\b|\bconf_dirs\b")
    files = [*(ROOT / "src" / "heterospec").rglob("*.py"), *(ROOT / "workflow").rglob("*.smk"), ROOT / "Snakefile",
             *(ROOT / "benchmarks").glob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{no}: {line.strip()}" for p in files
             if (ROOT / "src" / "heterospec" / "config") not in p.parents
             for no, line in enumerate(p.read_text().splitlines(), 1) if reads.search(line)]
    assert not found, found
