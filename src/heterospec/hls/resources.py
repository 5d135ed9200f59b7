"""Resource and timing model of a draft decoder design, per SLR where the board has several.

Estimated, not synthesised (the matrix-vector engine's RTL is synthesised beside it: heterospec.hls.engine_check,
docs/hls.md "The engine measured"): each block's DSP / LUT / FF / BRAM36 / URAM comes from per-unit costs
(``hls.resources``), placed in the SLR the design names (``hls.pipeline.slr_*``); memory ports and their prefetch
FIFOs sit where the board's memory controllers are (the U280's HBM ports are all in SLR0). Every stream between
blocks in different SLRs crosses each SLR boundary on its way: one super-long line (SLL) per bit and
``crossing_regs`` flip-flops per bit on each side. A design "closes" at a clock when every SLR stays under that
clock's stated utilisation ceilings (``hls.timing``) -- an assumption about congestion, not a timing report.
"""
from __future__ import annotations

import math
from typing import Any

from heterospec.config.hardware import Device
from heterospec.hls.perf import Arch, Design
from heterospec.ids import clock_khz

FPGA_RESOURCES = ("dsp", "lut", "ff", "bram36", "uram")


def _block(slr: int, **r: float) -> dict:
    return {"slr": slr, **{k: float(r.get(k, 0.0)) for k in FPGA_RESOURCES}}


def blocks(arch: Arch, rows: int, cols: int, d: Design, unit: dict, dsp_kind: str, max_context: int,
           memory_slr: int = 0, batch: int = 1) -> dict[str, dict]:
    """Per block: its SLR and estimated resources; ``batch``: sequences per weight pass (each its own activation
    buffers, held while the weights stream past them; the attention serves them one after another)."""
    per_dsp = unit["macs_per_dsp_dsp58"] if dsp_kind == "dsp58" else unit["macs_per_dsp_dsp48e2"]
    n_eng = 1 if d.engines == "shared" else len(arch.engines())
    mv_macs = n_eng * rows * cols
    ports = d.weight_ports + d.kv_ports
    word_brams = math.ceil(d.port_bits / 72)               # one 72-bit BRAM36 / URAM column per 64 data bits (+ECC)
    lanes = d.vector_lanes
    h, kv, hd = arch.heads, arch.kv_heads, arch.head_dim
    act_bytes = 2 * 4 * (2 * arch.hidden + (h + 2 * kv) * hd + 2 * arch.intermediate) * batch   # double-buffered fp32
    score_bytes = 4 * h * max_context                                                   # softmax's two passes
    vb = unit["vector_bytes_per_bram"]
    out = {
        "mv_engines": _block(d.slr_mv, dsp=math.ceil(mv_macs / per_dsp), lut=mv_macs * unit["lut_per_mac"],
                             ff=mv_macs * unit["ff_per_mac"]),
        "attention": _block(d.slr_attention, dsp=math.ceil(d.attention_macs / per_dsp) + d.softmax_lanes * unit["dsp_per_exp"],
                            lut=d.attention_macs * unit["lut_per_mac"] + d.softmax_lanes * unit["lut_per_exp"],
                            ff=d.attention_macs * unit["ff_per_mac"] + d.softmax_lanes * unit["ff_per_exp"],
                            bram36=math.ceil(score_bytes / vb)),
        "vector": _block(d.slr_vector, dsp=lanes * (unit["dsp_per_lane"] + unit["dsp_per_exp"]),
                         lut=lanes * (unit["lut_per_lane"] + unit["lut_per_exp"]),
                         ff=lanes * (unit["ff_per_lane"] + unit["ff_per_exp"]), bram36=math.ceil(act_bytes / vb)),
        "memory_ports": _block(memory_slr, lut=ports * (unit["port_lut_base"] + unit["port_lut_per_bit"] * d.port_bits),
                               ff=ports * (unit["port_ff_base"] + unit["port_ff_per_bit"] * d.port_bits),
                               bram36=ports * word_brams),
        "control": _block(d.slr_control, lut=unit["control_lut"], ff=unit["control_ff"], bram36=unit["stream_bram"]),
    }
    if d.dataflow:       # weight prefetch FIFOs: one per weight port, next to the ports
        depth = math.ceil(d.prefetch_words / unit["uram_depth"])
        out["prefetch_fifos"] = _block(memory_slr, uram=d.weight_ports * word_brams * depth,
                                       lut=d.weight_ports * unit["fifo_lut"], ff=d.weight_ports * unit["fifo_ff"])
    return out


def streams(rows: int, cols: int, d: Design, memory_slr: int) -> list[tuple[str, int, int, int]]:
    """(name, from SLR, to SLR, bits) of every inter-block stream that can cross an SLR boundary."""
    shared = d.ports == "shared"
    w_bits = (d.weight_ports + (d.kv_ports if shared else 0)) * d.port_bits
    kv_bits = min(d.attention_macs * 8, (d.weight_ports + d.kv_ports) * d.port_bits) if shared else d.kv_ports * d.port_bits
    return [("weights", memory_slr, d.slr_mv, w_bits), ("kv_read", memory_slr, d.slr_attention, kv_bits),
            ("kv_write", d.slr_vector, memory_slr, 2 * 8 * d.vector_lanes),
            ("activations", d.slr_vector, d.slr_mv, 8 * cols), ("accumulators", d.slr_mv, d.slr_vector, 32 * rows),
            ("q_and_context", d.slr_vector, d.slr_attention, 2 * 32 * d.vector_lanes)]


