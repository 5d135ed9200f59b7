# The run's config, paths and the input functions of the rules. The logic lives in the package (heterospec.config.
# snakemake, heterospec.config.digest), where it is tested.
import shlex
import sys
from pathlib import Path

from heterospec.config import compose_config, run_dir
from heterospec.config.digest import ResolvedRun, digest
from heterospec.config.snakemake import run_overrides, validate_config
from heterospec.config.collect_variants import check_collect, draft_implementation, is_variant, timed_collects
from heterospec.config.collect_variants import paired_variants
from heterospec.config.drafts import is_board
from heterospec.config.collect_variants import executors as collect_executors
from heterospec.config.serving_checks import check_serving, serving_dataset
from heterospec.errors import UserError
from heterospec.jobs import JobSizes
from heterospec.paths import DUCKDB_FILE, EVAL_METHODS, EVAL_ROLES, ROLES, RunPaths, model_dir, prm_learns_from
from heterospec.reasoning.collect_schemas import COLLECT_TABLES as COLLECT_TABLES
from heterospec.replay.grid.ours import ours_path, ours_profiles
from heterospec.report.sources import PAPER_TABLE3, paper_table3_path
from heterospec.replay.grid.tau_sweep import sweep_path, sweeps_ours
from heterospec.report.sweep import parse_sweep, sweep_name
from heterospec import workflow_log

workflow_log.install()  # job blocks with each file list cut to its first files: no log line of thousands of characters

try:  # --config first (workflow/schemas/config.schema.yaml), then the Hydra config it names, composed once
    validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
    OVERRIDES = run_overrides(config)
    CFG = compose_config(OVERRIDES)
    RESOLVED = ResolvedRun(CFG, OVERRIDES)  # the group entries the stages read besides the run's own
    SWEEP = parse_sweep(config["sweep"]) if config.get("sweep") else None
    JOBS = JobSizes(CFG, {d: RESOLVED.dataset(d) for d in CFG.datasets})
    check_collect(CFG)  # every collect.algorithms name: an algorithm config or a collect.variants entry
    if CFG.serving.enabled:
        check_serving(CFG)  # loads, batch sizes, a draft that can serve (heterospec.config.serving_checks)
except UserError as e:
    print(f"heterospec: {e}", file=sys.stderr)
    sys.exit(2)

RUN = str(run_dir(CFG))
PATHS = RunPaths.for_run(CFG, OVERRIDES)  # models keyed by their settings: equal ones are shared
HYDRA = " ".join(shlex.quote(o) for o in OVERRIDES)
HYDRA_SHELL = HYDRA.replace("{", "{{").replace("}", "}}")  # HYDRA pasted into a shell: command
TRAINED = [r for r in ROLES if CFG.models[r].source == "train"]
DOWNLOADED = str(Path(str(CFG.paths.datasets)) / "{bench}" / "test.jsonl")  # where a fetched benchmark goes


def spec(rule):
    """A rule's params.spec: the digest of the config sections its stage reads (heterospec.config.digest.READS)."""
    return lambda wildcards: RESOLVED.spec(rule, dict(wildcards.items()))


MODEL_DIR = str(model_dir(PATHS.root.parent, "{role}", "{model_key}"))


def eval_inputs(wildcards):
    """The models the method loads (target_sd: the draft too), and the benchmark file."""
    inputs = {"manifests": [str(PATHS.model_manifest(r)) for r in EVAL_ROLES[wildcards.method]]}
    ds = RESOLVED.dataset(wildcards.dataset)
    if ds.kind != "synthetic":
        inputs["data"] = ds.path
    return inputs


def eval_spec(wildcards):
    """The evaluate rule's params.spec: target_sd also reads its strategy and the speculation knobs."""
    reads = "evaluate_target_sd" if wildcards.method == "target_sd" else "evaluate"
    return RESOLVED.spec(reads, dict(wildcards.items()))


