"""Each device of a system under load: its batching policy, its bounds (lanes, batch, KV cache) and its batch curve,
resolved once from the system, the profile and the ``load`` settings (:class:`DevicePlan`, :func:`plan_devices`).

* GPU (and CPU) roles batch: the PRM's batched prefill, the target's and a GPU draft's continuous batching, up to
  ``max_batch`` sequences and the KV cache the device's memory holds beside the model's weights
  (``memory_fraction`` of it, vLLM's gpu_memory_utilization);
* an FPGA draft has as many independent lanes as copies of its design point fit the board: the fewest over every
  resource of the HLS resource model (a board config without one is refused) and over its memory channels, a lane
  streaming from its own ``weight_ports + kv_ports`` of them. A lane's ``pace`` (:class:`.batching.Bounds`) is its
  batch-1 pass over the profile's, which prices the draft on the whole board: the board's bandwidth over the
  lane's (the HLS perf model's pass on the lane's channels over its pass on the board's under the ``hls``
  profile). Each pass takes up to ``fpga_batch`` sequences, priced by the HLS performance model of the design
  point, so ``fpga_batch`` > 1 needs the ``hls`` profile, whose batch-1 draft price is that same design's;
* the link carries one transfer at a time.

Models: the paper profiles price the paper's Config1 models, so their memory and curves are those models'; the
other profiles the run's own models.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from heterospec.config.hardware import ROLES, Device, System
from heterospec.errors import UserError
from heterospec.precision import WEIGHT_BYTES
from heterospec.replay.simulator.engines import RESOURCES
from heterospec.replay.load.batching import Bounds, get_policy
from heterospec.replay.load.prices import BatchCurve, hls_curve, measured_curve, published_curve, roofline_curve
from heterospec.replay.profiles.role_shapes import model_shape, precision
from heterospec.replay.profiles.roofline import CALL_OVERHEAD_MS, Roofline

AUTO_BATCH_CAP = 256     # max_batch 0 (auto): as many as the KV cache holds, at most this many


@dataclass(frozen=True)
class PublishedCurve:
    """A published step time against tokens in the pass, and what it was measured on (``load.paper_batch_curves``)."""
    source: str
    params_b: float            # the model's parameters, billions: it prices roles whose model is within 2x of it
    bandwidth_gbs: float       # the device it was measured on
    tokens: tuple
    ms: tuple


@dataclass(frozen=True)
class LoadSettings:
    """The ``load`` section's device settings (:func:`settings_of` reads them from a config; their defaults are
    conf/load/default.yaml's)."""
    batching: dict                        # resource -> batching policy
    max_batch: dict                       # role -> sequences per pass (0: auto)
    fpga_batch: int
    draft_lanes: int                      # 0: as many as the design point fits
    memory_fraction: float
    paper_curves: dict                    # device name -> PublishedCurve


@dataclass(frozen=True)
class DevicePlan:
    """Per resource (draft, prm, target, link): its policy's class, bounds and batch curve, and a line saying so."""
    policies: dict
    bounds: dict
    curves: dict
    notes: dict

    def describe(self) -> str:
        return "; ".join(f"{r}: {self.notes[r]}" for r in RESOURCES)


@dataclass(frozen=True)
class PricingInputs:
    """What the curves and bounds are computed from: the models priced (their config section), the profile kind
    (paper, roofline, hls, measured), the HLS config (an FPGA draft's lanes and passes), the fitted batch prices
    (measured), the mean tokens a PRM score reads (:func:`heterospec.replay.load.stage.step_tokens`) and the
    longest context a request reaches."""
    models: Any
    kind: str
    hls: Any = None
    batch_fit: dict | None = None
    prm_tokens: float = 1.0
    max_context: int = 1
    checkpoints: dict | None = None
    overheads: dict | None = None


def settings_of(load: Any) -> LoadSettings:
    """From the ``load`` config section (its numbers range-checked by its schema at compose); one line for a device
    without a batching policy."""
    s = LoadSettings(batching=dict(load.batching), max_batch={k: int(v) for k, v in load.max_batch.items()},
                     fpga_batch=int(load.fpga_batch), draft_lanes=int(load.draft_lanes),
                     memory_fraction=float(load.memory_fraction),
                     paper_curves={k: PublishedCurve(str(v.source), float(v.params_b), float(v.bandwidth_gbs),
                                                     tuple(v.tokens), tuple(v.ms))
                                   for k, v in load.paper_batch_curves.items()})
    missing = [r for r in RESOURCES if r not in s.batching]
    if missing:
        raise UserError(f"load.batching: no policy for {missing}; every one of {list(RESOURCES)} needs one")
    return s


