"""The run's hardware as frozen dataclasses: devices, the link, and the system that assigns devices to roles.

Built once from a composed config node (:meth:`Device.of`, :meth:`System.of`) or looked up by name in the
``hardware`` / ``system`` config groups (:func:`device`, :func:`system`); every stage takes these objects, never
raw config. Derived facts are computed here, not restated in ``conf/``: an FPGA board's memory size, type and
bandwidth come from its memory banks, and its int8 peak from its DSPs and clock when the file gives none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from heterospec.config import entry_path, group_entry
from heterospec.errors import UserError
from heterospec.trio import ROLES

DEVICE_KINDS = ("gpu", "fpga", "cpu", "soc")
DSP_KINDS = ("dsp48e2", "dsp58")
BANKS = ("hbm", "ddr")
OPS_PER_DSP = 2          # one int8 multiply-accumulate per DSP per cycle (no int8 packing): the datasheet peak


@dataclass(frozen=True)
class Memory:
    """A device's main memory (an FPGA board's: its HBM, else its DDR)."""
    type: str
    gb: float
    bandwidth_gbs: float


@dataclass(frozen=True)
class MemoryBank:
    """One memory of an FPGA board: ``channels`` ports of ``channel_gbs`` each."""
    type: str
    gb: float
    channels: int
    channel_gbs: float

    @property
    def bandwidth_gbs(self) -> float:
        return self.channels * self.channel_gbs


@dataclass(frozen=True)
class Fabric:
    """An FPGA's programmable fabric: resource totals (None: not stated, unchecked), memories, SLR layout."""
    dsp: int
    dsp_kind: str                                # dsp48e2 | dsp58
    part: str | None = None
    lut: int | None = None
    ff: int | None = None
    bram36: int | None = None
    uram: int | None = None
    banks: dict = field(default_factory=dict)    # hbm / ddr -> MemoryBank
    slrs: int = 1
    memory_slr: int = 0
    sll_per_boundary: int | None = None
    slr_shell: tuple = ()                        # per SLR: {resource: fraction the shell takes} (assumed)
    slr_available: tuple = ()                    # per SLR: {resource: what the shell leaves the kernel} (published)
    sll_available: tuple = ()                    # per SLR boundary: SLLs the shell leaves the kernel (published)
    draft_lanes: int | None = None
    clocks_mhz: tuple = ()                       # kernel clocks the HLS models

    def total(self, resource: str) -> int | None:
        return getattr(self, resource)