def need(stage, field):
    """One field (threads, gpu, mem_mb, runtime) of a stage's job request, for a rule's threads: or resources:."""
    return lambda wildcards: getattr(JOBS.need(stage, **dict(wildcards.items())), field)


def job_priority(stage):
    """Which ready job a small machine starts first: the default run's critical path is the draft's training, the
    PRM's (it learns from the draft's steps), the collects the replay reads, then the replay and report stages;
    the rest (the target's training beside them, evaluate, quantize, hls, the collect variants, the trio's quality
    report) fills the cores."""
    if stage == "train_model":
        return lambda wildcards: {"draft": 100, "prm": 90}.get(wildcards.role, 50)
    if stage == "collect_timed":
        return 60
    if stage in ("collect_shard", "collect_merge"):
        return lambda wildcards: variant_priority(wildcards.algorithm) if is_variant(CFG, wildcards.algorithm) else 60
    return 40


def variant_priority(name):
    """The collect variants run after the timed collects, the slowest draft first (the torch int8 reference, about 3 ms
    a token; then a board's kernel; then the run's own draft), so that the last to finish is a short one."""
    return 10 + {"w8a8": 2, "model": 0}.get(draft_implementation(CFG, name), 1)


def prm_needs(wildcards):
    """The PRM learns from the trained draft's steps and may start from the trained target's weights."""
    if wildcards.role != "prm":
        return []
    return [str(PATHS.model_manifest(r)) for r in sorted(prm_learns_from(CFG.models.prm))]


def collect_inputs(wildcards):
    """The trio's models; a W8A8 draft's export; a kernel draft's library (the run's draft or the variant's)."""
    inputs = draft_inputs(wildcards.dataset, wildcards.algorithm)
    if is_variant(CFG, wildcards.algorithm):  # after the timed collects the replay validates: they run alone
        inputs["after"] = collections(plain=True)
    return inputs


def timed_inputs(wildcards):
    """The timed collects' inputs: those of the run's own draft (heterospec.config.collect_variants.timed_collects)."""
    return draft_inputs(wildcards.dataset, TIMED[0][0])


def draft_inputs(dataset, algorithm):
    inputs = {"manifests": [str(PATHS.model_manifest(r)) for r in ROLES]}
    draft = draft_implementation(CFG, algorithm)
    if draft != "model":  # the int8 export, in torch or as a board's kernel
        inputs["quantized_draft"] = str(PATHS.quantized_draft)
    if is_board(draft):
        inputs["kernel_library"] = str(PATHS.hls_lib(draft))
    ds = RESOLVED.dataset(dataset)
    if ds.kind != "synthetic":
        inputs["data"] = ds.path
    return inputs


# the timed collects, (algorithm, executor): one job per dataset and shard runs them all, interleaved
TIMED = timed_collects(CFG)


def timed_outputs():
    """The shard tables of every timed collect (wildcards dataset and shard left in)."""
    return [str(PATHS.collect_shard("{dataset}", a, e, "{shard}", t)) for a, e in TIMED for t in COLLECT_TABLES]


# the collect variants whose executors run in one job, interleaved (heterospec.config.collect_variants.paired_variants)
PAIRED = paired_variants(CFG)


def variant_outputs():
    """The shard tables of a paired variant under every executor (wildcards dataset, algorithm and shard left in)."""
    return [
        str(PATHS.collect_shard("{dataset}", "{algorithm}", e, "{shard}", t))
        for e in CFG.collect.executors
        for t in COLLECT_TABLES
    ]


def collect_shards(wildcards):
    n = CFG.collect.shards
    return [
        str(PATHS.collect_shard(wildcards.dataset, wildcards.algorithm, wildcards.executor, f"{i}of{n}", t))
        for i in range(n)
        for t in COLLECT_TABLES
    ]


