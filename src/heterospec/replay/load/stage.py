"""The load replay stage: per system x method, the latency against offered load and the capacity at the SLO.

    python -m heterospec.replay load [overrides]        every load.systems x load.methods: results/<run>/load/
    python -m heterospec.replay load-point [overrides]  one point of load.arrivals per system x method, printed

Methods (``load.methods``) and what replays them: ``target`` the target alone (``target_only``), ``target_sd`` with
token-level speculation (``target_sd``), ``rsd`` / ``brsd`` step-level speculation (``step_ahead`` on a system whose
draft is a GPU, ``hetero`` with an FPGA draft) and ``brsd_sd`` BRSD with token-level speculation in the target's
writes (``step_ahead_sd`` / ``hetero_sd``), on the BRSD traces (RSD's for ``rsd``): the artifact's Config1 traces
when the run imported them (``with_bt``, ``no_bt``), else the run's own sequential collect traces (``ours_brsd``,
``ours_rsd``).

Order of work: every bad setting is one line before anything runs (the devices' plans, the SLO against the unloaded
latencies); then each system x method's capacity search; then more of its latency curve, at fractions of its
capacity (of the system's best where it has none).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa
from omegaconf import OmegaConf

from heterospec.arrivals import Arrivals
from heterospec.config.hardware import System
from heterospec.config.schema import LoadConfig
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.simulator.latency import LatencyProfile
from heterospec.replay.load import LoadRun, replay_arrivals, replay_requests, serial_plan
from heterospec.reasoning.speculation_policy import make_policy
from heterospec.replay.load.admission import Admission, admission, one_by_one
from heterospec.replay.load.capacity import search
from heterospec.replay.load.devices import DevicePlan, PricingInputs, plan_devices, settings_of
from heterospec.replay.load.load_metrics import (LOAD_CAPACITY_SCHEMA, LOAD_POINTS_SCHEMA, LOAD_REQUESTS_SCHEMA,
                                                 percentile, percentile_interval, request_rows)
from heterospec.replay.simulator.engines import RESOURCES
from heterospec.replay.simulator.problem import TracedProblem
from heterospec.replay.simulator.system import Ctx, SystemParams
from heterospec.store.parquet import write_parquet

log = logging.getLogger("heterospec.replay.load")

LOAD_METHODS = {  # method -> (the step-level traces it replays, schedule with a GPU draft, with an FPGA draft)
    "target": ("brsd", "target_only", "target_only"),
    "target_sd": ("brsd", "target_sd", "target_sd"),
    "rsd": ("rsd", "step_ahead", "hetero"),
    "brsd": ("brsd", "step_ahead", "hetero"),
    "brsd_sd": ("brsd", "step_ahead_sd", "hetero_sd"),
}
STEP_METHODS = ("rsd", "brsd")         # step-level speculation, the methods a speculation policy adapts
ADAPTIVE = ("threshold", "goodput")   # load-aware speculation: <rsd|brsd>_<policy> (heterospec.reasoning.speculation_policy)
ARTIFACT_SETS = {"brsd": "with_bt", "rsd": "no_bt"}   # the artifact's Config1 trace sets
OURS_SETS = {"brsd": "ours_brsd", "rsd": "ours_rsd"}  # our sequential collect traces, as replay_ours names them


@dataclass
class SystemMethod:
    """One system x method: its problems, schedule, profile and devices."""
    system: System
    method: str
    trace_set: str
    schedule: Any
    problems: list
    profile: LatencyProfile
    plan: DevicePlan
    speculation: Any = None
    recorded: bool | None = None

    @property
    def keys(self) -> dict:
        return dict(trace_set=self.trace_set, system=self.system.name, method=self.method,
                    schedule=self.schedule.name, profile=self.profile.name)

    def ctx(self) -> Ctx:
        return Ctx(self.profile, SystemParams.of(self.system), self.recorded, self.speculation)


# ----------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class LoadPlan:
    """The load stage's settings, resolved once from the composed config: the ``load`` section as its schema's type
    (:class:`heterospec.config.schema.LoadConfig`, values typed and range-checked) and the run's name. Everything
    below the stage's entry reads this, not the config."""
    run: str
    load: LoadConfig


