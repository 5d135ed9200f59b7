"""Structured-config schemas: every Hydra group is checked against one of these dataclasses.

A misspelt key or a value of the wrong type fails at compose time, and :func:`heterospec.config.compose_config`
turns Hydra's error into one line naming the key. Each number also has a range, checked at compose time (and for
a hardware or system entry read alone, in :func:`heterospec.config.group_entry`) in one line naming the key, the value
and the range.

A new section: write its dataclass here, declare every numeric field with its range,
``batch: int = number(8, ge=1)``, ``rate: float = number(1.0, gt=0)``, ``share: float = number(0.5, ge=0, le=1)``
(a list or mapping of numbers: ``number(factory=list, ge=0)``; no bound: ``number(3)``, unbounded on purpose), and
add it as a field of :class:`Config` (a Hydra group: register it below too). Nothing else: the compose-time check
walks :class:`Config`, and tests/test_config_ranges.py tries a value outside each declared range and refuses a
numeric field declared without ``number``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from heterospec.config.ranges import number


# ----------------------------------------------------------------------------- models
@dataclass
class ArchConfig:
    """Shape of a Qwen2-architecture model trained here (ignored for hub checkpoints)."""
    hidden_size: int = number(64, ge=1)
    num_hidden_layers: int = number(2, ge=1)
    num_attention_heads: int = number(4, ge=1)
    num_key_value_heads: int = number(2, ge=1)
    intermediate_size: int = number(192, ge=1)
    max_position_embeddings: int = number(256, ge=1)


@dataclass
class TrainConfig:
    """How a tiny model is trained on the synthetic task."""
    steps: int = number(1000, ge=1)  # optimiser steps
    batch_size: int = number(32, ge=1)  # sequences per step
    lr: float = number(3e-3, gt=0)  # peak learning rate (cosine decay after warmup)
    warmup: int = number(50, ge=0)  # linear warmup steps
    weight_decay: float = number(0.01, ge=0)
    threads: int = number(1, ge=1)  # torch intra-op threads for this role's training job
    seed: int = number(0, ge=0)
    log_every: int = number(50, ge=1)  # progress line every N steps
    length_buckets: int = number(1, ge=1)  # draw this many batches at once and group them by length (less padding); 1 = off
    stop_at_step_error: float = number(0.0, ge=0, le=1)  # draft/target: stop once the greedy step error on validation problems is at or below this; 0 = all steps
    validate_every: int = number(50, ge=1)  # steps between those validation checks
    validate_every_near: int = number(0, ge=0)  # draft/target: when a check reaches stop_at_step_error below validate_again_below, train the last interval again with a check this often and keep the weights nearest the bar (0 = off)
    validate_again_below: float = number(0.0, ge=0, le=1)  # draft/target, with validate_every_near: a check this far past the bar fell through the window between two checks
    stop_at_auroc: float = number(0.0, ge=0, le=1)  # PRM only: stop once its AUROC on the draft's greedy steps of validation problems is at or above this (checked every validate_every steps); 0 = all steps
    validation_problems: int = number(200, ge=1)  # validation problems (a stream apart from training and the test set)
    prm_neg_frac: float = number(0.5, ge=0, le=1)  # PRM only: share of training solutions cut at one corrupted step
    prm_dense_labels: bool = True  # PRM only: also label each step character (right so far?); one label per step learns too slowly
    prm_lm_weight: float = number(1.0, ge=0)  # PRM only: weight of an auxiliary next-token loss that teaches the backbone the arithmetic
    prm_draft_samples: int = number(0, ge=0)  # PRM only: the trained draft's own steps to learn from (checker-labelled; needs the draft first)
    prm_draft_share: float = number(0.5, ge=0, le=1)  # PRM only: share of each batch taken from those draft steps
    prm_draft_temperature: float = number(1.0, ge=0)  # PRM only: half the draft steps greedy, half sampled at this temperature
    prm_init_from: str = "scratch"  # PRM only: scratch, or fine-tune from the trained draft's or target's weights, as real PRMs start from an LM
    prm_extra_layers: int = number(0, ge=0)  # PRM only, with prm_init_from: fresh layers on top of that LM's (their outputs start at zero)


@dataclass
class ModelRoleConfig:
    """One role of the trio (draft, prm or target)."""
    source: str = "train"            # train: trained here on the synthetic task; hub: a Hugging Face id or local path
    path: str = ""                   # hub id or local directory (source=hub)
    dtype: str = "float32"           # float32 | bfloat16 | float16
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
    min_steps: int = number(3, ge=3)  # computed variables per problem (>= 3: speculation needs steps)
    max_steps: int = number(4, ge=3)
    num_inputs: int = number(2, ge=1)  # given variables (a, b, ...)
    min_operand: int = number(1)
    max_operand: int = number(9)
    operations: list[str] = field(default_factory=lambda: ["+", "-"])
    allow_negative: bool = False     # keep every intermediate value >= 0
    max_value: int = number(9, ge=0)  # |every value| <= this: single digits keep the character-level task learnable in minutes
    train_seed: int = number(1, ge=0)  # seed of the (infinite) training stream
    test_seed: int = number(12345, ge=0)  # seed of the held-out test set


@dataclass
class DatasetConfig:
    name: str = MISSING
    kind: str = MISSING              # synthetic | math500 | gsm8k | gaokao2023en | olympiadbench
    path: str = ""                   # JSONL file for real benchmarks
    url: str = ""                    # where the download rule fetches it when the file is missing
    split: str = "test"
    limit: int = number(-1, ge=-1)   # -1: every problem
    shards: int = number(1, ge=1)
    generator: Optional[GeneratorConfig] = None


# ----------------------------------------------------------------------------- algorithm
@dataclass
class AlgorithmConfig:
    name: str = MISSING
    backtrack: bool = False          # BRSD when true
    threshold: float = number(0.7, ge=0, le=1)  # PRM acceptance threshold
    backtrack_threshold: float = number(0.7, ge=0, le=1)
    max_backtracks: int = number(5, ge=0)  # per problem
    ancestor_limit: int = number(10, ge=0)  # anchor search goes up at most this many steps
    max_steps: int = number(100, ge=1)
    max_tokens_per_call: int = number(2048, ge=1)
    temperature: float = number(0.0, ge=0)  # 0 = greedy
    seed: int = number(43, ge=0)
    # how the target writes its steps (rescues, backtrack rewrites, partial resumes): plain decoding, or token-level
    # speculation with the run's draft and one of DFVG's strategies (knobs: the token_speculation group); lossless when greedy
    target_decoding: str = "plain"   # plain | chain | hf_heuristic | feedback | tree
    # step_ahead executor, speculative target: the prefetch speculates too (on a real system it would compete with the
    # draft device drafting the step) or decodes plainly
    speculative_prefetch: bool = False
    target_sd: str = "chain"         # the strategy of the evaluate stage's target_sd method


# ----------------------------------------------------------------------------- hardware / system
@dataclass
class MemoryBankConfig:
    """One memory of an FPGA board: ``channels`` x ``channel_gbs`` (its bandwidth is their product, never stated)."""
    type: str = MISSING              # hbm2 | hbm2e | ddr4 | lpddr4 | ...
    gb: float = number(MISSING, gt=0)
    channels: int = number(MISSING, ge=1)  # HBM pseudo-channels or DDR channels, one AXI port each
    channel_gbs: float = number(MISSING, gt=0)  # peak GB/s of one channel


@dataclass
class FpgaConfig:
    """An FPGA board's fabric and memories (heterospec.config.hardware.Fabric)."""
    part: Optional[str] = None       # the vendor part number (the vendor flow's set_part)
    dsp: int = number(MISSING, ge=0)
    dsp_kind: str = MISSING          # dsp48e2 (UltraScale+) | dsp58 (Versal)
    lut: Optional[int] = number(None, ge=0)  # a resource left out is reported as unchecked
    ff: Optional[int] = number(None, ge=0)
    bram36: Optional[int] = number(None, ge=0)
    uram: Optional[int] = number(None, ge=0)
    hbm: Optional[MemoryBankConfig] = None
    ddr: Optional[MemoryBankConfig] = None
    slrs: int = number(1, ge=1)      # super logic regions; the resource model takes each as an equal share
    memory_slr: int = number(0, ge=0)  # the SLR the memory controllers (and so the memory ports) sit in
    sll_per_boundary: Optional[int] = number(None, ge=0)  # super-long lines between adjacent SLRs
    slr_shell: list[dict[str, float]] = number(factory=list, ge=0, le=1)  # per SLR: fraction the platform shell takes
    slr_available: list[dict[str, int]] = number(factory=list, ge=0)   # per SLR: what the shell leaves (published)
    sll_available: list[int] = number(factory=list, ge=0)   # per SLR boundary: SLLs the shell leaves (published)
    draft_lanes: Optional[int] = number(None, ge=1)  # tokens the draft decoder advances per weight pass (bounds DFVG's tree width)
    clocks_mhz: list[float] = number(factory=list, gt=0)   # kernel clocks the HLS models (clock_mhz always added)