@dataclass(frozen=True)
class Device:
    """One device's datasheet. Units: GB, GB/s, TOPS/TFLOPS, MHz, W."""
    name: str
    kind: str                                    # gpu | fpga | cpu | soc
    memory: Memory
    peak_tflops: dict                            # precision -> TOPS/TFLOPS
    power_active_w: float
    power_idle_w: float
    clock_mhz: float | None = None
    power_cap_w: float | None = None
    fabric: Fabric | None = None
    price_usd: float | None = None               # list price, with price_source (the design space's per dollar)
    price_source: str | None = None

    @property
    def where(self) -> str:
        return str(entry_path("hardware", self.name))

    def peak(self, precision: str, who: str) -> float:
        """Peak TOPS/TFLOPS at ``precision``; one line naming the file when the device has none."""
        if precision not in self.peak_tflops:
            raise UserError(f"hardware '{self.name}' has no peak_tflops.{precision}, which the {who} needs; add it "
                            f"to {self.where} or change the model's precision")
        return self.peak_tflops[precision]

    def bank(self, kind: str) -> MemoryBank:
        """The FPGA board's ``hbm`` or ``ddr`` memory; one line when it has none."""
        if self.fabric is None:
            raise UserError(f"hardware config '{self.name}' is a {self.kind}, not an FPGA board (no fpga: section in "
                            f"{self.where}); the HLS models need one")
        bank = self.fabric.banks.get(kind)
        if bank is None:
            raise UserError(f"hardware config '{self.name}' has no {kind.upper()} figures (fpga.{kind}: channels, "
                            f"channel_gbs in {self.where}); the HLS models need them")
        return bank

    def kernel_clocks(self) -> list[float]:
        """The clocks the HLS models for this board: its ``fpga.clocks_mhz`` and its own ``clock_mhz``."""
        cl = set(self.fabric.clocks_mhz if self.fabric else ())
        if self.clock_mhz is not None:
            cl.add(self.clock_mhz)
        return sorted(cl)

    @classmethod
    def of(cls, node: Any) -> "Device":
        """From a composed ``hardware`` node (checked against HardwareConfig); one line per bad or missing field."""
        d = _plain(node)
        name = str(d.get("name") or "?")
        where = str(entry_path("hardware", name))
        kind = _req(d, "kind", where, str)
        if kind not in DEVICE_KINDS:
            raise UserError(f"{where}: kind '{kind}'; expected one of {list(DEVICE_KINDS)}")
        clock = _opt(d, "clock_mhz", where, float)
        fabric = _fabric(d.get("fpga"), where) if d.get("fpga") is not None else None
        if kind == "fpga" and fabric is None:
            raise UserError(f"{where}: an fpga device needs an fpga: section (dsp, dsp_kind, hbm or ddr)")
        peaks = {str(k): float(v) for k, v in (d.get("peak_tflops") or {}).items()}
        if fabric is not None:
            main = fabric.banks.get("hbm") or fabric.banks.get("ddr")
            if main is None:
                raise UserError(f"{where}: fpga needs a memory: fpga.hbm or fpga.ddr (type, gb, channels, channel_gbs)")
            stated = [k for k in ("memory_type", "memory_gb", "bandwidth_gbs") if d.get(k) is not None]
            if stated:
                raise UserError(f"{where}: {', '.join(stated)} restate(s) the fpga memory banks; remove them "
                                f"(derived from fpga.{'hbm' if fabric.banks.get('hbm') else 'ddr'})")
            memory = Memory(main.type, main.gb, main.bandwidth_gbs)
            if "int8" not in peaks and clock is not None:
                peaks["int8"] = fabric.dsp * OPS_PER_DSP * clock * 1e6 / 1e12
        else:
            memory = Memory(_req(d, "memory_type", where, str), _req(d, "memory_gb", where, float),
                            _req(d, "bandwidth_gbs", where, float))
        return cls(name=name, kind=kind, memory=memory, peak_tflops=peaks,
                   power_active_w=_req(d, "power_active_w", where, float),
                   power_idle_w=_req(d, "power_idle_w", where, float), clock_mhz=clock,
                   power_cap_w=_opt(d, "power_cap_w", where, float), fabric=fabric,
                   price_usd=_opt(d, "price_usd", where, float), price_source=_opt(d, "price_source", where, str))


@dataclass(frozen=True)
class Link:
    """The host link joining the devices."""
    name: str = "pcie_gen3_x16"
    bandwidth_gbs: float = 16.0      # per direction
    latency_us: float = 1.0          # per transfer


@dataclass(frozen=True)
class System:
    """Roles -> devices, the link between them, and which device yields its core to which (``yields_to``)."""
    name: str
    devices: dict                    # draft / prm / target -> Device
    link: Link = Link()
    torch_devices: dict = field(default_factory=lambda: dict.fromkeys(ROLES, "cpu"))
    yields_to: dict = field(default_factory=dict)

    @property
    def draft(self) -> Device:
        return self.devices["draft"]

    @property
    def prm(self) -> Device:
        return self.devices["prm"]

    @property
    def target(self) -> Device:
        return self.devices["target"]

    def __post_init__(self):
        missing = [r for r in ROLES if r not in self.devices]
        if missing:
            raise UserError(f"system '{self.name}' has no {missing[0]} device")
        for k, v in self.yields_to.items():
            if k not in ROLES or v not in ROLES or k == v:
                raise UserError(f"system config '{self.name}': yields_to {k}: {v} must name two of {list(ROLES)}")
            if v in self.yields_to:
                raise UserError(f"system config '{self.name}': yields_to chains {k} -> {v} -> {self.yields_to[v]}")

    @classmethod
    def of(cls, node: Any) -> "System":
        """From a composed ``system`` node (SystemConfig); one line per bad or missing field."""
        d = _plain(node)
        name = str(d.get("name") or "?")
        where = str(entry_path("system", name))
        devices = {}
        for role in ROLES:
            if d.get(role) is None:
                raise UserError(f"{where}: no {role} device (defaults: /hardware@{role}: <name>)")
            devices[role] = Device.of(d[role])
        link = link_of(d.get("link") or {}, f"{where} link")
        return cls(name=name, devices=devices, link=link,
                   torch_devices={str(k): str(v) for k, v in (d.get("torch_devices") or {}).items()}
                   or dict.fromkeys(ROLES, "cpu"),
                   yields_to={str(k): str(v) for k, v in (d.get("yields_to") or {}).items()})

    @classmethod
    def pair(cls, name: str, draft: Device, verifier: Device, link: Link) -> "System":
        """A two-device system: the draft on ``draft``, PRM and target slots on ``verifier``."""
        return cls(name=name, devices={"draft": draft, "prm": verifier, "target": verifier}, link=link)