def plan_devices(system: System, settings: LoadSettings, inputs: PricingInputs) -> DevicePlan:
    """Every resource's policy, bounds and curve for ``system``; one line naming the key for a bound that cannot
    hold (a batch whose KV cache does not fit, more lanes than the design fits)."""
    policies, bounds, curves, notes = {}, {}, {}, {}
    for role in ROLES:
        hw = system.devices[role]
        name = settings.batching[role]
        if name == "auto":
            name = "lanes" if (role == "draft" and hw.kind == "fpga") else "continuous"
        policies[role] = get_policy(name, f"load.batching.{role}")
        if name == "lanes":
            bounds[role], curves[role], notes[role] = _lanes_plan(role, hw, settings, inputs)
            continue
        curve = _gpu_curve(role, hw, inputs, settings)
        kv = _kv_tokens(role, hw, inputs, settings)
        batch = _max_batch(role, hw, kv, inputs, settings) if name != "serial" else 1
        bounds[role] = Bounds(max_batch=batch, kv_tokens=kv)
        curves[role] = curve
        notes[role] = f"{name}, up to {batch}" + (f", KV {kv:,.0f} tokens" if math.isfinite(kv) else "") + \
            (f" ({curve.source})" if batch > 1 else "")
    link = settings.batching["link"]
    policies["link"] = get_policy(link, "load.batching.link")
    bounds["link"], curves["link"], notes["link"] = Bounds(), BatchCurve(lambda b, c: 1.0, ""), link
    return DevicePlan(policies, bounds, curves, notes)


# ----------------------------------------------------------------------------- GPU and CPU roles
def _shape_prec(role: str, hw: Device, inputs: PricingInputs):
    cfg = inputs.models[role]
    shape = model_shape(role, cfg, (inputs.checkpoints or {}).get(role))
    prec = "int8" if (role == "draft" and hw.kind == "fpga") else precision(role, cfg)
    return shape, prec


def _roofline(role: str, hw: Device, inputs: PricingInputs) -> Roofline:
    shape, prec = _shape_prec(role, hw, inputs)
    over = {**CALL_OVERHEAD_MS, **(inputs.overheads or {})}
    return Roofline.of(shape, prec, hw, over.get(hw.kind, 0.0), role)


def _tokens(role: str, inputs: PricingInputs) -> float:
    """Tokens per sequence in one of the role's passes: what a PRM score reads, one for the others' decode."""
    return inputs.prm_tokens if role == "prm" else 1.0


def _gpu_curve(role: str, hw: Device, inputs: PricingInputs, settings: LoadSettings) -> BatchCurve:
    n = _tokens(role, inputs)
    if inputs.kind == "measured":
        phase = "score" if role == "prm" else "decode"
        coef = (inputs.batch_fit or {}).get((role, phase))
        if coef is None:
            return BatchCurve(_no_batch_prices(role, phase), "no batch prices")
        return measured_curve(coef, n, f"measured {role} {phase} batches")
    rf = _roofline(role, hw, inputs)
    pub = settings.paper_curves.get(hw.name) if inputs.kind == "paper" else None
    shape, prec = _shape_prec(role, hw, inputs)
    if pub is not None and 0.5 <= shape.params / 1e9 / pub.params_b <= 2.0:
        kv_ms = shape.kv_bytes_per_token(prec) / (hw.memory.bandwidth_gbs * 1e6)
        return published_curve(list(pub.tokens), list(pub.ms), pub.bandwidth_gbs / hw.memory.bandwidth_gbs, kv_ms, n,
                               pub.source, compute_ms_per_token=rf.flop_ms)
    source = "roofline" if inputs.kind != "paper" else "roofline curve scaled to the paper's batch-1 price"
    return roofline_curve(rf, n, source)


def _no_batch_prices(role: str, phase: str):
    def refuse(b: int, c: float) -> float:
        raise UserError(f"load.max_batch.{role}: a batch of {b} with the measured profile needs measured {role} "
                        f"{phase} batches (replay/batch_prices.parquet: python -m heterospec.replay.profiles.price_sweep); "
                        f"or set load.max_batch.{role}=1")
    return refuse


def _kv_tokens(role: str, hw: Device, inputs: PricingInputs, settings: LoadSettings) -> float:
    """Context tokens the device's KV cache holds beside the model's weights (inf for a CPU: its memory is not
    the bound the serving stacks size)."""
    if hw.kind == "cpu":
        return math.inf
    shape, prec = _shape_prec(role, hw, inputs)
    weights = shape.params * WEIGHT_BYTES[prec]
    free = hw.memory.gb * 1e9 * settings.memory_fraction - weights
    if free <= 0:
        raise UserError(f"load.memory_fraction: {settings.memory_fraction} of {hw.name}'s {hw.memory.gb:g} GB leaves "
                        f"nothing beside the {role}'s {weights / 1e9:.1f} GB of weights")
    return free / shape.kv_bytes_per_token(prec)