@dataclass
class HardwareConfig:
    """A device's datasheet. Units: GB, GB/s, TOPS/TFLOPS, MHz, W. An FPGA board states its memories under
    ``fpga`` (hbm, ddr); its memory size, type and bandwidth are derived from them, not restated."""
    name: str = MISSING
    kind: str = MISSING              # gpu | fpga | cpu | soc
    memory_type: Optional[str] = None      # hbm3 | gddr6x | lpddr5 | ddr5 ... (fpga: from fpga.hbm, else fpga.ddr)
    memory_gb: Optional[float] = number(None, gt=0)  # (fpga: derived)
    bandwidth_gbs: Optional[float] = number(None, gt=0)  # (fpga: derived)
    peak_tflops: dict[str, float] = number(factory=dict, gt=0)   # per precision: fp32, fp16, bf16, int8 (TOPS)
    clock_mhz: Optional[float] = number(None, gt=0)
    power_active_w: float = number(MISSING, ge=0)
    power_idle_w: float = number(MISSING, ge=0)
    power_cap_w: Optional[float] = number(None, gt=0)
    price_usd: Optional[float] = number(None, gt=0)   # a list price (the design space's capacity per dollar) ...
    price_source: Optional[str] = None                # ... and where it is published
    fpga: Optional[FpgaConfig] = None