def collections(plain=False):
    """Every collect's problems table (``plain``: only the algorithm configs', which the replay prices and the
    validation fits on; a variant of collect.variants draws rows of Table III and collect_summary)."""
    return [
        str(PATHS.collect_table(d, a, e, "problems"))
        for d in CFG.datasets
        for a in CFG.collect.algorithms
        if not (plain and is_variant(CFG, a))
        for e in collect_executors(CFG, a)
    ]


def evaluations():
    return [str(PATHS.evaluation(d, m)) for d in CFG.datasets for m in EVAL_METHODS]


def quality_report():
    """The trio's quality report, for trained trios only (hub checkpoints are not trained on the task)."""
    return [str(PATHS.model_quality)] if len(TRAINED) == len(ROLES) else []


REPLAY_TRACES = Path(CFG.replay.traces)
if not REPLAY_TRACES.is_dir():
    print(
        f"heterospec: replay of the artifact traces skipped: {REPLAY_TRACES} not found "
        "(set HETEROSPEC_ARTIFACT to a HeteroReason checkout)",
        file=sys.stderr,
    )


def replay_outputs():
    """The replay of the artifact's traces, when a checkout of the artifact is configured."""
    return [str(PATHS.replay_results), str(PATHS.replay_artifact)] if REPLAY_TRACES.is_dir() else []


def validation_outputs():
    """The simulator against the run's own collect traces (needs the sequential executor's calls to fit on)."""
    if not collections(plain=True) or "sequential" not in CFG.collect.executors:
        return []
    return [str(PATHS.replay_validation), str(PATHS.replay_validation_aggregate), str(PATHS.replay_fit)]


def serving_outputs():
    """The serving run and the load replay's validation against it (serving.enabled)."""
    if not CFG.serving.enabled:
        return []
    return [str(PATHS.serving_validation), str(PATHS.serving_outputs)]


def serving_reference():
    """The sequential collect of the served algorithm: what every served request's outputs must equal."""
    if not CFG.serving.enabled:
        return []
    return [
        str(PATHS.collect_table(serving_dataset(CFG), CFG.serving.algorithm, "sequential", t))
        for t in ("problems", "calls", "steps")
    ]


def ours_outputs():
    """Our sequential collect traces replayed on the paper's systems (heterospec.replay.grid.ours), for Figure 8."""
    if not validation_outputs() or not ours_profiles(CFG):
        return []
    return [str(ours_path(PATHS))]


def tau_sweep_outputs():
    """Token-level speculation priced over tau on the paper's systems, for our traces and the artifact's."""
    if not (ours_outputs() or replay_outputs()) or not ours_profiles(CFG):
        return []
    if CFG.replay.token_speculation.tau.get(str(CFG.replay.token_speculation.strategy)) is None:
        return []
    return [str(sweep_path(PATHS))]


def tau_sweep_inputs(wildcards):
    """Our sequential collect traces when the run collects (heterospec.replay.grid.tau_sweep.sweeps_ours; an experiment
    without collect, artifact_replay, has none), the artifact's imported traces when the run imports them, and the
    HLS performance model when a profile prices with it."""
    ours = collections(plain=True) if sweeps_ours(CFG) else []
    events = [str(PATHS.replay_events(ts)) for ts in CFG.replay.trace_sets] if replay_outputs() else []
    hls = [str(PATHS.hls_perf)] if "hls" in ours_profiles(CFG) else []
    return ours + events + hls


def paper_outputs():
    """The paper's Table III beside ours (empty without the artifact's reference file), whenever table3 is drawn."""
    return [str(paper_table3_path(PATHS))] if evaluations() and collections() else []


def replay_trace_files(wildcards):
    return sorted(str(p) for p in (REPLAY_TRACES / wildcards.trace_set).rglob("*.json"))


def replay_inputs(wildcards):
    inputs = [str(PATHS.replay_events(ts)) for ts in CFG.replay.trace_sets]
    if "hls" in CFG.replay.profiles:
        inputs.append(str(PATHS.hls_perf))
    if "measured" in CFG.replay.profiles:  # the fit on the run's own collect traces
        inputs.append(str(PATHS.replay_fit))
    return inputs


