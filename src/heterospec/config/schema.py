"""Structured-config schemas: every Hydra group is checked against one of these dataclasses.

A misspelt key or a value of the wrong type fails at compose time, and
:func:`heterospec.config.load` turns Hydra's error into one line naming the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


# ----------------------------------------------------------------------------- models
@dataclass
class ArchConfig:
    """Shape of a Qwen2-architecture model trained here (ignored for hub checkpoints)."""
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 192
    max_position_embeddings: int = 256


@dataclass
class TrainConfig:
    """How a tiny model is trained on the synthetic task."""
    steps: int = 1000           # optimiser steps
    batch_size: int = 32        # sequences per step
    lr: float = 3e-3            # peak learning rate (cosine decay after warmup)
    warmup: int = 50            # linear warmup steps
    weight_decay: float = 0.01
    threads: int = 1            # torch intra-op threads for this role's training job
    seed: int = 0
    log_every: int = 50         # progress line every N steps
    prm_neg_frac: float = 0.5   # PRM only: share of training solutions cut at one corrupted step
    prm_dense_labels: bool = True  # PRM only: also label each step character (right so far?); one label per step learns too slowly
    prm_lm_weight: float = 1.0  # PRM only: weight of an auxiliary next-token loss that teaches the backbone the arithmetic
    prm_draft_samples: int = 0  # PRM only: the trained draft's own steps to learn from (checker-labelled; needs the draft first)
    prm_draft_share: float = 0.5  # PRM only: share of each batch taken from those draft steps
    prm_draft_temperature: float = 1.0  # PRM only: half the draft steps greedy, half sampled at this temperature
    prm_init_from_target: bool = False  # PRM only: fine-tune from the trained target's weights (its arch), as real PRMs start from an LM


@dataclass
class ModelRoleConfig:
    """One role of the trio (draft, prm or target)."""
    source: str = "train"            # train: trained here on the synthetic task; hub: a Hugging Face id or local path
    path: str = ""                   # hub id or local directory (source=hub)
    dtype: str = "float32"           # float32 | bfloat16 | float16
    quantized: bool = False          # run the W8A8 export instead (draft only; see the quantize stage)
    arch: ArchConfig = field(default_factory=ArchConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


@dataclass
class ModelsConfig:
    name: str = MISSING
    draft: ModelRoleConfig = field(default_factory=ModelRoleConfig)
    prm: ModelRoleConfig = field(default_factory=ModelRoleConfig)
    target: ModelRoleConfig = field(default_factory=ModelRoleConfig)
    prompt: str = "plain"            # plain: the synthetic task's own format; qwen_math_cot: Qwen2.5-Math CoT chat prompt
    step_separator: str = "\n\n"     # delimiter between reasoning steps
    prm_step_token: str = "<extra_0>"  # separator the PRM scores after each step


# ----------------------------------------------------------------------------- datasets
@dataclass
class GeneratorConfig:
    """Difficulty knobs of the synthetic multi-step arithmetic task."""
    min_steps: int = 3               # computed variables per problem (>= 3: speculation needs steps)
    max_steps: int = 4
    num_inputs: int = 2              # given variables (a, b, ...)
    min_operand: int = 1
    max_operand: int = 9
    operations: list[str] = field(default_factory=lambda: ["+", "-"])
    allow_negative: bool = False     # keep every intermediate value >= 0
    max_value: int = 9               # |every value| <= this: single digits keep the character-level task learnable in minutes
    train_seed: int = 1              # seed of the (infinite) training stream
    test_seed: int = 12345           # seed of the held-out test set


@dataclass
class DatasetConfig:
    name: str = MISSING
    kind: str = MISSING              # synthetic | math500 | gsm8k | gaokao2023en | olympiadbench
    path: str = ""                   # JSONL file for real benchmarks
    url: str = ""                    # where the download rule fetches it when the file is missing
    split: str = "test"
    limit: int = -1                  # -1: every problem
    shards: int = 1
    generator: Optional[GeneratorConfig] = None


# ----------------------------------------------------------------------------- algorithm
@dataclass
class AlgorithmConfig:
    name: str = MISSING
    backtrack: bool = False          # BRSD when true
    threshold: float = 0.7           # PRM acceptance threshold
    backtrack_threshold: float = 0.7
    max_backtracks: int = 5          # per problem
    ancestor_limit: int = 10         # anchor search goes up at most this many steps
    max_steps: int = 100
    max_tokens_per_call: int = 2048
    temperature: float = 0.0         # 0 = greedy
    seed: int = 43


# ----------------------------------------------------------------------------- hardware / system
@dataclass
class HardwareConfig:
    """A device's datasheet. Units: GB, GB/s, TOPS/TFLOPS, MHz, W."""
    name: str = MISSING
    kind: str = MISSING              # gpu | fpga | cpu | soc
    memory_gb: float = MISSING
    bandwidth_gbs: float = MISSING
    peak_tflops: dict[str, float] = field(default_factory=dict)  # per precision: fp32, fp16, bf16, int8 (TOPS)
    clock_mhz: Optional[float] = None
    power_active_w: float = MISSING
    power_idle_w: float = MISSING
    power_cap_w: Optional[float] = None
    fpga: Optional[dict[str, Any]] = None  # dsp, lut, ff, bram36, uram, hbm_channels, channel_gbs