@dataclass
class LinkConfig:
    name: str = "pcie_gen3_x16"
    bandwidth_gbs: float = number(16.0, gt=0)  # per direction, as in the artifact's comm model
    latency_us: float = number(1.0, ge=0)  # per transfer


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
# A schedule (conf/schedule/<name>.yaml) is its name plus, per mechanism of the replay, `<mechanism>: true|false`
# and the options that mechanism declares. The mechanisms declare them (heterospec.replay.schedules.mechanisms,
# one module each) and check a schedule when the replay loads it, so a new mechanism needs no field here.
ScheduleConfig = dict[str, Any]


# ----------------------------------------------------------------------------- collect
@dataclass
class CollectVariant:
    """A named collect beside the algorithm configs (heterospec.config.collect_variants): an algorithm config with some of its
    keys set, written by one draft implementation (``draft``, else the run's ``collect.draft``). Its traces lie under ``collect/<dataset>/<name>/`` and their
    ``algorithm`` column is the name, so Table III and ``collect_summary`` show it as a row of its own."""
    algorithm: str = MISSING         # the algorithm config it runs: rsd | brsd
    overrides: dict[str, Any] = field(default_factory=dict)    # algorithm keys set over it (target_decoding: chain)
    draft: str = ""                  # the draft implementation (as collect.draft); empty: the run's collect.draft
    executors: list[str] = field(default_factory=list)    # which of collect.executors it runs (empty: all of them)