def load_plan(cfg: Any) -> LoadPlan:
    """The plan of ``cfg``; one line for settings that contradict each other."""
    plan = LoadPlan(str(cfg.name), OmegaConf.to_object(cfg.load))
    if plan.load.max_requests < plan.load.requests:
        raise UserError(f"load.max_requests: {plan.load.max_requests}, expected at least load.requests "
                        f"({plan.load.requests})")
    return plan


def method_parts(method: str) -> tuple[str, str | None] | None:
    """A load method as (its static method, its speculation policy or None): ``brsd_goodput`` -> (brsd, goodput);
    None for a name that is neither a static method nor a step-level one with a policy."""
    if method in LOAD_METHODS:
        return method, None
    base, _, policy = method.rpartition("_")
    if base in STEP_METHODS and policy in ADAPTIVE:
        return base, policy
    return None


def method_names() -> list[str]:
    return list(LOAD_METHODS) + [f"{b}_{p}" for b in STEP_METHODS for p in ADAPTIVE]


def which_traces(cfg: Any, paths: RunPaths) -> str:
    """``load.traces``: artifact or ours (auto: the artifact's when the run imported both of its trace sets)."""
    mode = cfg.load.traces
    if mode not in ("auto", "artifact", "ours"):
        raise UserError(f"load.traces: '{mode}', expected auto, artifact or ours")
    if mode == "auto":
        return "artifact" if all(paths.replay_events(ts).exists() for ts in ARTIFACT_SETS.values()) else "ours"
    return mode


def trace_sets(cfg: Any, paths: RunPaths, families: set[str]) -> dict[str, tuple[str, list[TracedProblem]]]:
    """family (rsd, brsd) -> (trace set, its problems) for the families the methods need."""
    from heterospec.replay.traces.problems import run_problems
    names = ARTIFACT_SETS if which_traces(cfg, paths) == "artifact" else OURS_SETS
    hint = "; or load.traces=ours" if names is ARTIFACT_SETS else ""
    problems = run_problems(cfg, paths, [names[fam] for fam in families], hint)
    return {fam: (names[fam], problems[names[fam]]) for fam in families}


def max_context(problems: list[TracedProblem], with_prompt: bool) -> int:
    """The longest context a request reaches: its last draft step or target write (with the prompt when the profile
    counts it)."""
    out = 1
    for p in problems:
        extra = p.prompt_tokens if with_prompt else 0
        for i in range(len(p.draft_tokens)):
            out = max(out, p.kv_verify[i] + p.draft_tokens[i] + extra, p.kv_target[i] + p.target_tokens[i] + extra)
    return out


def prm_reads(p: TracedProblem, whole_context: bool, with_prompt: bool) -> list[int]:
    """The tokens each of a problem's PRM scores reads, as the schedules call it: every draft step's score (its
    context ``kv_verify + draft_tokens``) and, where the PRM scores the target's step after a rejection, that one's
    (``kv_target + target_tokens``). ``whole_context``: the profile re-scores the whole context (with the prompt when
    it counts it); else a prefix cache leaves only the tokens past the verified prefix (``kv_verify``)."""
    extra = p.prompt_tokens if with_prompt else 0
    scored = p.target_scored or [True] * len(p.draft_tokens)
    reads = []
    for i, d in enumerate(p.draft_tokens):
        reads.append(p.kv_verify[i] + d + extra if whole_context else d)
        if p.outcome[i] != "accept" and scored[i]:
            ctx = p.kv_target[i] + p.target_tokens[i]
            reads.append(ctx + extra if whole_context else ctx - p.kv_verify[i])
    return [r for r in reads if r > 0]