@dataclass
class LinkConfig:
    name: str = "pcie_gen3_x16"
    bandwidth_gbs: float = 16.0      # per direction, as in the artifact's comm model
    latency_us: float = 1.0          # per transfer


@dataclass
class SystemConfig:
    name: str = MISSING
    draft: HardwareConfig = MISSING
    prm: HardwareConfig = MISSING
    target: HardwareConfig = MISSING
    link: LinkConfig = field(default_factory=LinkConfig)
    # torch device each role's model runs on when the collect stage runs it for real
    torch_devices: dict[str, str] = field(default_factory=lambda: {"draft": "cpu", "prm": "cpu", "target": "cpu"})
    # device -> the device whose core it shares at a lower priority: it progresses only while that one is idle
    # (the replay models it; cpu3 on a 2-core machine: {target: prm}, as reasoning.session.cpu_placement pins them)
    yields_to: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- schedule
@dataclass
class ScheduleConfig:
    name: str = MISSING
    prefetch: bool = False           # target prefetches the step while draft + PRM work (T2)
    partial_cache: bool = False      # reuse partial target outputs by prefix
    draft_pipeline: bool = False     # draft the next step while the PRM scores this one
    shadow_sync: bool = False        # draft ingests target tokens while the target refines (T1)
    disaggregated_prefill: bool = False  # draft's prompt prefilled on the target GPU, KV state moved once (T1)
    draft_lookahead: int = 1         # with draft_pipeline: steps the draft may run ahead of the PRM's verdicts


# ----------------------------------------------------------------------------- collect
@dataclass
class CollectConfig:
    """The collect stage's grid and how it runs."""
    algorithms: list[str] = field(default_factory=lambda: ["rsd", "brsd"])      # algorithm configs to run
    executors: list[str] = field(default_factory=lambda: ["sequential", "step_ahead"])
    limit: int = -1                  # problems per dataset (-1: the dataset's own limit)
    shards: int = 1                  # problem ranges run as separate jobs (and cluster tasks)
    processes: bool = True           # one worker process per role (false: all in this process, for debugging)
    threads_per_role: int = 1        # torch threads in each role's worker


# ----------------------------------------------------------------------------- replay
@dataclass
class ReplayConfig:
    """Trace replay (conf/replay/): which traces, on which systems, with which schedules and latency profiles."""
    traces: str = ""                 # artifact trace root: <traces>/<trace_set>/<dataset>/*.json
    trace_sets: list[str] = field(default_factory=lambda: ["with_bt", "no_bt"])
    datasets: list[str] = field(default_factory=list)   # dataset folders to import (empty: every one found)
    format: str = "auto"             # v11 | v12 | auto (each file's own)
    profiles: list[str] = field(default_factory=lambda: ["paper_v12"])  # paper_v12 | paper_v11 | roofline | hls | measured
    schedules: list[str] = field(default_factory=lambda: ["sequential", "step_ahead", "hetero"])  # conf/schedule names
    systems: list[str] = field(default_factory=lambda: ["gpu3", "hetero_u280", "hetero_v80"])   # conf/system names
    engine: str = "fast"             # fast | simpy (same times; simpy is ~50x slower)
    workers: int = 1                 # processes for the replay grid
    call_overhead_ms: dict[str, float] = field(default_factory=dict)  # roofline: ms per forward pass by device kind
    prefix_cache: bool = True        # roofline/hls: target and PRM read only context not in their KV cache
    prefetch_outcome: str = "auto"   # auto | recorded | simulated: rejected steps' target work (auto: paper profiles record)
    validate_system: str = "cpu3"    # the system our own traces were collected on
    validate_schedules: list[str] = field(default_factory=lambda: ["sequential", "step_ahead"])