def _collect_variants() -> dict[str, CollectVariant]:
    """The variants every run can name in ``collect.algorithms`` (conf/experiment/default.yaml collects some)."""
    sd = {"target_decoding": "chain"}
    return {"rsd_sd": CollectVariant("rsd", sd), "brsd_sd": CollectVariant("brsd", sd),
            "rsd_w8a8": CollectVariant("rsd", draft="w8a8"), "brsd_w8a8": CollectVariant("brsd", draft="w8a8"),
            "rsd_u280": CollectVariant("rsd", draft="u280"), "brsd_u280": CollectVariant("brsd", draft="u280"),
            "brsd_v80": CollectVariant("brsd", draft="v80")}


@dataclass
class CollectConfig:
    """The collect stage's grid and how it runs."""
    algorithms: list[str] = field(default_factory=lambda: ["rsd", "brsd"])   # algorithm configs or variants to run
    variants: dict[str, CollectVariant] = field(default_factory=_collect_variants)
    executors: list[str] = field(default_factory=lambda: ["sequential", "step_ahead"])
    limit: int = number(-1, ge=-1)   # problems per dataset (-1: the dataset's own limit)
    shards: int = number(1, ge=1)    # problem ranges run as separate jobs (and cluster tasks)
    processes: bool = True           # one worker process per role (false: all in this process, for debugging)
    threads_per_role: int = number(1, ge=1)  # torch threads in each role's worker
    repeats: int = number(1, ge=1)   # runs of each problem, in rounds; > 1: every run's timings (repeats table)
    # the draft implementation that writes the draft's steps (heterospec.config.collect_variants.draft_implementation):
    # model (the trained checkpoint in torch) | w8a8 (the quantize stage's int8 export, in torch) | a board of hls.boards
    # (its generated HLS kernel, C++ on this CPU, from the same export)
    draft: str = "model"


# which collects a run makes, not how any one of them runs: a collect job reads the rest of the section
COLLECT_GRID = ("algorithms", "executors", "variants")


# ----------------------------------------------------------------------------- serving
@dataclass
class ServingConfig:
    """A serving run (heterospec.serve, docs/serving.md): several problems in flight through the collect's three workers,
    the PRM and the target batching, measured at a few loads; the load replay is validated against it."""
    enabled: bool = False            # serve (and validate the load replay) in this run
    algorithm: str = "brsd"          # an algorithm config of collect.algorithms: its sequential collect is the reference
    dataset: str = ""                # one of the run's datasets (empty: the first)
    problems: int = number(4, ge=1)  # distinct problems the requests ask (the dataset's first), each equally often
    requests: int = number(16, ge=1)  # requests per load point
    arrivals: str = "poisson"        # poisson | closed | timestamps (heterospec.arrivals)
    # poisson: arrival rate as a multiple of the unloaded rate (1 / the mean latency of the problems served one at a
    # time, measured first); closed: clients; timestamps: ignored (one load point per file of `timestamps`)
    loads: list[float] = number(factory=lambda: [0.5, 1.5, 4.0], gt=0)
    timestamps: list[str] = field(default_factory=list)  # arrivals=timestamps: a file of arrival times per load point
    think_s: float = number(0.0, ge=0)  # closed: seconds from a client's answer to its next request
    repeats: int = number(2, ge=1)   # runs of every load point, in rounds over the loads (drift shows between rounds)
    seed: int = number(0, ge=0)      # arrival times and which problem each request asks
    # requests per pass: the draft 1 (the FPGA's batch-1 lane; > 1: it batches like the target), PRM and target
    max_batch: dict[str, int] = number(factory=lambda: {"draft": 1, "prm": 8, "target": 8}, ge=1)