def step_tokens(problems: list[TracedProblem], whole_context: bool = False, with_prompt: bool = False) -> float:
    """A PRM pass's tokens per sequence: the mean over the problems' scores of what one reads (:func:`prm_reads`;
    the paper and measured profiles re-score the whole context, roofline and hls with a prefix cache the new step)."""
    reads = [r for p in problems for r in prm_reads(p, whole_context, with_prompt)]
    return sum(reads) / len(reads) if reads else 1.0


def prm_rescores(profile: LatencyProfile | None, kind: str) -> bool:
    """Whether a PRM score re-reads the whole context under the profile: the paper formulas and the measured fit
    price the whole context, roofline and hls read only the new tokens through a prefix cache (``prefix_cache``)."""
    return not profile.prefix_cache if profile is not None else kind not in ("roofline", "hls")


def profile_kind(name: str) -> str:
    from heterospec.replay.profiles.paper import PAPER_PROFILES
    return "paper" if name in PAPER_PROFILES else name


def device_plan(cfg: Any, paths: RunPaths, system: System, profile_name: str, problems: list[TracedProblem],
                profile: LatencyProfile | None = None, batch_prices: pa.Table | None = None) -> DevicePlan:
    """The devices of ``system`` under load as the ``load`` section configures them, priced for ``profile_name``
    (the paper profiles' batch curves and memory are the paper's Config1 models'; the others the run's models).
    The measured profile's batch curves are fitted from ``batch_prices`` (BATCH_PRICES_SCHEMA), else from
    ``results/<run>/replay/batch_prices.parquet`` when it exists."""
    from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
    from heterospec.replay.load.prices import fit_batch_prices
    kind = profile_kind(profile_name)
    batch_fit = None
    prices = paths.batch_prices
    if kind == "measured" and batch_prices is not None:
        batch_fit = fit_batch_prices(batch_prices, "batch prices")
    elif kind == "measured" and prices.exists():
        from heterospec.store.parquet import read_parquet
        batch_fit = fit_batch_prices(read_parquet(prices, BATCH_PRICES_SCHEMA), str(prices))
    inputs = pricing_inputs(cfg, paths, kind, problems, profile, batch_fit)
    return plan_devices(system, settings_of(cfg.load), inputs)


def pricing_inputs(cfg: Any, paths: RunPaths, kind: str, problems: list[TracedProblem],
                   profile: LatencyProfile | None = None, batch_fit: dict | None = None) -> PricingInputs:
    """What the devices of a system are priced from under profile ``kind`` (:class:`PricingInputs`)."""
    models = _config1_models() if kind == "paper" else cfg.models
    with_prompt = profile.context_includes_prompt if profile is not None else kind != "paper"
    checkpoints = None if kind == "paper" else {r: paths.model_checkpoint(r) for r in ("draft", "prm", "target")}
    return PricingInputs(models=models, kind=kind, hls=cfg.hls, batch_fit=batch_fit,
                         prm_tokens=step_tokens(problems, prm_rescores(profile, kind), with_prompt),
                         max_context=max_context(problems, with_prompt),
                         checkpoints=checkpoints, overheads=dict(cfg.replay.call_overhead_ms))


@lru_cache(maxsize=1)
def _config1_models():
    """The paper's Config1 models (what the paper profiles price)."""
    from heterospec.config import compose_config
    return compose_config(["models=config1"]).models