def load_outputs():
    """The load replay (load.enabled): on the artifact's traces when the run imports them, else on our own
    sequential collects of RSD and BRSD."""
    if not CFG.load.enabled or not (replay_outputs() or validation_outputs()):
        return []
    return [str(PATHS.load_requests), str(PATHS.load_points), str(PATHS.load_capacity)]


def design_space_outputs():
    """The FPGA draft's design space under load (design_space.enabled), on the load replay's traces."""
    if not CFG.design_space.enabled or not (replay_outputs() or validation_outputs()):
        return []
    return [str(PATHS.load_design_space)]


def load_inputs(wildcards):
    """Its traces (the artifact's imported ones, or our collects), and what its profile reads."""
    if str(CFG.load.traces) == "artifact" or (str(CFG.load.traces) == "auto" and replay_outputs()):
        inputs = [str(PATHS.replay_events(ts)) for ts in ("with_bt", "no_bt")]
    else:
        inputs = collections(plain=True)
    if CFG.load.profile == "hls":
        inputs.append(str(PATHS.hls_perf))
    if CFG.load.profile == "measured":  # the fit on our collects; the batching curve from the price sweep
        inputs += [str(PATHS.replay_fit), str(PATHS.batch_prices)]
    return inputs


def hls_outputs():
    """The W8A8 draft's quality, the HLS models, the KVMU synthesis, per board the vendor-flow status and the
    C simulation (for drafts trained here: a 0.5B draft is far too slow to simulate in plain C++). ``hls.enabled=false``
    leaves them out (the replay's ``hls`` profile still builds the performance model it reads)."""
    if not CFG.hls.enabled:
        return []
    out = [str(PATHS.quantize_quality), str(PATHS.hls_perf), str(PATHS.kvmu_synth)]
    out += [str(PATHS.hls_vendor(b)) for b in CFG.hls.boards]
    if CFG.models.draft.source == "train":
        out += [str(PATHS.hls_csim(b)) for b in CFG.hls.boards]
    return out


def dfvg_methods():
    """DFVG's baselines (plain target greedy: the reference; Hugging Face assisted generation) and strategies."""
    return ["target_greedy", "hf_assisted", *CFG.dfvg.strategies]


def dfvg_outputs():
    """DFVG's generations and rounds per method and their replay (experiments with dfvg.enabled only)."""
    if not CFG.dfvg.enabled:
        return []
    return [str(PATHS.dfvg_generations(m)) for m in dfvg_methods()] + [str(PATHS.dfvg_replay)]


def dfvg_inputs(wildcards):
    inputs = {"manifests": [str(PATHS.model_manifest(r)) for r in ("draft", "target")]}
    if wildcards.dfvg_method != "target_greedy":
        inputs["reference"] = str(PATHS.dfvg_generations("target_greedy"))
    return inputs


def dfvg_replay_inputs():
    inputs = [str(PATHS.dfvg_rounds(m)) for m in dfvg_methods()]
    if "hls" in CFG.dfvg.replay.profiles:
        inputs.append(str(PATHS.hls_perf))
    return inputs


def stage_outputs():
    """Every stage output the catalogue is built from: the run's, or in a sweep the record of its runs."""
    if SWEEP:
        return [str(SWEEP_POINTS)]
    return [
        *evaluations(),
        *quality_report(),
        *replay_outputs(),
        *collections(),
        *validation_outputs(),
        *serving_outputs(),
        *hls_outputs(),
        *dfvg_outputs(),
        *ours_outputs(),
        *tau_sweep_outputs(),
        *paper_outputs(),
        *load_outputs(),
        *design_space_outputs(),
    ]