# ----------------------------------------------------------------------------- replay
@dataclass
class SpeculationPricesConfig:
    """How the replay prices a target write made by token-level speculation (replay.schedules ending in _sd,
    target_sd): per DFVG strategy, tokens out per verification round (tau) and tokens drafted per round."""
    strategy: str = "chain"          # which strategy's numbers the replay uses
    tau: dict[str, Optional[float]] = number(factory=dict, ge=1)    # strategy -> tau (null: no published value)
    draft_len: dict[str, int] = number(factory=dict, ge=1)          # strategy -> tokens drafted per round
    source: str = ""                 # where the numbers come from (figure captions quote it)


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
    workers: int = number(1, ge=1)   # processes for the replay grid
    call_overhead_ms: dict[str, float] = number(factory=dict, ge=0)   # roofline: ms per forward pass by device kind
    prefix_cache: bool = True        # roofline/hls: target and PRM read only context not in their KV cache
    prefetch_outcome: str = "auto"   # auto | recorded | simulated: rejected steps' target work (auto: paper profiles record)
    validate_system: str = "cpu3"    # the system our own traces were collected on
    validate_schedules: list[str] = field(default_factory=lambda: ["sequential", "step_ahead"])
    token_speculation: SpeculationPricesConfig = field(default_factory=SpeculationPricesConfig)


# ----------------------------------------------------------------------------- quantize / hls
@dataclass
class QuantizeConfig:
    """W8A8 SmoothQuant-style quantisation of the draft (heterospec.quantize)."""
    alpha: float = number(0.5, ge=0, le=1)  # smoothing strength: 0 leaves outliers in the activations, 1 moves them all to weights
    calibration_prompts: int = number(256, ge=1)  # synthetic problems (prompt + solution) whose activation ranges set the smoothing
    calibration_seed: int = number(777, ge=0)  # neither the training stream's seed nor the test set's
    rope_positions: int = number(4096, ge=1)  # RoPE table rows exported: the quantised draft's longest context
    eval_problems: int = number(-1, ge=-1)  # held-out problems in the quality report (-1: eval_limit, else the dataset's limit)
    max_new_tokens: int = number(96, ge=1)  # generation budget per problem in the quality report
    max_accuracy_drop: float = number(2.0, ge=0, le=100)  # bar: accuracy points the int8 draft may lose


@dataclass
class HlsEngineConfig:
    """One int8 matrix-vector engine shape: ``rows`` outputs x ``cols`` inputs per cycle (MACs = rows * cols)."""
    rows: int = number(8, ge=1)      # must divide every layer's output size
    cols: int = number(64, ge=1)     # must divide every layer's input size
    batch: int = number(1, ge=1)     # sequences per weight pass (kernel: > 1 adds draft_batch.cpp to the sources)


@dataclass
class HlsConfig:
    """The draft accelerator (conf/hls/): boards, clocks, engine parallelism, and the models it is sized for."""
    name: str = MISSING
    enabled: bool = True             # quantize the draft and build/model its accelerator in this run (needs the draft)
    boards: list[str] = field(default_factory=lambda: ["u280", "v80"])  # conf/hardware names with an fpga: section
    design: HlsEngineConfig = field(default_factory=HlsEngineConfig)    # the reference model's engines (perf model)
    kernel: HlsEngineConfig = field(default_factory=lambda: HlsEngineConfig(rows=1, cols=16))  # the run's draft (C-sim)
    pipeline: dict[str, Any] = field(default_factory=dict)      # the design: heterospec.hls.perf.Design's fields
    resources: dict[str, float] = number(factory=dict, ge=0)    # per-unit resource costs of the resource model
    shell_margin: dict[str, float] = number(factory=dict, ge=0, le=1)  # fraction of each resource the platform shell takes
    timing: dict[str, dict[str, float]] = number(factory=dict, ge=0, le=1)  # per clock (MHz): utilisation ceilings that close
    reference_models: list[str] = field(default_factory=list)  # Hugging Face ids with a published shape (heterospec.shapes)
    contexts: list[int] = number(factory=lambda: [0, 512, 1024, 2048], ge=0)   # context lengths of the perf table
    csim_prompts: int = number(20, ge=0)  # prompts run through the C simulation, bit-exact against the torch reference
    csim_max_new_tokens: int = number(64, ge=1)
    csim_batches: list[int] = number(factory=lambda: [1, 2, 4, 8, 16], ge=1)  # batch-B kernels checked against batch 1
    cxx: str = "g++"                 # C++ compiler of the C simulation
    kvmu_pointer_bits: int = number(16, ge=1)  # KVMU pointer width (max context 2^bits - 1)
    kvmu_synth_bits: list[int] = number(factory=lambda: [8, 16, 24, 32], ge=1)   # widths synthesised with Yosys
    vendor_tools: list[str] = field(default_factory=lambda: ["tapa", "vitis_hls", "v++"])