def make_jobs(cfg: Any, paths: RunPaths, overrides: list[str], systems: list[System] | None = None,
              methods: list[str] | None = None, key: str = "load.methods") -> list[SystemMethod]:
    """Every load.systems x load.methods (or ``systems`` x ``methods``, named ``key`` in errors), with its devices
    planned (so a bad bound fails here, before any run)."""
    from heterospec.config.hardware import system as hw_system
    from heterospec.replay.grid.entries import compose_schedule
    from heterospec.replay.grid.stage import prefetch_outcome, profile_factory, token_speculation
    methods = list(cfg.load.methods if methods is None else methods)
    bad = [m for m in methods if method_parts(m) is None]
    if bad:
        raise UserError(f"{key}: unknown {bad}; choose from {method_names()}")
    if systems is None:
        systems = [hw_system(name, cfg) for name in cfg.load.systems]
    if not methods or not systems:
        raise UserError(f"{key} and load.systems: nothing to replay (both need an entry)")
    sets = trace_sets(cfg, paths, {LOAD_METHODS[method_parts(m)[0]][0] for m in methods})
    factory = profile_factory(cfg.load.profile, cfg, paths)
    spec = token_speculation(cfg) if any(m.endswith("_sd") for m in methods) else None
    from heterospec.replay.schedules import get_schedule
    schedules: dict[str, Any] = {}
    out = []
    policies = {p: make_policy(p, dict(cfg.load.speculation_policy.limits)) for p in
                {method_parts(m)[1] for m in methods} - {None}}

    def schedule(name: str) -> Any:
        if name not in schedules:
            schedules[name] = get_schedule(compose_schedule(cfg, overrides, name, key))
        return schedules[name]
    for system in systems:
        profile = factory(system)
        for method in methods:
            base, policy = method_parts(method)
            fam, gpu, fpga = LOAD_METHODS[base]
            ts, probs = sets[fam]
            plan = device_plan(cfg, paths, system, cfg.load.profile, probs, profile)
            job = SystemMethod(system, method, ts, schedule(fpga if system.draft.kind == "fpga" else gpu), probs,
                               profile, plan, spec, prefetch_outcome(cfg))
            if policy is not None:
                job.schedule = admission(policies[policy], job.schedule, schedule(LOAD_METHODS["target"][1]), probs,
                                         job.ctx())
            out.append(job)
    return out


# ----------------------------------------------------------------------------- runs
@dataclass
class Alone:
    """A job's problems each alone on an idle system (the single-request replay): latencies (s), each device's
    mean busy time per request at batch 1 (ms; the link's too), and the share of problems the load replay gives the
    same latency (1e-9 relative) at batch 1 with the requests far apart."""
    latencies: list
    busy_ms: dict
    same: float

    @property
    def busiest_ms(self) -> float:
        """The busiest device's mean busy time per request."""
        return max(self.busy_ms.values(), default=0.0)


def alone(job: SystemMethod) -> Alone:
    """The job's problems alone on an idle system (an admission's: under the branch an idle system takes). Under an
    admission a device's busy time per request is the lesser of its two branches' (each request takes one of them,
    so the hard limits bound every mix of branches)."""
    if isinstance(job.schedule, Admission):
        runs = job.schedule.alone
        lat = runs[job.schedule.idle_branch()][0]
        busy = {d: min(b[d] for _, b in runs.values()) for d in RESOURCES}
    else:
        lat, busy, _ = one_by_one(job.problems, job.schedule, job.ctx())
    gap = max(lat, default=0.0) + 1.0
    far = replay_requests([(i * gap, p) for i, p in enumerate(job.problems)], job.system, job.schedule,
                          job.profile, serial_plan(), speculation=job.speculation, recorded=job.recorded)
    same = sum(abs(r.latency / 1e3 - x) <= 1e-9 * x for r, x in zip(far.requests, lat)) / max(len(lat), 1)
    return Alone(lat, busy, same)


def hard_limits(job: SystemMethod, solo: Alone) -> dict[str, float]:
    """Per device that works for the job, the most requests per second it can serve whatever the load: its lanes
    over its busy time per request at its best batch, ``max_b b / (pace x curve(b))`` sequences per batch-1 time,
    the curve read at context 0 (a longer context batches no better, so this bounds every mix from above)."""
    out = {}
    for d, busy in solo.busy_ms.items():
        if busy <= 0:
            continue
        b = job.plan.bounds[d]
        curve = job.plan.curves[d]
        per_pass = max(k / curve(k, 0.0) for k in range(1, max(b.max_batch, 1) + 1))
        out[d] = b.lanes * per_pass / (b.pace * busy) * 1e3
    return out