# ----------------------------------------------------------------------------- quantize / hls
@dataclass
class QuantizeConfig:
    """W8A8 SmoothQuant-style quantisation of the draft (heterospec.quantize)."""
    alpha: float = 0.5               # smoothing strength: 0 leaves outliers in the activations, 1 moves them all to weights
    calibration_prompts: int = 256   # synthetic problems (prompt + solution) whose activation ranges set the smoothing
    calibration_seed: int = 777      # neither the training stream's seed nor the test set's
    rope_positions: int = 4096       # RoPE table rows exported: the quantised draft's longest context
    eval_problems: int = -1          # held-out problems in the quality report (-1: eval_limit, else the dataset's limit)
    max_new_tokens: int = 96         # generation budget per problem in the quality report
    max_accuracy_drop: float = 2.0   # bar: accuracy points the int8 draft may lose


@dataclass
class HlsEngineConfig:
    """One int8 matrix-vector engine shape: ``rows`` outputs x ``cols`` inputs per cycle (MACs = rows * cols)."""
    rows: int = 8                    # must divide every layer's output size
    cols: int = 64                   # must divide every layer's input size


@dataclass
class HlsConfig:
    """The draft accelerator (conf/hls/): boards, clocks, engine parallelism, and the models it is sized for."""
    name: str = MISSING
    enabled: bool = True             # quantize the draft and build/model its accelerator in this run (needs the draft)
    boards: list[str] = field(default_factory=lambda: ["u280", "v80"])  # conf/hardware names with an fpga: section
    clocks_mhz: dict[str, Any] = field(default_factory=dict)          # per board: [MHz, ...]; its clock_mhz is always added
    design: HlsEngineConfig = field(default_factory=HlsEngineConfig)    # the reference model's engines (perf model)
    kernel: HlsEngineConfig = field(default_factory=lambda: HlsEngineConfig(rows=1, cols=16))  # the run's draft (C-sim)
    pipeline: dict[str, Any] = field(default_factory=dict)      # the design: heterospec.hls.perf.Design's fields
    resources: dict[str, float] = field(default_factory=dict)   # per-unit resource costs of the resource model
    shell_margin: dict[str, float] = field(default_factory=dict)  # fraction of each resource the platform shell takes
    timing: dict[str, dict[str, float]] = field(default_factory=dict)  # per clock (MHz): utilisation ceilings that close
    reference_models: dict[str, dict[str, Any]] = field(default_factory=dict)  # published shapes (no weights needed)
    contexts: list[int] = field(default_factory=lambda: [0, 512, 1024, 2048])  # context lengths of the perf table
    csim_prompts: int = 20           # prompts run through the C simulation, bit-exact against the torch reference
    csim_max_new_tokens: int = 64
    cxx: str = "g++"                 # C++ compiler of the C simulation
    kvmu_pointer_bits: int = 16      # KVMU pointer width (max context 2^bits - 1)
    kvmu_synth_bits: list[int] = field(default_factory=lambda: [8, 16, 24, 32])  # widths synthesised with Yosys
    vendor_tools: list[str] = field(default_factory=lambda: ["tapa", "vitis_hls", "v++"])
    dsp58_boards: list[str] = field(default_factory=lambda: ["v80"])  # Versal boards (DSP58); the others DSP48E2


# ----------------------------------------------------------------------------- dfvg
@dataclass
class DfvgFeedbackConfig:
    """DFVG's acceptance-feedback draft length (the semantics of its configs/draft_params.yaml)."""
    min_draft: int = 8               # the draft length never falls below this
    max_draft: int = 64              # ... nor grows above this
    max_verify: int = 16             # tokens one verification pass checks; the rest of the draft waits its turn
    threshold: float = 0.6           # acceptance ratio (accepted / verified) that counts as a good round
    backoff: float = 0.5             # draft length x this after a bad round
    growth: float = 1.2              # draft length x this after a good round