def _max_batch(role: str, hw: Device, kv: float, inputs: PricingInputs, settings: LoadSettings) -> int:
    want = settings.max_batch.get(role, 1)
    fits = kv / max(inputs.max_context, 1)
    if want == 0:
        return max(1, min(AUTO_BATCH_CAP, int(fits)))
    if want > fits:
        raise UserError(f"load.max_batch.{role}: {want} sequences of up to {inputs.max_context:,} tokens need "
                        f"{want * inputs.max_context:,} tokens of KV cache; {hw.name} holds {kv:,.0f} beside the "
                        f"weights (load.memory_fraction {settings.memory_fraction}); at most {int(fits)}, or 0 (auto)")
    return want


# ----------------------------------------------------------------------------- the FPGA draft
def hls_point(hw: Device, inputs: PricingInputs):
    """The draft's HLS arch, engine size and design for the board (the paper's draft is a reference model)."""
    from heterospec.hls.perf import Arch, Design, check_parallelism
    if inputs.hls is None:
        raise UserError("load: an FPGA draft's lanes need the hls config (hls.pipeline, hls.resources)")
    h = inputs.hls
    shape, _ = _shape_prec("draft", hw, inputs)
    arch = Arch(hidden=shape.hidden, layers=shape.layers, heads=shape.heads, kv_heads=shape.kv_heads,
                head_dim=shape.head_dim, intermediate=shape.intermediate, vocab=shape.vocab, tied=shape.tied)
    reference = any(Arch.published(m) == arch for m in h.reference_models)
    eng = h.design if reference else h.kernel
    check_parallelism(arch, int(eng.rows), int(eng.cols), f"hls.{'design' if reference else 'kernel'}")
    return arch, int(eng.rows), int(eng.cols), Design.of(dict(h.pipeline))


def board_resources(hw: Device) -> None:
    """Refuse, in one line naming the file and key, a board whose config lacks a resource the lane count needs
    (every one of :data:`heterospec.hls.resources.FPGA_RESOURCES`)."""
    from heterospec.hls.resources import FPGA_RESOURCES
    missing = [r for r in FPGA_RESOURCES if hw.fabric.total(r) is None]
    if missing:
        raise UserError(f"{hw.where}: fpga.{missing[0]} missing; the lane count needs every resource of "
                        f"{list(FPGA_RESOURCES)} (the board's datasheet totals)" +
                        (f"; also missing: {', '.join(f'fpga.{r}' for r in missing[1:])}" if missing[1:] else ""))


