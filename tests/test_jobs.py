"""Job requests from the resolved config (heterospec.jobs): GPUs from the system's devices, memory from the models'
sizes and dtypes, threads from the stage, runtimes that grow with the work."""
from __future__ import annotations

from functools import lru_cache

import pytest

from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.jobs import JobSizes, cuda_gpus, params_from_name

COLLECT = dict(dataset="synthetic", algorithm="brsd", executor="sequential", shard="0of1")


class Datasets(dict):
    """The run's datasets, each resolved as the workflow resolves it, but only once a job asks for it (composing
    all of them for every config was most of this module's time)."""

    def __init__(self, overrides: tuple[str, ...], names):
        super().__init__()
        self.overrides, self.names = overrides, set(names)

    def __missing__(self, name: str):
        if name not in self.names:
            raise KeyError(name)
        self[name] = compose_config([*self.overrides, f"dataset={name}"]).dataset
        return self[name]


@lru_cache(maxsize=None)
def sizes(*overrides: str) -> JobSizes:
    cfg = compose_config(list(overrides))
    return JobSizes(cfg, Datasets(overrides, cfg.datasets))


@pytest.mark.parametrize("system, gpus", [("cpu3", 0), ("gpu3", 3), ("hetero_u280", 2), ("hetero_v80", 2)])
def test_collect_shard_asks_for_the_systems_gpu_roles(system, gpus):
    assert sizes("experiment=ci", f"system={system}").need("collect_shard", **COLLECT).gpu == gpus


def test_ci_experiment_asks_for_no_gpu_anywhere():
    j = sizes("experiment=ci")
    wildcards = {"train_model": dict(role="target"), "evaluate": dict(dataset="synthetic", method="target_only"),
                 "collect_shard": COLLECT, "collect_timed": dict(dataset="synthetic", shard="0of1"),
                 "dfvg_collect": dict(dfvg_method="tree")}
    for stage in ("train_model", "model_quality", "evaluate", "quantize", "collect_shard", "collect_timed",
                  "dfvg_collect", "aggregate"):
        assert j.need(stage, **wildcards.get(stage, {})).gpu == 0, stage


def test_single_role_stages_see_the_gpu_index_they_address():
    j = sizes("experiment=ci", "system=gpu3")
    assert j.need("evaluate", dataset="synthetic", method="draft_only").gpu == 1      # cuda:0
    assert j.need("evaluate", dataset="synthetic", method="target_only").gpu == 3     # cuda:2
    assert cuda_gpus(["cpu", "cuda:1"]) == 2 and cuda_gpus(["cpu", "cpu"]) == 0 and cuda_gpus(["cuda"]) == 1


def test_memory_follows_model_size_and_dtype():
    math500 = {**COLLECT, "dataset": "math500"}
    c1 = sizes("experiment=paper_config1").need("collect_shard", **math500).mem_mb
    c2 = sizes("experiment=paper_config2").need("collect_shard", **math500).mem_mb
    # the targets differ by 6.07 B parameters, 2 bytes each in fp16, passing once through host memory to their GPU
    assert c1 - c2 == pytest.approx((7615616512 - 1543714304) * 2 / 2**20, rel=1e-3)
    assert c1 > (0.49 + 7.08 + 7.62) * 2e9 / 2**20          # every weight passes through host memory
    fp16 = sizes("experiment=paper_config1", "system=cpu3").need("evaluate", dataset="math500", method="target_only")
    fp32 = sizes("experiment=paper_config1", "system=cpu3", "models.target.dtype=float32").need(
        "evaluate", dataset="math500", method="target_only")
    assert fp32.mem_mb - fp16.mem_mb == pytest.approx(7615616512 * 2 * 2 / 2**20, rel=1e-3)


def test_threads_follow_the_stage():
    j = sizes("experiment=ci", "models.target.train.threads=3")
    assert j.need("train_model", role="target").threads == 3 and j.need("train_model", role="draft").threads == 1
    assert j.need("collect_shard", **COLLECT).threads == 2          # cpu3: the target shares the PRM's core
    assert sizes("experiment=ci", "system=gpu3").need("collect_shard", **COLLECT).threads == 3
    assert sizes("experiment=ci", "collect.threads_per_role=2").need("collect_shard", **COLLECT).threads == 4


def test_the_timed_job_asks_for_one_session_and_the_time_of_all_its_runs():
    """The default's timed job: rsd and brsd under both executors, twice each, in one session (one collect's threads
    and memory), for eight collects' time."""
    j = sizes("experiment=default")
    one = j.need("collect_shard", **COLLECT)
    timed = j.need("collect_timed", dataset="synthetic", shard="0of1")
    assert (timed.threads, timed.gpu, timed.mem_mb) == (one.threads, one.gpu, one.mem_mb)
    assert timed.runtime == 2 * 2 * 2 * one.runtime
    assert sizes("experiment=ci", "system=gpu3").need("collect_timed", dataset="synthetic", shard="0of1").gpu == 3


def test_a_variant_asks_for_the_cores_its_session_is_pinned_to_and_its_executors_for_one_job():
    """A variant of another draft (the kernel, the torch int8 reference) asks for the two cores its session pins its
    workers to, as the timed collects do (asking for one, two of them ran side by side on the same two cores); a
    variant's executors in one job (collect_variant): one collect's threads and memory, the time of both."""
    j = sizes("experiment=default")
    timed = j.need("collect_timed", dataset="synthetic", shard="0of1")
    for name in ("brsd_u280", "brsd_w8a8"):
        one = {e: j.need("collect_shard", **{**COLLECT, "algorithm": name, "executor": e})
               for e in ("sequential", "step_ahead")}
        both = j.need("collect_variant", dataset="synthetic", algorithm=name, shard="0of1")
        assert {n.threads for n in one.values()} == {both.threads} == {timed.threads} == {2}, name
        assert both.runtime == sum(n.runtime for n in one.values()) and both.mem_mb == one["sequential"].mem_mb


def test_runtime_grows_with_the_work_and_shrinks_with_shards():
    one = sizes("experiment=paper_config1").need("collect_shard", **{**COLLECT, "dataset": "math500"}).runtime
    four = sizes("experiment=paper_config1", "collect.shards=4").need(
        "collect_shard", **{**COLLECT, "dataset": "math500", "shard": "0of4"}).runtime
    assert one > 60 and four == pytest.approx(one / 4, rel=0.02)
    default = sizes("experiment=default")
    short = default.need("train_model", role="target").runtime
    steps = 4 * int(default.cfg.models.target.train.steps)
    long = sizes("experiment=default", f"models.target.train.steps={steps}").need("train_model", role="target").runtime
    assert long == pytest.approx(4 * short, rel=0.02)


@pytest.mark.parametrize("name, params", [("JackFram/llama-160m", 160_000_000), ("facebook/opt-13b", 13_000_000_000),
                                          ("Qwen/Qwen3-0.6B", 600_000_000), ("lmsys/vicuna-7b-v1.3", 7_000_000_000),
                                          ("/data/my-model", None)])
def test_params_from_a_hub_ids_size_tag(name, params):
    assert params_from_name(name) == params


@pytest.mark.parametrize("override, message", [
    ("models.target.path=/nowhere/my-model", r"models.target.path '/nowhere/my-model': cannot size the job"),
    ("models.target.dtype=int4", r"models.target.dtype 'int4': expected one of \['bfloat16', 'float16', 'float32'\]")])
def test_unsizable_model_is_one_line(override, message):
    with pytest.raises(UserError, match=message):
        sizes("experiment=paper_config1", override)