@dataclass
class DfvgTreeConfig:
    """Confidence-driven dynamic draft tree: expand the likeliest nodes, prune unconfident branches."""
    max_width: int = 8               # nodes drafted per level: at most the FPGA's draft lanes (one weight pass)
    max_depth: int = 16              # levels, i.e. draft passes per tree
    max_nodes: int = 32              # nodes kept for verification (best cumulative draft log-prob)
    top_k: int = 4                   # children considered per expanded node
    min_confidence: float = 0.4      # a branch stops once its cumulative draft probability falls below this


@dataclass
class DfvgReplayConfig:
    """How DFVG's measured rounds are priced on modelled hardware (heterospec.replay.schedules.dfvg)."""
    models: str = "config1"          # conf/models whose draft / target shapes price each call (roofline, hls)
    profiles: list[str] = field(default_factory=lambda: ["roofline"])   # roofline | hls
    fpga: str = "u280"               # conf/hardware: the draft accelerator
    gpu: str = "rtx3090"             # conf/hardware: the verifier (and, GPU-only, the draft too)
    link: LinkConfig = field(default_factory=LinkConfig)
    align_bytes_per_token: int = 4   # accepted-path token ids sent back to the FPGA per accepted token


@dataclass
class DfvgConfig:
    """DFVG token-level speculative decoding (conf/dfvg/): strategies, their knobs, collection and replay."""
    name: str = "default"
    enabled: bool = False            # the dfvg experiment turns this on: its collect + replay rules join the run
    strategies: list[str] = field(default_factory=lambda: ["chain", "hf_heuristic", "feedback", "tree"])
    prompts: int = 100               # held-out synthetic problems decoded per strategy
    max_new_tokens: int = 96         # per prompt
    temperature: float = 0.0         # 0: greedy verification (lossless); > 0: speculative sampling over the tree
    seed: int = 0                    # sampling seed
    threads: int = 1                 # torch threads of the collection
    chain_length: int = 8            # chain: draft tokens per round
    hf_start: int = 20               # hf_heuristic: initial draft length (transformers' num_assistant_tokens)
    feedback: DfvgFeedbackConfig = field(default_factory=DfvgFeedbackConfig)
    tree: DfvgTreeConfig = field(default_factory=DfvgTreeConfig)
    draft_hardware: str = "u280"     # conf/hardware whose fpga.draft_lanes bound the tree
    draft_kernel: str = "auto"       # lean (Qwen2 drafts: the FPGA kernel's software twin) | hf | auto
    replay: DfvgReplayConfig = field(default_factory=DfvgReplayConfig)


# ----------------------------------------------------------------------------- top level
@dataclass
class Config:
    experiment: str = "default"      # results go to results/<run name>/
    name: str = ""                   # run name; empty = derived from experiment and overrides
    seed: int = 0
    datasets: list[str] = field(default_factory=lambda: ["synthetic"])  # the experiment's dataset grid
    eval_limit: int = -1             # cap on problems per dataset for the evaluate stage (-1: all)
    eval_max_new_tokens: int = 256   # per-problem generation budget of draft-only / target-only runs
    models: ModelsConfig = MISSING
    dataset: DatasetConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    system: SystemConfig = MISSING
    schedule: ScheduleConfig = MISSING
    collect: CollectConfig = field(default_factory=CollectConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    quantize: QuantizeConfig = field(default_factory=QuantizeConfig)
    hls: HlsConfig = MISSING
    dfvg: DfvgConfig = MISSING
    paths: dict[str, str] = field(default_factory=dict)


def register() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="models", name="schema", node=ModelsConfig)
    cs.store(group="dataset", name="schema", node=DatasetConfig)
    cs.store(group="algorithm", name="schema", node=AlgorithmConfig)
    cs.store(group="hardware", name="schema", node=HardwareConfig)
    cs.store(group="system", name="schema", node=SystemConfig)
    cs.store(group="schedule", name="schema", node=ScheduleConfig)
    cs.store(group="hls", name="schema", node=HlsConfig)
    cs.store(group="replay", name="schema", node=ReplayConfig)
    cs.store(group="dfvg", name="schema", node=DfvgConfig)