# --config sweep="key=v1,v2,...": one run per value (each a nested `snakemake` of the same workflow with the
# value as one more override, run one after another), then one sweep view and figure across them.
if SWEEP:
    SWEEP_RUN = sweep_name(CFG.name, config["sweep"])
    SWEEP_POINTS = PATHS.root.parent / SWEEP_RUN / "sweep" / "points.parquet"
    POINTS, POINT_VALUES = {}, {}  # point run -> its overrides (the base run's plus key=value), -> key=value
    try:
        for value in SWEEP[1]:
            point = [o for o in OVERRIDES if not o.startswith("name=")] + [f"{SWEEP[0]}={value}"]
            if config.get("name"):
                point.append(f"name={config['name']}-{value}")
            name = str(compose_config(point).name)
            POINTS[name], POINT_VALUES[name] = point, f"{SWEEP[0]}={value}"
    except UserError as e:
        print(f"heterospec: --config sweep: {e}", file=sys.stderr)
        sys.exit(2)


def sweep_point_command(wildcards, threads):
    point = POINTS[wildcards.point]
    experiment = point[0].removeprefix("experiment=")
    args = [
        "--cores",
        str(threads),
        "--nolock",
        "--config",
        f"experiment={experiment}",
        "overrides=" + " ".join(shlex.quote(o) for o in point[1:] if not o.startswith("name=")),
    ]
    args += [f"name={o.removeprefix('name=')}" for o in point if o.startswith("name=")]
    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "snakemake", "-s", workflow.main_snakefile, *args])


# The figures each kind of output feeds (heterospec.report.figures.FIGURES draws them from the views)
def replays():
    return replay_outputs() + ours_outputs()


FIGURE_SOURCES = {
    "table3": paper_outputs,
    "figure8": replays,
    "figure10": replays,
    "time_shares": replays,
    "methods": replays,
    "tau_sweep": tau_sweep_outputs,
    "load_latency": load_outputs,
    "load_capacity": load_outputs,
    "load_utilisation": load_outputs,
    "load_design_space": design_space_outputs,
    "accuracy_latency": ours_outputs,
    "replay_validation": validation_outputs,
    "serving_load": serving_outputs,
    "dfvg_tau": dfvg_outputs,
    "dfvg_speedups": dfvg_outputs,
    "dfvg_designs": dfvg_outputs,
    "hls_latency": hls_outputs,
    "hls_breakdown": hls_outputs,
    "kvmu_resources": hls_outputs,
}
FIGURE_RUN = SWEEP_RUN if SWEEP else CFG.name
FIGURE_DIR = PATHS.root.parent / FIGURE_RUN / "figures"
FIGURES = ["sweep"] if SWEEP else [f for f, source in FIGURE_SOURCES.items() if source()]
if not SWEEP and len(FIGURES) < len(FIGURE_SOURCES):
    print(
        f"heterospec: figures skipped (this run has no data for them): "
        f"{', '.join(f for f in FIGURE_SOURCES if f not in FIGURES)}",
        file=sys.stderr,
    )


def figure_files(name):
    return [str(FIGURE_DIR / f"{name}.{ext}") for ext in ("png", "svg", "csv")]


def run_outputs():
    if SWEEP:
        return [str(SWEEP_POINTS), *[f for name in FIGURES for f in figure_files(name)], str(DUCKDB_FILE)]
    return [str(PATHS.config), *stage_outputs(), *[f for name in FIGURES for f in figure_files(name)], str(DUCKDB_FILE)]


wildcard_constraints:
    role="draft|prm|target",
    method="|".join(EVAL_METHODS),
    dataset=r"[A-Za-z0-9_]+",
    trace_set=r"[A-Za-z0-9_.-]+",
    algorithm=r"[A-Za-z0-9_]+",
    executor="sequential|step_ahead",
    shard=r"\d+of\d+",
    bench="math500|gsm8k|gaokao2023en|olympiadbench",
    model_key=r"[0-9a-f]{12}",
    board="|".join(CFG.hls.boards),
    dfvg_method="|".join(dfvg_methods()),