# ----------------------------------------------------------------------------- token-level speculation
@dataclass
class FeedbackConfig:
    """DFVG's acceptance-feedback draft length (the semantics of its configs/draft_params.yaml)."""
    min_draft: int = number(8, ge=1)  # the draft length never falls below this
    max_draft: int = number(64, ge=1)  # ... nor grows above this
    max_verify: int = number(16, ge=1)  # tokens one verification pass checks; the rest of the draft waits its turn
    threshold: float = number(0.6, ge=0, le=1)  # acceptance ratio (accepted / verified) that counts as a good round
    backoff: float = number(0.5, gt=0, le=1)  # draft length x this after a bad round
    growth: float = number(1.2, ge=1)  # draft length x this after a good round


@dataclass
class TreeConfig:
    """Confidence-driven dynamic draft tree: expand the likeliest nodes, prune unconfident branches."""
    max_width: int = number(8, ge=1)  # nodes drafted per level: at most the FPGA's draft lanes (one weight pass)
    max_depth: int = number(16, ge=1)  # levels, i.e. draft passes per tree
    max_nodes: int = number(32, ge=1)  # nodes kept for verification (best cumulative draft log-prob)
    top_k: int = number(4, ge=1)     # children considered per expanded node
    min_confidence: float = number(0.4, ge=0, le=1)  # a branch stops once its cumulative draft probability falls below this


@dataclass
class TokenSpeculationConfig:
    """Token-level speculative decoding (conf/token_speculation/): the drafting strategies' knobs and the draft's
    decoder. DFVG's collection, a speculative target write in collect (algorithm.target_decoding) and the evaluate
    stage's target_sd method all read this group; which strategy runs is theirs to say."""
    name: str = "default"
    chain_length: int = number(8, ge=1)  # chain: draft tokens per round
    hf_start: int = number(20, ge=1)  # hf_heuristic: initial draft length (transformers' num_assistant_tokens)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    draft_decoder: str = "auto"      # lean (Qwen2 drafts: the FPGA kernel's software twin) | hf | auto


# ----------------------------------------------------------------------------- dfvg
@dataclass
class DfvgReplayConfig:
    """How DFVG's measured rounds are priced on modelled hardware (heterospec.replay.schedules.dfvg)."""
    models: str = "config1"          # conf/models whose draft / target shapes price each call (roofline, hls)
    profiles: list[str] = field(default_factory=lambda: ["roofline"])   # roofline | hls
    fpga: str = "u280"               # conf/hardware: the draft accelerator
    gpu: str = "rtx3090"             # conf/hardware: the verifier (and, GPU-only, the draft too)
    link: LinkConfig = field(default_factory=LinkConfig)
    align_bytes_per_token: int = number(4, ge=0)  # accepted-path token ids sent back to the FPGA per accepted token