def slo_limits(plan: LoadPlan, alone: dict) -> dict:
    """The SLO in seconds per system/method (``alone``: their unloaded latencies): ``load.slo.seconds``, else
    ``multiple`` x the reference's unloaded percentile (``reference: own``: each one's own). One line when it lies
    below the reference's unloaded latency (no load could meet it)."""
    slo = plan.load.slo
    ref, q = slo.reference, slo.percentile
    if ref != "own" and ref not in alone:
        raise UserError(f"load.slo.reference: '{ref}' is not one of the systems/methods replayed ({sorted(alone)}) "
                        f"nor 'own'")
    base = {k: percentile(v, q) for k, v in alone.items()}
    if slo.seconds is not None:
        floor = min(base.values()) if ref == "own" else base[ref]
        if not slo.seconds >= floor:
            raise UserError(f"load.slo.seconds: {slo.seconds} s is below the unloaded P{q:g} latency "
                            f"({floor:.3f} s{'' if ref == 'own' else ' of ' + ref}); no load can meet it")
        return dict.fromkeys(alone, slo.seconds)
    return {k: slo.multiple * base[k if ref == "own" else ref] for k in alone}


EARLY_MISS = 1.5   # a load point short of its full size misses only when its percentile's interval lies this far out


def point_size(plan: LoadPlan, rate: float | None, solo: Alone | None, counted: int | None = None) -> tuple[int, int]:
    """(warm-up, counted) requests of a load point: ``counted`` (default ``load.requests``) after the warm-up ones:
    the ``load.warmup`` share, or as many as arrive during the unloaded P99 latency (the system fills before it is
    measured), at most twice the counted ones (far past capacity the percentile shows it anyway). The size does not
    grow with the rate, so every rate of a search is judged on as many requests."""
    n = counted or plan.load.requests
    share = math.ceil(plan.load.warmup * n / (1 - plan.load.warmup))
    fill = math.ceil(rate * percentile(solo.latencies, 99)) if rate and solo is not None and solo.latencies else 0
    return min(2 * n, max(share, fill)), n


def run_point(job: SystemMethod, plan: LoadPlan, arrivals: Arrivals, solo: Alone | None = None,
              counted: int | None = None) -> LoadRun:
    """A load point of ``arrivals`` sized by :func:`point_size`; a timestamps file: every time in it, the first
    ``load.warmup`` share not counted."""
    if arrivals.kind == "timestamps":
        from heterospec.arrivals import read_timestamps
        total = len(read_timestamps(arrivals.path))
        warm = int(plan.load.warmup * total)
    else:
        warm, n = point_size(plan, arrivals.rate if arrivals.kind == "poisson" else None, solo, counted)
        total = warm + n
    return replay_arrivals(arrivals, job.problems, total, job.system, job.schedule, job.profile, job.plan,
                           speculation=job.speculation, recorded=job.recorded, warmup=warm)


