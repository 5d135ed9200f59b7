"""What each workflow job asks a cluster for (threads, GPUs, host memory, runtime), derived from the resolved config.

The rules' ``threads:`` and ``resources:`` read these (``workflow/rules/common.smk``); the SLURM profile adds only
the cluster's names. The estimates lean high: a job that outgrows its request is killed, one that asks a little
too much only waits a little longer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heterospec.config.collect_variants import executors, timed_collects, variant_settings
from heterospec.errors import UserError
from heterospec.paths import EVAL_ROLES
from heterospec.precision import DTYPE_PRECISION, WEIGHT_BYTES
from heterospec.trio import ROLES


# Host memory: a Python process with torch and transformers imported, and the headroom around model weights
# (a checkpoint passes through host memory on its way to a GPU; on the CPU activations and KV caches sit beside it).
PROCESS_MB = 1000
CPU_HEADROOM = 2.0            # weights + activations, KV caches and a load-time copy
GPU_HEADROOM = 1.0            # the copy that passes through host memory on its way to the GPU
# Training holds weights, gradients and AdamW's two moments in fp32 (16 bytes a parameter), plus activations.
TRAIN_BYTES_PER_PARAM = 16

# Decoding speed floors for the runtime estimate: every generated token reads all weights (memory-bound), plus a
# fixed per-call cost of the Python loop. Low-end figures on purpose (a laptop core, an old GPU).
CPU_BYTES_PER_S = 5e9
GPU_BYTES_PER_S = 300e9
PER_TOKEN_S = 0.01
TRAIN_FLOPS_PER_S = 5e9       # one CPU thread, fp32
RUNTIME_SAFETY = 2.0          # multiplies the estimate: the cluster kills a job that outlives its time limit
MIN_RUNTIME_MIN = 10
UNKNOWN_PROBLEMS = 1000       # a benchmark not yet on disk (its download is part of the run)

# Stages that load no model: a fixed, generous time limit (minutes)
LIGHT_RUNTIME_MIN = {"hls_csim": 60, "kvmu_rtl": 60, "replay": 120, "replay_import": 60, "replay_validate": 60}


@dataclass(frozen=True)
class Need:
    """One job's request: CPU threads, GPUs, host memory (MB), time limit (minutes)."""
    threads: int
    gpu: int
    mem_mb: int
    runtime: int


def cuda_gpus(devices: list[str]) -> int:
    """GPUs a job must see: the stages address ``cuda:N`` by index, so N+1 (0 when every role is on the CPU)."""
    idx = [int(d.split(":", 1)[1]) if ":" in d else 0 for d in map(str, devices) if d.startswith("cuda")]
    return max(idx) + 1 if idx else 0


def params_from_name(path: str) -> int | None:
    """Parameter count from a hub id's size tag (``llama-160m``, ``opt-13b``, ``Qwen3-0.6B``), or None."""
    m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])", Path(path).name.lower())
    if not m:
        return None
    return int(float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6))


def model_params(role: str, role_cfg: Any) -> int:
    """Parameters of one role's model: its shape (trained here, a local config.json, a published shape) or, for
    other hub ids, the size in its name."""
    from heterospec.replay.profiles.role_shapes import model_shape

    try:
        return model_shape(role, role_cfg).params
    except UserError:
        n = params_from_name(str(role_cfg.path)) if role_cfg.source == "hub" else None
        if n is None:
            raise UserError(f"models.{role}.path '{role_cfg.path}': cannot size the job (no config.json there, no "
                            "published shape, no size in the name like '-7b')") from None
        return n


def dataset_problems(ds: Any, limit: int) -> int:
    """Problems a stage takes from a dataset: ``limit`` and the dataset's own limit, else its file's lines."""
    caps = [n for n in (int(limit), int(ds.limit)) if n > 0]
    if caps:
        return min(caps)
    path = Path(str(ds.path)) if ds.get("path") else None
    if path is not None and path.is_file():
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    return UNKNOWN_PROBLEMS