@dataclass
class DfvgConfig:
    """DFVG's own experiment (conf/dfvg/): which strategies it collects, on how many prompts, and its replay. The
    strategies' knobs are the token_speculation group's."""
    name: str = "default"
    enabled: bool = False            # the dfvg experiment turns this on: its collect + replay rules join the run
    strategies: list[str] = field(default_factory=lambda: ["chain", "hf_heuristic", "feedback", "tree"])
    prompts: int = number(100, ge=1)  # held-out synthetic problems decoded per strategy
    max_new_tokens: int = number(96, ge=1)  # per prompt
    temperature: float = number(0.0, ge=0)  # 0: greedy verification (lossless); > 0: speculative sampling over the tree
    seed: int = number(0, ge=0)      # sampling seed
    threads: int = number(1, ge=1)   # torch threads of the collection
    draft_hardware: str = "u280"     # conf/hardware whose fpga.draft_lanes bound the tree
    replay: DfvgReplayConfig = field(default_factory=DfvgReplayConfig)


# ----------------------------------------------------------------------------- load
@dataclass
class LoadArrivalsConfig:
    """An arrival process (heterospec.arrivals.Arrivals) for `python -m heterospec.replay load run`."""
    kind: str = "poisson"            # poisson | closed | timestamps
    rate: float = number(1.0, gt=0)  # poisson: requests per second
    clients: int = number(1, ge=1)   # closed: users in the loop
    think_s: float = number(0.0, ge=0)  # closed: seconds between a user's answer and its next request
    path: str = ""                   # timestamps: a file of arrival times (s), one per line, in order
    seed: int = number(0, ge=0)      # the arrival gaps' and the problems' draws


@dataclass
class LoadSloConfig:
    """The latency target capacity is measured at: a percentile of request latency within a limit."""
    percentile: float = number(99.0, gt=0, le=100)
    multiple: float = number(4.0, ge=1)  # the limit: this x the reference's unloaded latency at that percentile
    seconds: Optional[float] = number(None, gt=0)  # or the limit in seconds (then multiple is not used)
    reference: str = "gpu3/target"   # system/method whose unloaded latency the multiple scales; own: each its own


@dataclass
class BatchCurveConfig:
    """A published step time against the tokens in one pass, for the paper profiles' batching on that device."""
    source: str = ""                 # where it comes from (figure captions and the results quote it)
    params_b: float = number(7.0, gt=0)  # the measured model's parameters (billions): prices models within 2x of it
    bandwidth_gbs: float = number(1.0, gt=0)  # the device it was measured on (another device: scaled by bandwidth)
    tokens: list[int] = number(factory=list, ge=1)
    ms: list[float] = number(factory=list, gt=0)


@dataclass
class LoadPolicyConfig:
    """The load-aware speculation policies' settings (the methods <rsd|brsd>_<threshold|goodput>)."""
    limits: dict[str, int] = number(factory=lambda: {"draft": 4}, gt=0)  # threshold: device -> waiting operations


@dataclass
class LoadConfig:
    """The load replay (conf/load/): many requests at once on the modelled systems, capacity at an SLO."""
    name: str = "default"
    enabled: bool = True             # false: no load replay in this run
    traces: str = "auto"             # auto (the artifact's when imported, else ours) | artifact | ours
    profile: str = "paper_v12"       # the latency profile that prices the load replay
    systems: list[str] = field(default_factory=lambda: ["gpu3", "hetero_u280", "hetero_v80"])
    methods: list[str] = field(default_factory=lambda: ["target", "target_sd", "rsd", "brsd", "brsd_sd"])
    requests: int = number(200, ge=20)  # requests a load point counts first (after the warm-up ones) ...
    max_requests: int = number(2000, ge=20)  # ... doubling to this many before a rate may meet the SLO
    warmup: float = number(0.1, ge=0, le=0.9)  # share of a point's first requests left out of its aggregates
    seed: int = number(0, ge=0)      # arrival gaps and the problems' order (common to every point)
    seeds: int = number(5, ge=1)     # arrival seeds the capacity search runs under (seed, seed + 1, ...)
    arrivals: LoadArrivalsConfig = field(default_factory=LoadArrivalsConfig)   # `load run`: one point
    batching: dict[str, str] = field(default_factory=dict)      # draft, prm, target, link -> a batching policy
    max_batch: dict[str, int] = number(factory=dict, ge=0)   # draft (on a GPU), prm, target; 0: what KV holds
    fpga_batch: int = number(1, ge=1)  # sequences per weight pass of an FPGA draft lane (1: the batch-1 kernel)
    draft_lanes: int = number(0, ge=0)  # an FPGA draft's independent lanes (0: as many as the design point fits)
    memory_fraction: float = number(0.9, gt=0, le=1)  # of a GPU's memory for weights + KV cache (vLLM's)
    slo: LoadSloConfig = field(default_factory=LoadSloConfig)
    search_steps: int = number(4, ge=0)  # bisections of the capacity search (after doubling to a failing rate)
    curve: list[float] = number(factory=list, gt=0)  # load points drawn, as fractions of capacity
    paper_batch_curves: dict[str, BatchCurveConfig] = field(default_factory=dict)   # device name -> curve
    workers: int = number(2, ge=1)   # processes (system x method jobs)
    speculation_policy: LoadPolicyConfig = field(default_factory=LoadPolicyConfig)


