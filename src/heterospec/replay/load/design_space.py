"""The FPGA draft's design space under load: which FPGA design point lets one FPGA (or two, or four) beside two GPUs
serve what three GPUs serve.

    python -m heterospec.replay design-space [overrides]     results/<run>/load/design_space.parquet

Per board x kernel x B (sequences per weight pass) x FPGAs x step-level method (``design_space``, conf/design_space):
the load replay's capacity search (:func:`heterospec.replay.load.stage.capacity_job`: the load stage's traces,
profile, SLO and batching, the design space's own search sizes), the system's active power and list price, and the
same method's capacity on the three-GPU system (``design_space.reference``) beside it.

The draft's design point for a B (:func:`size_engine`): ``hls.design``'s engine, its MAC array grown (rows doubled,
as :func:`heterospec.hls.perf.check_parallelism` allows) while a batch-B pass is compute-bound and the grown engine
still fits the board by the HLS resource model (``engine: sized``; ``fixed``: ``hls.design`` at every B); its lanes
as many as fit (:func:`.devices.lanes_fit`, each lane with B sequences' activation buffers), each lane's KV region
holding B sequences at the traces' longest context (else one line naming ``design_space.batches``). Its price:

* ``ours``: the HLS performance model of that design point on the lane's memory channels prices every pass (the
  lane's ``pace`` is the model's batch-1 pass over the profile's batch-1 draft price, at half the longest context);
* ``paper``: the profile's batch-1 draft price (the paper's measured kernel, 5.74 ms/token on the U280), a batch-B
  pass the HLS model's pass(B) / pass(1) of the same design point times it.

Power is every device's ``power_active_w`` (the FPGAs' measured LLM-decode power, the GPUs' figure; each with its
source line in conf/hardware), the price every device's ``price_usd``: capacity per kW and per thousand dollars.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from omegaconf import OmegaConf

from heterospec.config.hardware import ROLES, Device, System
from heterospec.config.schema import DesignSpaceConfig
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.replay.load.batching import Bounds
from heterospec.replay.load.devices import (DevicePlan, PricingInputs, hls_point, lane_share, lanes_fit,
                                            with_channels)
from heterospec.replay.load.prices import BatchCurve, hls_curve
from heterospec.replay.load.stage import STEP_METHODS
from heterospec.store.parquet import versioned, write_parquet

KERNELS = ("paper", "ours")
ENGINE_SIZINGS = ("sized", "fixed")
DESIGN_METRICS = ("capacity", "per_watt", "per_dollar")
MAX_ROWS_DOUBLINGS = 8
GAIN = 0.05             # a bigger engine is taken when it shortens the batch-B pass by more than this

LOAD_DESIGN_SPACE_SCHEMA = versioned("load_design_space", 1, [
    pa.field("run", pa.string(), nullable=False),
    pa.field("trace_set", pa.string(), nullable=False),
    pa.field("profile", pa.string(), nullable=False),
    pa.field("system", pa.string(), nullable=False),        # gpu3, or <board> x<FPGAs> + 2 <gpu>
    pa.field("board", pa.string(), nullable=False),         # the draft's device
    pa.field("kernel", pa.string(), nullable=False),        # ours | paper | gpu (the reference system)
    pa.field("batch", pa.int32(), nullable=False),          # sequences per weight pass (1 on a GPU draft: its own)
    pa.field("fpgas", pa.int32(), nullable=False),          # FPGAs drafting (0: the reference system)
    pa.field("method", pa.string(), nullable=False),
    pa.field("rows", pa.int32()),                           # the design point's MAC array, rows x cols int8 MACs
    pa.field("cols", pa.int32()),
    pa.field("lanes", pa.int32()),                          # lanes per FPGA
    pa.field("dsp", pa.int64()),                            # one lane's resources (the HLS resource model)
    pa.field("lut", pa.int64()),
    pa.field("bram36", pa.int64()),
    pa.field("dsp_util", pa.float64()),                     # the lanes' share of the board's (after the shell)
    pa.field("lut_util", pa.float64()),
    pa.field("closes", pa.string()),                        # the resource model's timing assumption at the clock
    pa.field("bound", pa.string()),                         # what binds a batch-B pass: weights | chain | stall
    pa.field("pass1_ms", pa.float64()),                     # a lane's batch-1 and batch-B pass, half the longest context
    pa.field("passb_ms", pa.float64()),
    pa.field("capacity_rps", pa.float64(), nullable=False),  # load_capacity's: the least over the seeds
    pa.field("capacity_lo_rps", pa.float64(), nullable=False),
    pa.field("capacity_hi_rps", pa.float64(), nullable=False),
    pa.field("seeds", pa.int32(), nullable=False),
    pa.field("search_steps", pa.int32(), nullable=False),   # bisections: a capacity resolved to 2^(1/2^steps)
    pa.field("slo_s", pa.float64(), nullable=False),
    pa.field("p99_s", pa.float64()),                        # the SLO percentile at capacity
    pa.field("limit_rps", pa.float64(), nullable=False),    # the hard limit and its device
    pa.field("limit_device", pa.string(), nullable=False),
    pa.field("bottleneck", pa.string(), nullable=False),
    pa.field("util_draft", pa.float64(), nullable=False),
    pa.field("util_prm", pa.float64(), nullable=False),
    pa.field("util_target", pa.float64(), nullable=False),
    pa.field("power_w", pa.float64(), nullable=False),      # every device's active power
    pa.field("price_usd", pa.float64()),                    # every device's list price (null: one has none)
    pa.field("capacity_per_kw", pa.float64(), nullable=False),
    pa.field("capacity_per_kusd", pa.float64()),
    pa.field("reference_rps", pa.float64(), nullable=False),   # the same method on the reference system
    pa.field("reaches", pa.bool_(), nullable=False),        # capacity_rps >= reference_rps within the search's
                                                             # resolution, 2^(1/2^search_steps) (reaches())
    pa.field("devices", pa.string(), nullable=False),       # each device's plan, in words
    pa.field("answer", pa.string()),                        # the sentence of answered() for its trace set, method,
                                                             # board and kernel (null: the reference)
])


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class DesignSpacePlan:
    """The design space's settings, resolved once from the composed config (its schema's type), and the load plan
    its capacity searches run under (the load section with the design space's search sizes)."""
    space: DesignSpaceConfig
    load: Any            # heterospec.replay.load.stage.LoadPlan


def design_space_plan(cfg: Any) -> DesignSpacePlan:
    """The plan of ``cfg``; one line for a bad setting, naming its key."""
    from heterospec.replay.load.stage import load_plan, profile_kind
    space = OmegaConf.to_object(cfg.design_space)
    for key, values, allowed in (("kernels", space.kernels, KERNELS), ("metrics", space.metrics, DESIGN_METRICS),
                                 ("methods", space.methods, STEP_METHODS)):
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise UserError(f"design_space.{key}: {bad or 'empty'}; expected some of {list(allowed)}")
    if space.engine not in ENGINE_SIZINGS:
        raise UserError(f"design_space.engine: '{space.engine}', expected one of {list(ENGINE_SIZINGS)}")
    if not space.batches or not space.fpgas or not space.boards:
        raise UserError("design_space.batches, fpgas and boards: each needs an entry")
    if space.max_requests < space.requests:
        raise UserError(f"design_space.max_requests: {space.max_requests}, expected at least design_space.requests "
                        f"({space.requests})")
    if profile_kind(str(cfg.load.profile)) != "paper":
        raise UserError(f"load.profile: '{cfg.load.profile}'; the design space prices the GPUs and the paper's kernel "
                        f"with a paper profile (paper_v12, paper_v11)")
    base = load_plan(cfg)
    load = replace(base, load=replace(base.load, requests=space.requests, max_requests=space.max_requests,
                                      seeds=space.seeds, search_steps=space.search_steps))
    return DesignSpacePlan(space, load)


# ----------------------------------------------------------------------------- a design point
@dataclass(frozen=True)
class DraftEngine:
    """The draft's design point for ``batch`` on ``board``: its MAC array, lanes and one lane's resources."""
    board: str
    batch: int
    rows: int
    cols: int
    lanes: int
    dsp: int
    lut: int
    bram36: int
    dsp_util: float
    lut_util: float
    closes: str
    bound: str
    hls: Any             # the hls config with this engine as hls.design


def _with_rows(hls: Any, rows: int) -> Any:
    return OmegaConf.merge(hls, {"design": {"rows": rows}})


def _usage(hw: Device, inputs: PricingInputs, batch: int):
    from heterospec.hls.resources import closes, fit, fit_slrs, usage
    arch, rows, cols, design = hls_point(hw, inputs)
    h = inputs.hls
    u = usage(arch, rows, cols, design, dict(h.resources), hw.fabric.dsp_kind, max(inputs.max_context, 1), hw, batch)
    f = fit(u["total"], hw, dict(h.shell_margin))
    slrs = fit_slrs(u, hw)
    ok = f["fits"] and all(r["fits"] for r in slrs)
    return u, f, ok, closes(slrs, f, dict(h.timing), hw.clock_mhz)[1]


def _pass(hw: Device, inputs: PricingInputs, batch: int) -> tuple[float, str]:
    """A batch-B pass of the design point on one lane's channels at half the longest context (ms), and what binds it:
    the HLS perf model's largest component (weights: the weight stream; chain: the MACs and the activation chain
    after it; stall: the chain the prefetch FIFOs cannot hide)."""
    from heterospec.hls.perf import token_ms
    arch, rows, cols, design = hls_point(hw, inputs)
    lane = with_channels(hw, design.memory, lane_share(hw, inputs).channels)
    ms, cycles = token_ms(arch, rows, cols, lane, hw.clock_mhz, design, max(inputs.max_context, 1) // 2, batch=batch)
    return ms, max(("weights", "chain", "stall"), key=lambda k: cycles.get(k, 0.0))


def size_engine(hw: Device, batch: int, inputs: PricingInputs, mode: str) -> DraftEngine:
    """The design point for ``batch``: of ``hls.design`` and its engine with rows doubled (as long as they divide
    every matrix and the engine fits the board), the one whose lanes advance the most sequences a millisecond
    (``lanes x B / pass``), a bigger one only when it gains more than ``GAIN``; ``fixed``: ``hls.design``. One line
    when not even ``hls.design`` fits with B sequences' buffers, or B sequences' KV caches do not fit a lane's KV
    memory."""
    from heterospec.hls.perf import check_parallelism
    arch, rows, cols, design = hls_point(hw, inputs)
    if not _usage(hw, inputs, batch)[2]:
        raise UserError(f"design_space.batches: {batch} sequences' activation buffers beside hls.design "
                        f"({rows}x{cols}) do not fit {hw.name} (the HLS resource model); a smaller B, or "
                        f"design_space.board_batches.{hw.name}")
    _kv_fits(hw, batch, inputs)

    def rate(point: PricingInputs) -> float:
        return lanes_fit(hw, point, batch) * batch / _pass(hw, point, batch)[0]

    chosen, best, candidate = inputs, rate(inputs), inputs
    for _ in range(MAX_ROWS_DOUBLINGS if mode == "sized" else 0):
        candidate = replace(inputs, hls=_with_rows(inputs.hls, 2 * hls_point(hw, candidate)[1]))
        try:
            check_parallelism(arch, hls_point(hw, candidate)[1], cols, "hls.design")
        except UserError:
            break
        if not _usage(hw, candidate, batch)[2]:
            break
        if rate(candidate) > best * (1 + GAIN):
            chosen, best = candidate, rate(candidate)
    u, f, _, closes = _usage(hw, chosen, batch)
    lanes = lanes_fit(hw, chosen, batch)
    r = hls_point(hw, chosen)[1]
    return DraftEngine(hw.name, batch, r, cols, lanes, u["total"]["dsp"], u["total"]["lut"], u["total"]["bram36"],
                  lanes * f["dsp_util"], lanes * f["lut_util"], closes, _pass(hw, chosen, batch)[1], chosen.hls)


def _kv_fits(hw: Device, batch: int, inputs: PricingInputs) -> None:
    """B sequences' KV caches at the longest context within a lane's KV memory: its ``kv_ports`` channels (every
    channel less the weights where the ports are shared)."""
    from heterospec.hls.perf import memory_kind
    arch, _, _, design = hls_point(hw, inputs)
    bank = hw.fabric.banks[memory_kind(hw, design.memory)]
    if design.ports == "shared":
        have = bank.gb * 1e9 - arch.weight_bytes(design)
    else:
        have = bank.gb * 1e9 / bank.channels * design.kv_ports
    need = batch * max(inputs.max_context, 1) * arch.kv_bytes_per_token(design)
    if need > have:
        raise UserError(f"design_space.batches: {batch} sequences of {inputs.max_context:,} tokens need "
                        f"{need / 1e9:.2f} GB of KV cache; a lane of {hw.name} holds {have / 1e9:.2f} GB "
                        f"(hls.pipeline.kv_ports); a smaller B, or design_space.board_batches.{hw.name}")


def draft_pricing(hw: Device, engine: DraftEngine, kernel: str, fpgas: int, inputs: PricingInputs, profile) \
        -> tuple[Bounds, BatchCurve, str, float, float]:
    """The draft's bounds and batch curve for a design point, a note, and a lane's batch-1 and batch-B pass (ms) at
    half the longest context."""
    from heterospec.hls.perf import token_ms
    sized = replace(inputs, hls=engine.hls)
    arch, rows, cols, design = hls_point(hw, sized)
    share = lane_share(hw, sized)
    lane = with_channels(hw, design.memory, share.channels)
    context = max(inputs.max_context, 1) // 2

    def hls_ms(b: int, c: int) -> float:
        return token_ms(arch, rows, cols, lane, hw.clock_mhz, design, c, batch=b)[0]

    priced = profile.draft_decode(context, 1)
    pace = hls_ms(1, context) / priced if kernel == "ours" else share.pace
    scale = pace / share.pace if kernel == "ours" else 1.0
    curve = hls_curve(hls_ms, f"HLS perf model, {rows}x{cols} batch-B pass") if engine.batch > 1 else \
        BatchCurve(lambda b, c: 1.0, "")
    lanes = engine.lanes * fpgas
    note = (f"{fpgas} x {hw.name}, {engine.lanes} lane(s) each of {rows}x{cols} MACs at {share.gbs:g} GB/s, "
            f"{engine.batch} per pass, {kernel} kernel (pace {pace:.3f})")
    one = priced * share.pace * scale
    return Bounds(lanes=lanes, max_batch=engine.batch, pace=pace), curve, note, one, \
        one * curve(engine.batch, context)


# ----------------------------------------------------------------------------- the sweep
@dataclass
class DesignJob:
    """One point of the sweep: its load job (the devices planned for the design) and what it is."""
    job: Any             # stage.SystemMethod
    board: str
    kernel: str
    fpgas: int
    engine: DraftEngine | None
    pass1_ms: float | None
    passb_ms: float | None
    power_w: float
    price_usd: float | None
    alone: int           # index of its single-request replay (shared by every design of a board and method)


def _system(reference: System, board: Device, gpu: Device, fpgas: int) -> System:
    return System(name=f"{board.name} x{fpgas} + 2 {gpu.name}", devices={"draft": board, "prm": gpu, "target": gpu},
                  link=reference.link)


def _power(system: System, fpgas: int) -> float:
    return sum(system.devices[r].power_active_w * (fpgas if r == "draft" and fpgas else 1) for r in ROLES)


def _price(system: System, fpgas: int, quotes: dict) -> float | None:
    """Every device's list price (``design_space.prices_usd`` before conf/hardware's ``price_usd``), the draft's
    times the FPGAs; None when one has none."""
    prices = [quotes.get(system.devices[r].name, system.devices[r].price_usd) for r in ROLES]
    if any(p is None for p in prices):
        return None
    return sum(p * (fpgas if r == "draft" and fpgas else 1) for r, p in zip(ROLES, prices))


def batches_of(space: DesignSpaceConfig, board: str) -> list[int]:
    """The Bs swept on ``board``: ``design_space.board_batches.<board>``, else ``design_space.batches``."""
    return list(space.board_batches.get(board, space.batches))


def check_devices(plan: DesignSpacePlan, devices: list[Device]) -> None:
    """Every device the sweep prices has what its metrics need: one line naming the key, before anything runs."""
    for d in devices:
        if "per_watt" in plan.space.metrics and not d.power_active_w > 0:
            raise UserError(f"{d.where}: power_active_w {d.power_active_w}; design_space.metrics per_watt needs a "
                            f"positive active power for every device")
        if "per_dollar" in plan.space.metrics and d.price_usd is None and d.name not in plan.space.prices_usd:
            raise UserError(f"{d.where}: price_usd missing; design_space.metrics per_dollar needs a list price for "
                            f"every device (price_usd with its price_source there, or design_space.prices_usd."
                            f"{d.name}), or drop per_dollar")


def make_design_jobs(cfg: Any, paths: RunPaths, overrides: list[str], plan: DesignSpacePlan):
    """The reference system's jobs (each method) and every design point's, and the jobs whose single-request replays
    they share (the reference's target alone among them: the SLO); every bad setting is one line here."""
    from heterospec.config.hardware import device, system as hw_system
    from heterospec.replay.load.stage import make_jobs, pricing_inputs
    s = plan.space
    reference = hw_system(s.reference, cfg)
    gpu = device(s.gpus, cfg)
    boards = [device(b, cfg) for b in s.boards]
    for b in boards:
        if b.kind != "fpga":
            raise UserError(f"design_space.boards: '{b.name}' is a {b.kind}; expected an FPGA board (an fpga: section)")
    check_devices(plan, [gpu, *boards, *reference.devices.values()])
    ref_methods = ["target"] + [m for m in s.methods if m != "target"]
    base = [_system(reference, b, gpu, 1) for b in boards]
    planned = make_jobs(cfg, paths, overrides, [reference, *base], ref_methods, "design_space.methods")  # one load
    ref_jobs = [j for j in planned if j.system is reference]
    board_jobs = [j for j in planned if j.system is not reference and j.method != "target"]
    # the reference's target alone only sets the SLO (its unloaded latency): no capacity search of its own
    out = [DesignJob(j, reference.draft.name, "gpu", 0, None, None, None, _power(reference, 0),
                     _price(reference, 0, s.prices_usd), k) for k, j in enumerate(ref_jobs) if j.method != "target"]
    singles = ref_jobs + board_jobs
    engines = {}
    for k, bj in enumerate(board_jobs, start=len(ref_jobs)):
        hw = bj.system.draft
        inputs = pricing_inputs(cfg, paths, "paper", bj.problems, bj.profile)
        for batch in batches_of(s, hw.name):
            if (hw.name, batch) not in engines:
                engines[hw.name, batch] = size_engine(hw, batch, inputs, s.engine)
            eng = engines[hw.name, batch]
            for kernel in s.kernels:
                for fpgas in s.fpgas:
                    bounds, curve, note, one, many = draft_pricing(hw, eng, kernel, fpgas, inputs, bj.profile)
                    system = _system(reference, hw, gpu, fpgas)
                    devs = bj.plan
                    dplan = DevicePlan(devs.policies, {**devs.bounds, "draft": bounds},
                                       {**devs.curves, "draft": curve}, {**devs.notes, "draft": note})
                    job = replace(bj, system=system, plan=dplan)
                    out.append(DesignJob(job, hw.name, kernel, fpgas, eng, one, many, _power(system, fpgas),
                                         _price(system, fpgas, s.prices_usd), k))
    return out, singles


def _row(dj: DesignJob, cap: dict, reference: dict, run: str, steps: int) -> dict:
    e = dj.engine
    per_kw = cap["capacity_rps"] / dj.power_w * 1e3
    ref = reference[dj.job.method]
    return dict(run=run, trace_set=dj.job.trace_set, profile=dj.job.profile.name, system=dj.job.system.name,
                board=dj.board, kernel=dj.kernel, batch=e.batch if e else 1, fpgas=dj.fpgas, method=dj.job.method,
                rows=e.rows if e else None, cols=e.cols if e else None, lanes=e.lanes if e else None,
                dsp=e.dsp if e else None, lut=e.lut if e else None, bram36=e.bram36 if e else None,
                dsp_util=e.dsp_util if e else None, lut_util=e.lut_util if e else None,
                closes=e.closes if e else None, bound=e.bound if e else None, pass1_ms=dj.pass1_ms,
                passb_ms=dj.passb_ms, **{k: cap[k] for k in (
                    "capacity_rps", "capacity_lo_rps", "capacity_hi_rps", "seeds", "slo_s", "p99_s", "limit_rps",
                    "limit_device", "bottleneck", "util_draft", "util_prm", "util_target", "devices")},
                search_steps=steps, power_w=dj.power_w, price_usd=dj.price_usd, capacity_per_kw=per_kw,
                capacity_per_kusd=cap["capacity_rps"] / dj.price_usd * 1e3 if dj.price_usd else None,
                reference_rps=ref, reaches=reaches(cap["capacity_rps"], ref, steps))


def resolution(steps: int) -> float:
    """How finely the capacity search resolves a capacity: the ratio of the bracket it ends in, ``2^(1/2^steps)``
    (the doubling's factor 2, halved in log ``steps`` times)."""
    return 2.0 ** (1.0 / 2 ** steps)


def reaches(capacity: float, reference: float, steps: int) -> bool:
    """Whether a capacity reaches the reference's: at least it, within the search's resolution (two searches of the
    same arrivals that end one bracket apart are not told apart)."""
    return capacity > 0 and capacity * resolution(steps) >= reference


def run_design_space(cfg: Any, paths: RunPaths, overrides: list[str], workers: int | None = None) -> pa.Table:
    """Every design point's capacity (module docstring) -> ``results/<run>/load/design_space.parquet``."""
    from heterospec.replay.load.stage import _in_workers, alone, capacity_job, slo_limits
    t0 = time.perf_counter()
    plan = design_space_plan(cfg)
    workers = workers or plan.load.load.workers
    jobs, singles = make_design_jobs(cfg, paths, overrides, plan)
    print(f"[replay design-space] {len(jobs)} points ({len(plan.space.boards)} boards x {len(plan.space.kernels)} "
          f"kernels x B in {list(plan.space.batches)} x FPGAs in {list(plan.space.fpgas)} x "
          f"{len(plan.space.methods)} methods, and the reference), {plan.load.load.seeds} seed(s), points of "
          f"{plan.load.load.requests} doubling to {plan.load.load.max_requests} requests, {workers} worker(s)",
          flush=True)
    solo = _in_workers(alone, singles, workers)
    slo = slo_limits(plan.load, {f"{j.system.name}/{j.method}": a.latencies for j, a in zip(singles, solo)})
    limit = slo[f"{plan.space.reference}/target"]   # one SLO for every point: the reference's (load.slo)

    def searched(k: int, result) -> None:
        row, dj = result[1], jobs[k]
        if (k + 1) % max(1, len(jobs) // 10) == 0 or k + 1 == len(jobs):
            print(f"[replay design-space] {k + 1}/{len(jobs)}: {dj.job.system.name} {dj.kernel} B={_b(dj)} "
                  f"{dj.job.method}: {row['capacity_rps']:.4g} req/s ({time.perf_counter() - t0:.0f} s)", flush=True)

    found = _in_workers(lambda k: capacity_job(jobs[k].job, plan.load, limit, solo[jobs[k].alone]),
                        list(range(len(jobs))), workers, searched)
    reference = {dj.job.method: f[1]["capacity_rps"] for dj, f in zip(jobs, found) if dj.kernel == "gpu"}
    rows = [_row(dj, f[1], reference, plan.load.run, plan.space.search_steps) for dj, f in zip(jobs, found)]
    said = answered(rows)
    for r in rows:
        r["answer"] = said.get((r["trace_set"], r["method"], r["board"], r["kernel"]))
    table = pa.Table.from_pylist(rows, schema=LOAD_DESIGN_SPACE_SCHEMA)
    write_parquet(table, paths.load_design_space, LOAD_DESIGN_SPACE_SCHEMA)
    for line in said.values():
        print(f"[replay design-space] {line}")
    print(f"[replay design-space] {len(rows)} points in {time.perf_counter() - t0:.1f}s -> {paths.load_design_space}")
    return table


def _b(dj: DesignJob) -> int:
    return dj.engine.batch if dj.engine else 1


# ----------------------------------------------------------------------------- the answer
def _order(r: dict) -> tuple:
    """The smaller design point first: fewer FPGAs, then fewer sequences per pass."""
    return r["fpgas"], r["batch"]


def answered(rows: list[dict]) -> dict[tuple, str]:
    """(trace set, method, board, kernel) -> the smallest FPGA design point (fewest FPGAs, then smallest B) whose
    system reaches the reference's capacity, or that none does and which device then binds the best one."""
    out = {}
    fpga = [r for r in rows if r["kernel"] != "gpu"]
    for ts in dict.fromkeys(r["trace_set"] for r in rows):
        for method in dict.fromkeys(r["method"] for r in fpga):
            ref = next((r for r in rows if r["trace_set"] == ts and r["kernel"] == "gpu" and r["method"] == method),
                       None)
            if ref is None:
                continue
            for board, kernel in dict.fromkeys((r["board"], r["kernel"]) for r in fpga):
                pts = sorted((r for r in fpga if r["trace_set"] == ts and r["method"] == method
                              and r["board"] == board and r["kernel"] == kernel), key=_order)
                if not pts:
                    continue
                key = (ts, method, board, kernel)
                head = f"{ts}, {method.upper()} on {board}, {kernel} kernel"
                hit = next((r for r in pts if r["reaches"]), None)
                if hit is not None:
                    out[key] = (f"{head}: {_point(hit)} reaches {ref['system']}'s {ref['capacity_rps']:.3g} req/s "
                                f"({hit['capacity_rps']:.3g} req/s, {hit['capacity_per_kw']:.3g} req/s per kW against "
                                f"{ref['capacity_per_kw']:.3g}).")
                else:
                    best = max(pts, key=lambda r: r["capacity_rps"])
                    out[key] = (f"{head}: no design point reaches {ref['system']}'s {ref['capacity_rps']:.3g} "
                                f"req/s; the best, {_point(best)}, serves {best['capacity_rps']:.3g}, bound by the "
                                f"{best['limit_device']} (bottleneck {best['bottleneck']}).")
    return out


def _point(r: dict) -> str:
    return (f"{r['fpgas']} FPGA{'s' if r['fpgas'] > 1 else ''} at B = {r['batch']} ({r['rows']}x{r['cols']} MACs, "
            f"{r['lanes']} lane{'s' if r['lanes'] > 1 else ''} each)")