def steady_point(job: SystemMethod, plan: LoadPlan, rate: float, seed: int, slo_s: float, solo: Alone,
                 limit: float = math.inf) -> tuple[bool, float, LoadRun]:
    """Whether ``rate`` meets the SLO in a steady state: (meets, the percentile, the point). The point first counts
    ``load.requests`` requests and doubles up to ``load.max_requests``: it misses as soon as its percentile's 95 %
    interval lies above ``EARLY_MISS`` x the SLO (a clear miss: the interval assumes independent latencies, and a
    queue's come in bursts, so a short sample near the SLO decides nothing); it meets only at ``load.max_requests``
    counted requests, with its percentile within the SLO, the system keeping up (:mod:`.load_metrics`: throughput
    equal to the arrival rate within the count's interval, no queue growth), so a slight overload has the whole window
    to show, and its realised arrival rate below the hard ``limit`` (a sample that arrived faster than any device
    can serve is a queue filling, not a steady state)."""
    q = plan.load.slo.percentile
    n, top = plan.load.requests, plan.load.max_requests
    while True:
        run = run_point(job, plan, Arrivals("poisson", rate=rate, seed=seed, key="load.arrivals"), solo, n)
        lat = [r.latency / 1e3 for r in run.requests[run.counted_from:]]
        p = percentile(lat, q)
        lo, _ = percentile_interval(lat, q)
        if lo > EARLY_MISS * slo_s:
            return False, p, run
        if n >= top:
            return p <= slo_s and run.point["keeps_up"] and run.point["offered_rps"] < limit, p, run
        n = min(2 * n, top)


def capacity_job(job: SystemMethod, plan: LoadPlan, slo_s: float, solo: Alone) -> tuple[list, dict]:
    """The capacity search of one job under each of ``load.seeds`` arrival seeds: its load points (purpose
    ``search``, each with its requests) and the capacity row (the least seed's: the rate every seed sustained, with
    the most beside it). Each search starts at the busiest device's batch-1 rate (batching lets it serve more: the search
    doubles from there) and stays below the job's hard limit (:func:`hard_limits`)."""
    q = plan.load.slo.percentile
    base = percentile(solo.latencies, q)
    start = 1e3 / solo.busiest_ms if solo.busiest_ms > 0 else 1.0
    limits = hard_limits(job, solo)
    limit_device = min(limits, key=limits.get) if limits else "none"
    limit = limits.get(limit_device, math.inf)
    seeds = [plan.load.seed + k for k in range(plan.load.seeds)]
    found = {}
    if base <= slo_s:
        for seed in seeds:
            found[seed] = search(lambda rate, s=seed: steady_point(job, plan, rate, s, slo_s, solo, limit), start,
                                 plan.load.search_steps, limit)
    entries = [_entry(job, plan, run, "search", rate, seed) for seed, f in found.items() for rate, _, _, run in f.tried]
    realised = {seed: (f.best.point["offered_rps"] if f.best else 0.0) for seed, f in found.items()}
    ranked = sorted(realised, key=lambda k: (realised[k], k))
    mid = ranked[0] if ranked else None   # the rate every seed sustained
    best = found[mid].best if mid is not None else None
    devs = ("draft", "prm", "target")
    util = {d: (best.point[f"util_{d}"] if best else 0.0) for d in devs}
    wait = {d: (best.point[f"queue_{d}_ms"] if best else 0.0) for d in devs}
    caps = list(realised.values()) or [0.0]
    # the bottleneck: where requests queue longest (a batching device is busy whenever it holds anything)
    row = dict(run=plan.run, **job.keys, percentile=q, slo_s=slo_s, unloaded_s=base, unloaded_same=solo.same,
               capacity_rps=realised[mid] if mid is not None else 0.0, capacity_lo_rps=min(caps),
               capacity_hi_rps=max(caps), seeds=len(seeds), limit_rps=limit, limit_device=limit_device,
               p99_s=best.point["p99_s"] if best else None, p99_lo_s=best.point["p99_lo_s"] if best else None,
               p99_hi_s=best.point["p99_hi_s"] if best else None, counted=best.point["counted"] if best else 0,
               goodput_tok_s=best.point["goodput_tok_s"] if best else 0.0,
               bottleneck=max(devs, key=lambda d: (wait[d], util[d])) if best else
               "none: unloaded latency above the SLO" if base > slo_s else "none: no rate met the SLO",
               **{f"util_{d}": v for d, v in util.items()}, **{f"queue_{d}_ms": v for d, v in wait.items()},
               evaluations=len(entries), devices=job.plan.describe())
    if row["capacity_rps"] > limit:
        raise RuntimeError(f"{job.system.name}/{job.method}: capacity {row['capacity_rps']:.4g} req/s above its hard "
                           f"limit {limit:.4g} ({limit_device})")
    return entries, row