class JobSizes:
    """Every stage's request for one resolved config; ``datasets`` maps each dataset name to its resolved entry."""

    def __init__(self, cfg: Any, datasets: dict[str, Any]):
        self.cfg = cfg
        self.datasets = datasets
        self.params = {r: model_params(r, cfg.models[r]) for r in ROLES}
        self.devices = {r: str(cfg.system.torch_devices[r]) for r in ROLES}
        self.weights_mb = {}
        for r in ROLES:
            dtype = str(cfg.models[r].dtype)
            if dtype not in DTYPE_PRECISION:
                raise UserError(f"models.{r}.dtype '{dtype}': expected one of {sorted(DTYPE_PRECISION)}")
            self.weights_mb[r] = self.params[r] * WEIGHT_BYTES[DTYPE_PRECISION[dtype]] / 2**20

    def token_s(self, role: str) -> float:
        """Seconds per generated token of one role on its device (a floor on speed, so an upper bound on time)."""
        on_gpu = self.devices[role].startswith("cuda")
        return PER_TOKEN_S + self.weights_mb[role] * 2**20 / (GPU_BYTES_PER_S if on_gpu else CPU_BYTES_PER_S)

    def serving_mb(self, roles: tuple[str, ...], processes: int = 1) -> int:
        """Host memory of processes that load ``roles`` onto their devices to decode."""
        weights = sum((GPU_HEADROOM if self.devices[r].startswith("cuda") else CPU_HEADROOM) * self.weights_mb[r]
                      for r in roles)
        return math.ceil(PROCESS_MB * processes + weights)

    def need(self, stage: str, **wildcards: str) -> Need:
        """The request of one job of ``stage`` (a rule name) with its wildcards."""
        sizer = getattr(self, f"_{stage}", None)
        if sizer is None:
            return Need(threads=1, gpu=0, mem_mb=2 * PROCESS_MB, runtime=LIGHT_RUNTIME_MIN.get(stage, 30))
        return sizer(**wildcards)

    def _replay_load(self) -> Need:
        # no model: the load replay's worker processes (load.workers), each a simulation at a time
        workers = max(1, int(self.cfg.load.workers))
        return Need(threads=workers, gpu=0, mem_mb=workers * PROCESS_MB, runtime=LIGHT_RUNTIME_MIN["replay"])

    def _replay_design_space(self) -> Need:
        return self._replay_load()

    # ------------------------------------------------------------------ stages that load models
    def _train_model(self, role: str, model_key: str = "") -> Need:   # the key only names the output folder
        m = self.cfg.models[role]
        if m.source != "train":                   # a hub checkpoint is only resolved, not trained
            return Need(threads=1, gpu=0, mem_mb=2 * PROCESS_MB, runtime=MIN_RUNTIME_MIN)
        t, a = m.train, m.arch
        tokens = int(t.steps) * int(t.batch_size) * int(a.max_position_embeddings)
        seconds = 6 * self.params[role] * tokens / (TRAIN_FLOPS_PER_S * int(t.threads))
        activations_mb = int(t.batch_size) * int(a.max_position_embeddings) * int(a.hidden_size) \
            * int(a.num_hidden_layers) * 4 * 16 / 2**20
        mem = PROCESS_MB + self.params[role] * TRAIN_BYTES_PER_PARAM / 2**20 + activations_mb
        return Need(threads=int(t.threads), gpu=0, mem_mb=math.ceil(mem), runtime=self._minutes(seconds))

    def _model_quality(self) -> Need:
        # the trio on the CPU, decoding the 200 held-out synthetic problems
        seconds = 200 * int(self.cfg.eval_max_new_tokens) * sum(self.token_s(r) for r in ROLES)
        return Need(threads=1, gpu=0, mem_mb=self.serving_mb(ROLES), runtime=self._minutes(seconds))

    def _evaluate(self, dataset: str, method: str) -> Need:
        roles = EVAL_ROLES[method]          # target_sd: the draft beside the target, on its device
        role = roles[0]
        n = dataset_problems(self.datasets[dataset], int(self.cfg.eval_limit))
        seconds = n * int(self.cfg.eval_max_new_tokens) * self.token_s(role)
        return Need(threads=1, gpu=cuda_gpus([self.devices[role]]), mem_mb=self.serving_mb(roles),
                    runtime=self._minutes(seconds))

    def _quantize(self) -> Need:
        q = self.cfg.quantize
        n = next((int(x) for x in (q.eval_problems, self.cfg.eval_limit) if int(x) > 0), 200)
        # the float32 draft, its int8 export and the integer reference, which emulates the kernel (a few times slower)
        mem = PROCESS_MB + 3 * self.params["draft"] * 4 / 2**20
        seconds = (int(q.calibration_prompts) + 2 * n) * int(q.max_new_tokens) * 4 * self.token_s("draft")
        return Need(threads=1, gpu=cuda_gpus([self.devices["draft"]]), mem_mb=math.ceil(mem),
                    runtime=self._minutes(seconds))

    def _collect_shard(self, dataset: str, algorithm: str, executor: str, shard: str) -> Need:
        c = self.cfg.collect
        # a variant's own keys over its algorithm (no compose: the run's algorithm sizes every algorithm config)
        variant = variant_settings(self.cfg, algorithm, self.cfg.algorithm)
        alg = variant.algorithm
        n = math.ceil(dataset_problems(self.datasets[dataset], int(c.limit)) / int(c.shards))
        # a problem's reasoning is about an answer long; the target may rewrite all of it, the PRM reads it all
        tokens = min(int(alg.max_steps) * int(alg.max_tokens_per_call), int(self.cfg.eval_max_new_tokens))
        seconds = n * tokens * sum(self.token_s(r) for r in ROLES)
        on_cpu = [r for r in ROLES if self.devices[r] == "cpu"]
        # one worker per role; three roles sharing a CPU run on two cores (reasoning.session.cpu_placement), every
        # collect alike: a session pins its workers to the first cores it may use whatever the job asked for, so a
        # job asking for fewer (a variant of another draft once asked for one) ran beside another job pinned to
        # the same cores, and its timings (the variants' step-ahead speedup) read whatever ran beside it
        cores = 2 if len(on_cpu) == 3 else 3
        processes = 4 if c.processes else 1
        # a target that writes by token-level speculation holds a copy of the draft beside it
        loaded = ROLES + (("draft",) if alg.target_decoding != "plain" else ())
        return Need(threads=cores * int(c.threads_per_role), gpu=cuda_gpus(list(self.devices.values())),
                    mem_mb=self.serving_mb(loaded, processes), runtime=self._minutes(seconds))

    def _serve(self) -> Need:
        """A serving run: the problems once, then every load point's requests ``serving.repeats`` times, on the
        collect's three workers (as a collect job asks, so it runs alone on a small machine)."""
        s = self.cfg.serving
        points = len(s.timestamps) if s.arrivals == "timestamps" else len(s.loads)
        n = int(s.problems) + int(s.requests) * points * int(s.repeats)
        alg = self.cfg.algorithm
        tokens = min(int(alg.max_steps) * int(alg.max_tokens_per_call), int(self.cfg.eval_max_new_tokens))
        seconds = n * tokens * sum(self.token_s(r) for r in ROLES)
        cores = 2 if all(self.devices[r] == "cpu" for r in ROLES) else 3
        return Need(threads=cores * int(self.cfg.collect.threads_per_role), gpu=cuda_gpus(list(self.devices.values())),
                    mem_mb=self.serving_mb(ROLES, 4), runtime=self._minutes(seconds))

    def _collect_variant(self, dataset: str, algorithm: str, shard: str) -> Need:
        """A collect variant's executors of one shard in one session (heterospec.collect.run_variant): one collect's
        request, the time of all of them."""
        one = [self._collect_shard(dataset, algorithm, e, shard) for e in executors(self.cfg, algorithm)]
        return Need(threads=one[0].threads, gpu=one[0].gpu, mem_mb=max(n.mem_mb for n in one),
                    runtime=sum(n.runtime for n in one))

    def _collect_timed(self, dataset: str, shard: str) -> Need:
        """The timed collects of one shard in one session (heterospec.collect.run_timed): one collect's request, the
        time of all of them, each ``collect.repeats`` times."""
        names = timed_collects(self.cfg)
        one = [self._collect_shard(dataset, a, e, shard) for a, e in names]
        repeats = max(1, int(self.cfg.collect.repeats))
        return Need(threads=one[0].threads, gpu=one[0].gpu, mem_mb=max(n.mem_mb for n in one),
                    runtime=sum(n.runtime for n in one) * repeats)

    def _dfvg_collect(self, dfvg_method: str) -> Need:
        d = self.cfg.dfvg
        seconds = int(d.prompts) * int(d.max_new_tokens) * (self.token_s("draft") + self.token_s("target"))
        # one spare core: its wall clock is a measurement and must not share a core with other work
        return Need(threads=int(d.threads) + 1, gpu=cuda_gpus([self.devices["draft"], self.devices["target"]]),
                    mem_mb=self.serving_mb(("draft", "target")), runtime=self._minutes(seconds))

    @staticmethod
    def _minutes(seconds: float) -> int:
        return max(MIN_RUNTIME_MIN, math.ceil(RUNTIME_SAFETY * seconds / 60))