def device(name: str, cfg: Any = None) -> Device:
    """Hardware ``name``: the run's own device of that name when ``cfg``'s system has one (it carries the run's
    overrides), else the ``hardware`` group entry."""
    if cfg is not None:
        for role in ROLES:
            node = cfg.system[role]
            if node is not None and node.name == name:
                return Device.of(node)
    return Device.of(group_entry("hardware", name))


def system(name: str, cfg: Any = None) -> System:
    """System ``name``: the run's own when ``cfg`` runs on it (with its overrides), else the ``system`` group entry."""
    if cfg is not None and cfg.system.name == name:
        return System.of(cfg.system)
    return System.of(group_entry("system", name))


def link_of(node: Any, where: str) -> Link:
    """A Link from a LinkConfig node (``where`` names it in errors)."""
    d = _plain(node)
    return Link(name=str(d.get("name", Link.name)),
                bandwidth_gbs=_opt(d, "bandwidth_gbs", where, float, Link.bandwidth_gbs),
                latency_us=_opt(d, "latency_us", where, float, Link.latency_us))


# ----------------------------------------------------------------------------- parsing
def _plain(node: Any) -> dict:
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
    return dict(node or {})


def _req(d: dict, key: str, where: str, typ: type):
    v = d.get(key)
    if v is None or v == "???":
        raise UserError(f"{where}: {key} is missing")
    return _cast(v, key, where, typ)


def _opt(d: dict, key: str, where: str, typ: type, default=None):
    v = d.get(key)
    return default if v is None or v == "???" else _cast(v, key, where, typ)


def _cast(v, key: str, where: str, typ: type):
    try:
        return typ(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {key}={v!r} is not a {typ.__name__}") from None


def _fabric(f: Any, where: str) -> Fabric:
    f = dict(f)
    w = f"{where} fpga"
    kind = _req(f, "dsp_kind", w, str)
    if kind not in DSP_KINDS:
        raise UserError(f"{w}: dsp_kind '{kind}'; expected one of {list(DSP_KINDS)}")
    banks = {}
    for b in BANKS:
        if f.get(b) is not None:
            bd, wb = dict(f[b]), f"{where} fpga.{b}"
            bank = MemoryBank(_req(bd, "type", wb, str), _req(bd, "gb", wb, float), _req(bd, "channels", wb, int),
                              _req(bd, "channel_gbs", wb, float))
            banks[b] = bank
    slrs = _opt(f, "slrs", w, int, 1)
    shell = tuple({str(k): float(v) for k, v in dict(s).items()} for s in (f.get("slr_shell") or ()))
    if shell and len(shell) != slrs:
        raise UserError(f"{w}: slr_shell has {len(shell)} entries for {slrs} SLRs")
    avail = tuple({str(k): int(v) for k, v in dict(s).items()} for s in (f.get("slr_available") or ()))
    if avail and len(avail) != slrs:
        raise UserError(f"{w}: slr_available has {len(avail)} entries; expected one per SLR ({slrs})")
    sll_avail = tuple(int(v) for v in (f.get("sll_available") or ()))
    if sll_avail and len(sll_avail) != slrs - 1:
        raise UserError(f"{w}: sll_available has {len(sll_avail)} entries; expected one per SLR boundary ({slrs - 1})")
    return Fabric(dsp=_req(f, "dsp", w, int), dsp_kind=kind, part=_opt(f, "part", w, str),
                  **{r: _opt(f, r, w, int) for r in ("lut", "ff", "bram36", "uram")}, banks=banks, slrs=slrs,
                  memory_slr=_opt(f, "memory_slr", w, int, 0), sll_per_boundary=_opt(f, "sll_per_boundary", w, int),
                  slr_shell=shell, slr_available=avail, sll_available=sll_avail, draft_lanes=_opt(f, "draft_lanes", w, int),
                  clocks_mhz=tuple(sorted(float(c) for c in (f.get("clocks_mhz") or ()))))