def curve_job(job: SystemMethod, plan: LoadPlan, rates: list[float], solo: Alone) -> list:
    """Load points at ``rates`` (purpose ``curve``, the first arrival seed, ``load.max_requests`` counted), each with
    its requests."""
    seed = plan.load.seed
    return [_entry(job, plan, run_point(job, plan, Arrivals("poisson", rate=r, seed=seed, key="load.arrivals"), solo,
                                        plan.load.max_requests), "curve", r, seed) for r in rates]


def _entry(job: SystemMethod, plan: LoadPlan, run: LoadRun, purpose: str, rate: float | None, seed: int = 0) \
        -> tuple[dict, list]:
    """(point row, its request rows) as plain values (a worker process sends them back); points numbered later."""
    keys = dict(run=plan.run, **job.keys)
    point = dict(**keys, point=0, purpose=purpose, arrivals="poisson", rate_rps=rate, clients=None, seed=seed,
                 **run.point)
    return point, request_rows(run.requests, run.counted_from, keys, 0)


def _in_workers(fn, items: list, workers: int, done=None) -> list:
    """``fn`` over ``items``, in forked processes when ``workers`` > 1 (same results, same order); ``done(i, result)``
    is called in this process as each result comes back (in order), for progress lines."""
    done = done or (lambda i, r: None)
    if workers <= 1 or len(items) < 2:
        out = []
        for i, x in enumerate(items):
            out.append(fn(x))
            done(i, out[-1])
        return out
    import multiprocessing as mp
    _WORK[:] = [fn, items]
    try:
        with mp.get_context("fork").Pool(min(workers, len(items))) as pool:
            out = []
            for i, r in enumerate(pool.imap(_call, range(len(items)), chunksize=1)):
                out.append(r)
                done(i, r)
            return out
    finally:
        _WORK.clear()


_WORK: list = []


def _call(i: int):
    return _WORK[0](_WORK[1][i])


def _tables(entries: list) -> tuple[pa.Table, pa.Table]:
    """Points and requests of every entry, the points numbered in order."""
    points, requests = [], []
    for point, reqs in entries:
        point["point"] = len(points)
        for r in reqs:
            r["point"] = point["point"]
        points.append(point)
        requests += reqs
    return (pa.Table.from_pylist(points, schema=LOAD_POINTS_SCHEMA),
            pa.Table.from_pylist(requests, schema=LOAD_REQUESTS_SCHEMA))


