"""The HLS models' tables: per board x clock x model x context the draft's ms/token (:mod:`.perf_table`), where
the cycles go, and per board x model the estimated resources and timing verdicts."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from heterospec.config.hardware import Device, device
from heterospec.errors import UserError
from heterospec.hls.perf import Arch, Design, check_parallelism, roofline_ms, token_ms
from heterospec.hls.resources import closes, fit, fit_slrs, usage
from heterospec.ids import board_id, draft_model_id
from heterospec.store import versioned

HLS_BREAKDOWN_SCHEMA = versioned("hls_breakdown", 2, [
    pa.field("run", pa.string()), pa.field("board", pa.string()), pa.field("clock_mhz", pa.float64()),
    pa.field("model", pa.string()), pa.field("context_len", pa.int32()),
    pa.field("component", pa.string()),  # serial: weights | stage_latency | vector | attention | token_overhead;
    # dataflow: weights (stream) | stall (prefetch FIFOs full) | chain (engine + activation chain beyond the stream)
    pa.field("cycles", pa.float64()), pa.field("ms", pa.float64()),
])
_RES = [pa.field(f"{r}{s}", t) for r in ("dsp", "lut", "ff", "bram36", "uram")
        for s, t in (("", pa.int64()), ("_available", pa.float64()), ("_util", pa.float64()))]
HLS_RESOURCES_SCHEMA = versioned("hls_resources", 2, [
    pa.field("run", pa.string()), pa.field("board", pa.string()), pa.field("model", pa.string()),
    pa.field("design", pa.string()),
    pa.field("slr", pa.string()),                   # "device" (whole part, shell margin) or slr0, slr1, ...
    pa.field("rows", pa.int32()), pa.field("cols", pa.int32()), *_RES,
    pa.field("sll", pa.int64()),                    # slrN: bits crossing the boundary above SLR N
    pa.field("sll_util", pa.float64()),
    pa.field("fits", pa.bool_()),
    pa.field("timing", pa.string()),                # device row: per modelled clock, closes or the ceiling broken
    pa.field("unchecked", pa.string()),             # resources the board config gives no total for
    pa.field("estimated", pa.string()),             # what the numbers are: per-unit estimates, not synthesis
])


def boards(cfg) -> list[Device]:
    """``hls.boards`` as typed devices; one line for a board that is not an FPGA."""
    out = [device(b, cfg) for b in cfg.hls.boards]
    for d in out:
        if d.fabric is None:
            raise UserError(f"hls.boards lists '{d.name}', a {d.kind} without an fpga: section in {d.where}")
    return out


def read_json(path: Path, what: str) -> dict:
    if not Path(path).is_file():
        raise UserError(f"{path}: {what} not found; run the earlier stage first")
    return json.loads(Path(path).read_text())


def model_tables(cfg, export: Path | None, draft_arch: dict | None = None) -> tuple[list, list, list]:
    """Perf, breakdown and resource rows for every board x clock x model x context: the reference models with
    the ``design`` engines, the run's draft (its export's shape, or ``draft_arch``) with the ``kernel`` ones."""
    h = cfg.hls
    design, unit = Design.of(dict(h.pipeline)), dict(h.resources)
    models = {name: (Arch.published(name), h.design.rows, h.design.cols) for name in h.reference_models}
    if export is not None:
        draft_arch = read_json(export, "W8A8 export manifest")["arch"]
    if draft_arch is not None and draft_model_id(cfg.models) not in models:
        models[draft_model_id(cfg.models)] = (Arch.of(draft_arch), h.kernel.rows, h.kernel.cols)
    for name, (arch, r, c) in models.items():
        check_parallelism(arch, r, c, f"hls.{'design' if name in h.reference_models else 'kernel'} ({name})")
    perf, breakdown, res = [], [], []
    estimated = "estimated from per-unit costs (hls.resources) and stated placement; not a synthesis report"
    for bcfg in boards(cfg):
        board = board_id(bcfg)
        for name, (arch, r, c) in models.items():
            u = usage(arch, r, c, design, unit, bcfg.fabric.dsp_kind, int(cfg.quantize.rope_positions), bcfg)
            f = fit(u["total"], bcfg, dict(h.shell_margin))
            slrs = fit_slrs(u, bcfg)
            timing = {clk: closes(slrs, f, dict(h.timing), clk) for clk in bcfg.kernel_clocks()}
            base = {"run": cfg.name, "board": board, "model": name, "design": h.name, "rows": r, "cols": c,
                    "estimated": estimated}
            res.append({**base, "slr": "device", **u["total"], **{k: v for k, v in f.items() if k != "unchecked"},
                        "fits": f["fits"] and all(s["fits"] for s in slrs), "sll": sum(u["sll"]), "sll_util": None,
                        "timing": "; ".join(f"{k:g} MHz: {v[1]}" for k, v in timing.items()),
                        "unchecked": ",".join(f["unchecked"])})
            res += [{**base, **{k: v for k, v in s.items() if k != "unchecked"}, "timing": None,
                     "unchecked": ",".join(s["unchecked"])} for s in slrs]
            for clk in bcfg.kernel_clocks():
                for L in h.contexts:
                    ms, cyc = token_ms(arch, r, c, bcfg, clk, design, int(L))
                    pre, _ = token_ms(arch, r, c, bcfg, clk, design, int(L), lm_head=False)
                    roof = roofline_ms(arch, bcfg, int(L), design)
                    perf.append({"run": cfg.name, "board": board, "clock_mhz": clk, "model": name,
                                 "context_len": int(L), "ms_per_token": ms, "prefill_ms_per_token": pre,
                                 "roofline_ms": roof, "bandwidth_fraction": roof / ms, "cycles": sum(cyc.values()),
                                 "rows": r, "cols": c, "weight_bytes": arch.weight_bytes(design),
                                 "kv_bytes_per_token": arch.kv_bytes_per_token(design), "design": h.name,
                                 "closes": timing[clk][0]})
                    breakdown += [{"run": cfg.name, "board": board, "clock_mhz": clk, "model": name,
                                   "context_len": int(L), "component": k, "cycles": v, "ms": v / (clk * 1e3)}
                                  for k, v in cyc.items()]
    return perf, breakdown, res