def usage(arch: Arch, rows: int, cols: int, d: Design, unit: dict, dsp_kind: str, max_context: int,
          board: Device, batch: int = 1) -> dict:
    """Totals, per-SLR use (with crossing flip-flops) and SLLs per boundary; per-SLR keys only on multi-SLR boards."""
    fpga = board.fabric
    nslr, mem_slr = fpga.slrs, fpga.memory_slr
    blk = blocks(arch, rows, cols, d, unit, dsp_kind, max_context, mem_slr, batch)
    per_slr = [dict.fromkeys(FPGA_RESOURCES, 0.0) for _ in range(nslr)]
    for b in blk.values():
        s = min(b["slr"], nslr - 1)
        for r in FPGA_RESOURCES:
            per_slr[s][r] += b[r]
    sll = [0] * max(nslr - 1, 0)
    for _, a, b, bits in streams(rows, cols, d, mem_slr):
        a, b = min(a, nslr - 1), min(b, nslr - 1)
        for boundary in range(min(a, b), max(a, b)):
            sll[boundary] += bits
            per_slr[boundary]["ff"] += bits * unit["crossing_regs"]
            per_slr[boundary + 1]["ff"] += bits * unit["crossing_regs"]
    total = {r: int(math.ceil(sum(s[r] for s in per_slr))) for r in FPGA_RESOURCES}
    return {"total": total, "slrs": [{r: int(math.ceil(s[r])) for r in FPGA_RESOURCES} for s in per_slr],
            "sll": sll, "blocks": blk}


def fit(used: dict, board: Device, margin: dict) -> dict[str, Any]:
    """Per resource of the whole device: available, utilisation, and whether it fits. Available is the sum of the
    board's published per-SLR figures (``fpga.slr_available``: what the shell leaves), else the device total less
    the assumed shell ``margin``."""
    per_slr = board.fabric.slr_available
    out: dict[str, Any] = {"fits": True, "unchecked": []}
    for r in FPGA_RESOURCES:
        total = board.fabric.total(r)
        if total is None:
            out["unchecked"].append(r)
            out[f"{r}_available"] = None
            out[f"{r}_util"] = None
            continue
        avail = float(sum(s[r] for s in per_slr)) if per_slr else float(total) * (1.0 - float(margin.get(r, 0.0)))
        out[f"{r}_available"] = avail
        out[f"{r}_util"] = used[r] / avail if avail else (0.0 if used[r] == 0 else math.inf)
        if used[r] > avail:
            out["fits"] = False
    return out


def fit_slrs(u: dict, board: Device) -> list[dict]:
    """Per SLR: available, use and utilisation. Available is the board's published per-SLR figure
    (``fpga.slr_available``), else an equal share of the device less the shell's assumed share (``fpga.slr_shell``);
    SLLs per boundary likewise (``fpga.sll_available``, else ``fpga.sll_per_boundary``)."""
    fpga = board.fabric
    nslr = len(u["slrs"])
    if nslr < 2:
        return []
    published = fpga.slr_available
    shell = list(fpga.slr_shell or [{}] * nslr)
    sll_cap = list(fpga.sll_available or [fpga.sll_per_boundary] * (nslr - 1))
    rows = []
    for i, used in enumerate(u["slrs"]):
        row: dict[str, Any] = {"slr": f"slr{i}", "fits": True, "unchecked": []}
        for r in FPGA_RESOURCES:
            if fpga.total(r) is None:
                row["unchecked"].append(r)
                row.update({r: used[r], f"{r}_available": None, f"{r}_util": None})
                continue
            avail = float(published[i][r]) if published else \
                float(fpga.total(r)) / nslr * (1.0 - float(dict(shell[i]).get(r, 0.0)))
            row.update({r: used[r], f"{r}_available": avail, f"{r}_util": used[r] / avail if avail else math.inf})
            row["fits"] &= used[r] <= avail
        bits = u["sll"][i] if i < len(u["sll"]) else 0
        cap = sll_cap[i] if i < len(sll_cap) else None
        row["sll"] = bits
        row["sll_util"] = bits / float(cap) if cap else None
        rows.append(row)
    return rows


def closes(slr_rows: list[dict], total_row: dict, timing: dict, clock_mhz: float) -> tuple[bool, str]:
    """Whether the model says the design closes timing at ``clock_mhz``, and why not (the first ceiling broken).
    Ceilings are per clock (``hls.timing``); a clock with none stated is reported as unknown."""
    ceil = next((dict(v) for k, v in timing.items() if clock_khz(float(k)) == clock_khz(clock_mhz)), None)
    if ceil is None:
        return False, f"no timing assumption stated for {clock_mhz:g} MHz"
    for row in slr_rows or [total_row]:
        for r in (*FPGA_RESOURCES, "sll"):
            u = row.get(f"{r}_util")
            if u is not None and r in ceil and u > float(ceil[r]):
                return False, f"{row.get('slr', 'device')} {r} {100 * u:.0f} % > {100 * float(ceil[r]):.0f} %"
    return True, "closes"