def run_stage(cfg: Any, paths: RunPaths, overrides: list[str], workers: int | None = None) -> pa.Table:
    """Capacity and latency curves for every load.systems x load.methods (module docstring), in ``workers``
    processes (default ``load.workers``)."""
    t0 = time.perf_counter()
    plan = load_plan(cfg)
    workers = workers or plan.load.workers
    jobs = make_jobs(cfg, paths, overrides)
    solo = _in_workers(alone, jobs, workers)
    slo = slo_limits(plan, {f"{j.system.name}/{j.method}": a.latencies for j, a in zip(jobs, solo)})

    def searched(k: int, result) -> None:
        row = result[1]
        print(f"[replay load] capacity {k + 1}/{len(jobs)}: {jobs[k].system.name}/{jobs[k].method} "
              f"{row['capacity_rps']:.4g} req/s over {plan.load.seeds} seeds ({time.perf_counter() - t0:.0f} s)",
              flush=True)

    print(f"[replay load] capacity search: {len(jobs)} systems x methods x {plan.load.seeds} arrival seeds, points of "
          f"{plan.load.requests} doubling to {plan.load.max_requests} requests, {workers} worker(s)", flush=True)
    found = _in_workers(lambda k: capacity_job(jobs[k], plan, slo[f"{jobs[k].system.name}/{jobs[k].method}"],
                                               solo[k]), list(range(len(jobs))), workers, searched)
    top: dict[str, float] = {}
    for job, (_, row) in zip(jobs, found):
        top[job.system.name] = max(top.get(job.system.name, 0.0), row["capacity_rps"])
    # the curve: fractions of each method's own capacity (of the system's best where it has none)
    scale = [row["capacity_rps"] or top[job.system.name] for job, (_, row) in zip(jobs, found)]
    curves = _in_workers(lambda k: curve_job(jobs[k], plan, [f * scale[k] for f in plan.load.curve if scale[k] > 0],
                                             solo[k]), list(range(len(jobs))), workers)
    points, requests = _tables([e for f, c in zip(found, curves) for e in f[0] + c])
    capacity = pa.Table.from_pylist([f[1] for f in found], schema=LOAD_CAPACITY_SCHEMA)
    write_parquet(requests, paths.load_requests, LOAD_REQUESTS_SCHEMA)
    write_parquet(points, paths.load_points, LOAD_POINTS_SCHEMA)
    write_parquet(capacity, paths.load_capacity, LOAD_CAPACITY_SCHEMA)
    print_capacity(capacity)
    same = [a.same for a in solo]
    print(f"[replay load] one request at a time at batch 1: {100 * min(same):.1f} % of problems (the least of "
          f"{len(same)} systems x methods) take the single-request replay's latency to 1e-9")
    print(f"[replay load] {len(jobs)} systems x methods, {points.num_rows} load points, {requests.num_rows} "
          f"requests in {time.perf_counter() - t0:.1f}s -> {paths.load_capacity.parent}")
    return capacity


def print_capacity(capacity: pa.Table) -> None:
    from heterospec.text_table import format_table
    rows = [(r["trace_set"], r["system"], r["method"], r["schedule"], r["unloaded_s"], r["slo_s"], r["capacity_rps"],
             f"{r['capacity_lo_rps']:.3g}-{r['capacity_hi_rps']:.3g}", r["limit_rps"], r["p99_s"], r["counted"],
             r["bottleneck"], r["util_draft"], r["util_prm"], r["util_target"])
            for r in capacity.to_pylist()]
    q = f"p{capacity['percentile'][0].as_py():g}" if capacity.num_rows else "p"
    print(format_table(["traces", "system", "method", "schedule", f"unloaded_{q}_s", "slo_s", "capacity_rps",
                        "over_seeds", "limit_rps", f"{q}_at_capacity_s", "counted", "bottleneck", "util_draft",
                        "util_prm", "util_target"], rows))


def point_stage(cfg: Any, paths: RunPaths, overrides: list[str]) -> list[dict]:
    """One point of ``load.arrivals`` per system x method, printed (nothing written)."""
    plan = load_plan(cfg)
    a = plan.load.arrivals
    arrivals = Arrivals(a.kind, a.rate, a.clients, a.think_s, a.path, a.seed, key="load.arrivals")
    if arrivals.kind == "timestamps":
        from heterospec.arrivals import read_timestamps
        read_timestamps(arrivals.path)   # a bad file is one line before anything runs
    jobs = make_jobs(cfg, paths, overrides)
    rows = []
    for job in jobs:
        run = run_point(job, plan, arrivals)
        rows.append(dict(**job.keys, **{k: v for k, v in run.point.items() if k != "devices"}))
    from heterospec.text_table import format_table
    print(format_table(["system", "method", "schedule", "requests", "throughput_rps", "p50_s", "p90_s", "p99_s",
                        "util_draft", "util_prm", "util_target"],
                       [(r["system"], r["method"], r["schedule"], r["requests"], r["throughput_rps"], r["p50_s"],
                         r["p90_s"], r["p99_s"], r["util_draft"], r["util_prm"], r["util_target"]) for r in rows]))
    return rows