@dataclass
class DesignSpaceConfig:
    """The FPGA draft's design space under load (conf/design_space/): capacity, per watt and per dollar, against B,
    FPGAs, kernel and board. Its defaults are conf/design_space/default.yaml's (MISSING here: one place)."""
    name: str = MISSING
    enabled: bool = MISSING
    boards: list[str] = MISSING       # conf/hardware names with an fpga: section
    gpus: str = MISSING               # the PRM's and the target's device
    reference: str = MISSING          # the three-GPU system (conf/system)
    methods: list[str] = MISSING      # rsd | brsd
    kernels: list[str] = MISSING      # ours | paper
    batches: list[int] = number(MISSING, ge=1)   # sequences per weight pass
    board_batches: dict[str, list[int]] = number(MISSING, ge=1)  # board -> its own batches (instead of batches)
    fpgas: list[int] = number(MISSING, ge=1)     # FPGAs for the draft
    engine: str = MISSING             # sized | fixed
    metrics: list[str] = MISSING      # capacity | per_watt | per_dollar
    prices_usd: dict[str, float] = number(MISSING, gt=0)   # device name -> a quoted price (before price_usd)
    requests: int = number(MISSING, ge=20)
    max_requests: int = number(MISSING, ge=20)
    seeds: int = number(MISSING, ge=1)
    search_steps: int = number(MISSING, ge=0)


# ----------------------------------------------------------------------------- top level
@dataclass
class Config:
    experiment: str = "default"      # results go to results/<run name>/
    name: str = ""                   # run name; empty = derived from experiment and overrides
    seed: int = number(0, ge=0)
    datasets: list[str] = field(default_factory=lambda: ["synthetic"])  # the experiment's dataset grid
    eval_limit: int = number(-1, ge=-1)  # cap on problems per dataset for the evaluate stage (-1: all)
    eval_max_new_tokens: int = number(256, ge=1)  # per-problem generation budget of draft-only / target-only runs
    models: ModelsConfig = MISSING
    dataset: DatasetConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    system: SystemConfig = MISSING
    schedule: ScheduleConfig = MISSING
    collect: CollectConfig = field(default_factory=CollectConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    quantize: QuantizeConfig = field(default_factory=QuantizeConfig)
    hls: HlsConfig = MISSING
    dfvg: DfvgConfig = MISSING
    token_speculation: TokenSpeculationConfig = MISSING
    load: LoadConfig = MISSING
    design_space: DesignSpaceConfig = MISSING
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
    cs.store(group="hls", name="schema", node=HlsConfig)
    cs.store(group="replay", name="schema", node=ReplayConfig)
    cs.store(group="dfvg", name="schema", node=DfvgConfig)
    cs.store(group="token_speculation", name="schema", node=TokenSpeculationConfig)
    cs.store(group="load", name="schema", node=LoadConfig)