def lanes_fit(hw: Device, inputs: PricingInputs, batch: int = 1) -> int:
    """Copies of the draft's design point the board holds: the fewest over every resource (the HLS resource model;
    a board without one is refused, :func:`board_resources`) and over its memory channels (each lane its own
    ``weight_ports + kv_ports`` channels; a design with more ports than channels is one lane sharing them)."""
    from heterospec.hls.perf import memory
    from heterospec.hls.resources import FPGA_RESOURCES, fit, usage
    board_resources(hw)
    arch, rows, cols, design = hls_point(hw, inputs)
    h = inputs.hls
    u = usage(arch, rows, cols, design, dict(h.resources), hw.fabric.dsp_kind, max(inputs.max_context, 1), hw, batch)
    f = fit(u["total"], hw, dict(h.shell_margin))
    by_resource = [math.floor(f[f"{r}_available"] / u["total"][r]) for r in FPGA_RESOURCES if u["total"][r] > 0]
    channels, _ = memory(hw, design.memory)
    ports = design.weight_ports + design.kv_ports
    return int(min([channels // ports if ports <= channels else 1] + by_resource))


@dataclass(frozen=True)
class LaneShare:
    """One lane's share of the board's memory: its channels of the board's and their bandwidth, and its ``pace``
    (a batch-1 pass on the lane over the profile's batch-1 price, which prices the draft on the whole board)."""
    channels: int
    board_channels: int
    gbs: float
    pace: float


def lane_share(hw: Device, inputs: PricingInputs) -> LaneShare:
    """A lane streams from its design point's ``weight_ports + kv_ports`` channels (all of them when it has more
    ports than channels). Its pace: under the ``hls`` profile (the HLS perf model of the same design prices the
    draft) that model's pass on the lane's channels over its pass on the board's, at half the longest context;
    under the others, whose draft price is memory-bound on the whole board's bandwidth, the board's bandwidth over
    the lane's."""
    from heterospec.hls.perf import memory
    arch, rows, cols, design = hls_point(hw, inputs)
    channels, ch_gbs = memory(hw, design.memory)
    mine = min(design.weight_ports + design.kv_ports, channels)
    if inputs.kind == "hls":
        from heterospec.hls.perf import token_ms
        context = max(inputs.max_context, 1) // 2
        lane = with_channels(hw, design.memory, mine)
        pace = token_ms(arch, rows, cols, lane, hw.clock_mhz, design, context)[0] / \
            token_ms(arch, rows, cols, hw, hw.clock_mhz, design, context)[0]
    else:
        pace = channels / mine
    return LaneShare(channels=mine, board_channels=channels, gbs=mine * ch_gbs, pace=pace)


def with_channels(hw: Device, kind: str, channels: int) -> Device:
    """The board with only ``channels`` of its ``kind`` memory's channels (one lane's share)."""
    from dataclasses import replace
    from heterospec.hls.perf import memory_kind
    k = memory_kind(hw, kind)
    bank = replace(hw.fabric.banks[k], channels=channels)
    return replace(hw, fabric=replace(hw.fabric, banks={**hw.fabric.banks, k: bank}))


def _lanes_plan(role: str, hw: Device, settings: LoadSettings, inputs: PricingInputs):
    """Bounds, curve and note of a device run as lanes: an FPGA draft's lanes with their share of the memory and
    their pace, each pass of up to ``fpga_batch`` sequences; a GPU or CPU draft's lanes as asked, at pace 1."""
    lanes, batch = _lanes(hw, settings, inputs), settings.fpga_batch
    if hw.kind != "fpga":
        curve = _gpu_curve(role, hw, inputs, settings) if batch > 1 else BatchCurve(lambda b, c: 1.0, "")
        return Bounds(lanes=lanes, max_batch=batch), curve, f"lanes x{lanes}, {batch} per pass" + \
            (f" ({curve.source})" if batch > 1 else "")
    if batch > 1:
        _same_design(batch, inputs)
    share = lane_share(hw, inputs)
    curve = _fpga_curve(hw, inputs) if batch > 1 else BatchCurve(lambda b, c: 1.0, "")
    note = (f"lanes x{lanes} at {share.gbs:g} GB/s each ({share.channels} of {share.board_channels} channels, "
            f"pace {share.pace:.2f}), {batch} per pass") + (f" ({curve.source})" if batch > 1 else "")
    return Bounds(lanes=lanes, max_batch=batch, pace=share.pace), curve, note


# What each profile kind prices an FPGA draft's batch-1 call with (the fpga_batch rule's line)
DRAFT_PRICE = {"paper": "the paper profiles price the paper's kernel (its measured ms per token)",
               "roofline": "roofline prices the board's roofline, not an HLS design",
               "measured": "measured prices the calls fitted from our runs"}


def _same_design(batch: int, inputs: PricingInputs) -> None:
    """A batch-B pass is the HLS perf model's pass(B) / pass(1) of the draft's design point: only the ``hls``
    profile prices the batch-1 call with that same design; under the others, one line."""
    if inputs.kind != "hls":
        raise UserError(f"load.fpga_batch: {batch} needs the draft's batch-1 price from the same HLS design "
                        f"(load.profile=hls); {DRAFT_PRICE.get(inputs.kind, inputs.kind + ' prices another design')}")


def _lanes(hw: Device, settings: LoadSettings, inputs: PricingInputs) -> int:
    if hw.kind != "fpga":   # a GPU or CPU draft run as lanes (a serving executor's draft lane): as many as asked
        return settings.draft_lanes or 1
    fit = lanes_fit(hw, inputs)
    if fit < 1:
        raise UserError(f"hls.pipeline: the draft's design point does not fit {hw.name} (the HLS resource model); "
                        f"no lane to run it")
    if settings.draft_lanes > fit:
        raise UserError(f"load.draft_lanes: {settings.draft_lanes} lanes, but {hw.name} fits {fit} of the draft's "
                        f"design point (hls.pipeline; the HLS resource model); at most {fit}, or 0 (auto)")
    return settings.draft_lanes or fit


def _fpga_curve(hw: Device, inputs: PricingInputs) -> BatchCurve:
    from heterospec.hls.perf import token_ms
    arch, rows, cols, design = hls_point(hw, inputs)
    clock = hw.clock_mhz
    return hls_curve(lambda b, c: token_ms(arch, rows, cols, hw, clock, design, c, batch=b)[0],
                     f"HLS perf model, batch-B pass at {clock:g} MHz")
