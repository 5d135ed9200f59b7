"""The load replay's figures (heterospec.replay.load): latency against offered load, capacity at the SLO, and each
device's utilisation at capacity. Each figure ends in a caption computed from its rows: which device saturates
first, where speculation stops paying, whether the FPGA systems' case grows or shrinks with load."""
from __future__ import annotations

import textwrap

import numpy as np

from heterospec.report.labels import METHOD_COLORS, SYSTEMS
from heterospec.report.plot import grouped_bars, legend_right, panels

LOAD_METHOD_LABELS = {"target": "target only", "target_sd": "target + token spec.", "rsd": "RSD", "brsd": "BRSD",
                 "brsd_sd": "BRSD + token spec."}
SPECULATING = ("target_sd", "rsd", "brsd", "brsd_sd")
DEVICE_COLORS = {"draft": "tab:green", "prm": "tab:blue", "target": "tab:red"}


def _label(method: str) -> str:
    return LOAD_METHOD_LABELS.get(method, method)


def _system(name: str) -> str:
    return SYSTEMS.get(name, name)


def _colors():
    return METHOD_COLORS


def _traces(rows) -> str:
    return f"traces {', '.join(sorted({r['trace_set'] for r in rows}))}, profile {rows[0]['profile']}"


def _caption(fig, lines: list[str]) -> None:
    """Sentences under the panels, wrapped to the figure's width."""
    width = int(fig.get_figwidth() * 15)
    text = "\n".join(textwrap.fill(line, width) for line in lines)
    fig.text(0.01, -0.02, text, ha="left", va="top", fontsize=8)


def stops_paying(spec: list[dict], base: list[dict]) -> str:
    """Where a speculating method's P99 latency crosses the target alone's, both interpolated over the rates each
    kept up with (log-rate axis)."""
    a = sorted((r["rate_rps"], r["p99_s"]) for r in spec if r["keeps_up"])
    b = sorted((r["rate_rps"], r["p99_s"]) for r in base if r["keeps_up"])
    if not a or not b:
        return "has no load point the system kept up with"
    lo, hi = max(a[0][0], b[0][0]), min(a[-1][0], b[-1][0])
    if lo >= hi:
        return "shares no range of load with the target alone"
    xs = np.geomspace(lo, hi, 64)
    fa = np.interp(np.log(xs), np.log([x for x, _ in a]), [y for _, y in a])
    fb = np.interp(np.log(xs), np.log([x for x, _ in b]), [y for _, y in b])
    faster = fa < fb
    if faster.all():
        return f"beats the target alone at every load up to {hi:.3g} req/s"
    if not faster.any():
        return f"is slower than the target alone at every load from {lo:.3g} req/s"
    if faster[0]:
        return f"stops paying at about {xs[int(np.argmin(faster))]:.3g} req/s"
    return f"pays only above about {xs[int(np.argmax(faster))]:.3g} req/s"


def load_latency(rows):
    """P99 (solid) and P50 (dotted) latency against offered load, one panel per system, a line per method; a cross
    marks a rate the system no longer keeps up with; the dashed line is the SLO."""
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = panels(len(systems), width=4.4, height=3.4,
                       title=f"Latency under load ({_traces(rows)})")
    colors = _colors()
    lines = []
    for ax, system in zip(axes, systems):
        pts = [r for r in rows if r["system"] == system]
        order = sorted(dict.fromkeys(r["method"] for r in pts), key=lambda m: list(LOAD_METHOD_LABELS).index(m)
                       if m in LOAD_METHOD_LABELS else 99)
        by = {m: sorted((r for r in pts if r["method"] == m), key=lambda r: r["rate_rps"]) for m in order}
        for m, rs in by.items():
            ok = [r for r in rs if r["keeps_up"]]
            c = colors.get(_label(m))
            ax.plot([r["rate_rps"] for r in ok], [r["p99_s"] for r in ok], "-o", ms=3, color=c, label=_label(m))
            ax.plot([r["rate_rps"] for r in ok], [r["p50_s"] for r in ok], ":", color=c)
            over = [r for r in rs if not r["keeps_up"]]
            ax.plot([r["rate_rps"] for r in over], [min(r["p99_s"], 3 * r["slo_s"]) for r in over], "x", color=c)
        slos = sorted({r["slo_s"] for r in pts})
        for slo in slos:
            ax.axhline(slo, ls="--", color="0.4", lw=1)
        ax.set_xscale("log")
        ax.set_ylim(0, 2 * slos[-1])
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(f"latency (s): P{pts[0]['percentile']:g} solid, P50 dotted")
        ax.set_title(_system(system))
        if "target" in by:
            said = [f"{_label(m)} {stops_paying(by[m], by['target'])}" for m in SPECULATING if m in by]
            lines.append(f"{_system(system)}: " + "; ".join(said) + ".")
    legend_right(fig, axes, "method")
    _caption(fig, ["Where speculation stops paying (P99 against the target alone's): "] + lines)
    return fig


def load_capacity(rows):
    """Capacity at the SLO per system and method (bars), with each system's bottleneck in the caption."""
    slos = {r["slo_s"] for r in rows}
    limit = f"{rows[0]['slo_s']:.3g} s" if len(slos) == 1 else "each one's SLO"
    fig, axes = panels(1, width=7.5, height=3.6, title=f"Capacity at P{rows[0]['percentile']:g} <= {limit} "
                                                         f"({_traces(rows)})")
    order = {m: i for i, m in enumerate(LOAD_METHOD_LABELS)}
    pts = sorted(rows, key=lambda r: order.get(r["method"], 99))
    grouped_bars(axes[0], pts, lambda r: _system(r["system"]), lambda r: _label(r["method"]), "capacity_rps",
                 "requests/s within the SLO", labels=True, colors=_colors())
    axes[0].set_xlabel("system")
    legend_right(fig, axes, "method")
    _caption(fig, _fpga_case(rows) + _best(rows))
    return fig


def _best(rows) -> list[str]:
    out = []
    for system in dict.fromkeys(r["system"] for r in rows):
        rs = [r for r in rows if r["system"] == system]
        top = max(rs, key=lambda r: r["capacity_rps"])
        if top["capacity_rps"] > 0:
            out.append(f"{_system(system)}: most capacity with {_label(top['method'])} ({top['capacity_rps']:.3g} req/s, "
                       f"bottleneck {top['bottleneck']}).")
    return out


def _fpga_case(rows) -> list[str]:
    """Per system other than the 3-GPU one and step-level method: its unloaded speedup over 3 GPUs against its
    capacity over theirs."""
    out = []
    for r in rows:
        if r["system"] == "gpu3" or r["method"] not in ("rsd", "brsd", "brsd_sd"):
            continue
        s, c = r["unloaded_speedup_vs_gpu3"], r["capacity_vs_gpu3"]
        if s is None or c is None:
            continue
        trend = "grows" if c > s else "shrinks"
        out.append(f"{_system(r['system'])}, {_label(r['method'])}: {s:.2f}x the 3-GPU system's speed unloaded, "
                   f"{c:.2f}x its capacity: the case {trend} with load.")
    return out


def load_utilisation(rows):
    """Each device's utilisation at capacity, per system (panels) and method (groups)."""
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = panels(len(systems), width=4.2, height=3.2, title=f"Utilisation per device at capacity ({_traces(rows)})")
    order = {m: i for i, m in enumerate(LOAD_METHOD_LABELS)}
    lines = []
    for ax, system in zip(axes, systems):
        rs = sorted((r for r in rows if r["system"] == system), key=lambda r: order.get(r["method"], 99))
        long = [dict(method=_label(r["method"]), device=d, util=r[f"util_{d}"]) for r in rs for d in DEVICE_COLORS]
        grouped_bars(ax, long, lambda r: r["method"], lambda r: r["device"], "util", "busy share of the time",
                     colors=DEVICE_COLORS)
        ax.set_ylim(0, 1.05)
        ax.set_title(_system(system))
        first = {}
        for r in rs:
            if r["capacity_rps"] > 0:
                first.setdefault(r["bottleneck"], []).append(_label(r["method"]))
        if first:
            lines.append(f"{_system(system)}: " + "; ".join(f"the {d} under {', '.join(ms)}"
                                                              for d, ms in first.items()) + ".")
    legend_right(fig, axes, "device")
    _caption(fig, ["Which device saturates first (the one requests wait longest for at capacity; a batching device "
                   "counts as busy whenever it holds work):"] + lines)
    return fig


BOARD_COLORS = {"u280": "tab:purple", "v80": "tab:orange"}
KERNEL_STYLES = {"ours": "-", "paper": "--"}
FPGA_MARKERS = {1: "o", 2: "s", 4: "^"}


def load_design_space(rows):
    """The FPGA draft's design space (heterospec.replay.load.design_space): per step-level method, capacity at the
    SLO (top) and capacity per kW (bottom) against B, a line per board x kernel x FPGAs; the dashed line is the same
    method on the three-GPU system. The caption is the smallest design point that reaches it, per board."""
    methods = list(dict.fromkeys(r["method"] for r in rows if r["kernel"] != "gpu"))
    fig, axes = panels(2 * len(methods), width=4.6, height=3.3, ncols=len(methods),
                       title=f"The FPGA draft's design space under load (P{99:g} <= {rows[0]['slo_s']:.3g} s; "
                             f"traces {', '.join(sorted({r['trace_set'] for r in rows}))}, profile {rows[0]['profile']})")
    for col, method in enumerate(methods):
        ref = next((r for r in rows if r["kernel"] == "gpu" and r["method"] == method), None)
        pts = [r for r in rows if r["kernel"] != "gpu" and r["method"] == method]
        for row, (key, ylabel) in enumerate((("capacity_rps", "requests/s within the SLO"),
                                             ("capacity_per_kw", "requests/s per kW"))):
            ax = axes[row * len(methods) + col]
            for line in dict.fromkeys((r["board"], r["kernel"], r["fpgas"]) for r in pts):
                rs = sorted((r for r in pts if (r["board"], r["kernel"], r["fpgas"]) == line), key=lambda r: r["batch"])
                board, kernel, n = line
                ax.plot([r["batch"] for r in rs], [r[key] for r in rs], KERNEL_STYLES.get(kernel, ":"),
                        marker=FPGA_MARKERS.get(n, "x"), color=BOARD_COLORS.get(board), ms=4,
                        label=f"{board}, {kernel} kernel, {n} FPGA{'s' if n > 1 else ''}")
            if ref is not None:
                ax.axhline(ref[key], ls=":", color="0.3", lw=1.2, label=f"{_system(ref['system'])} ({ref['board']})")
            ax.set_xscale("log", base=2)
            batches = sorted({r["batch"] for r in pts})
            ax.set_xticks(batches, [str(b) for b in batches])
            ax.minorticks_off()
            ax.set_xlabel("sequences per FPGA weight pass (B)")
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{_label(method)}: {'capacity' if row == 0 else 'capacity per kW'}")
    legend_right(fig, axes, "design point")
    steps = rows[0]["search_steps"]      # its resolution as design_space.resolution (the report imports no replay)
    said = list(dict.fromkeys(r["answer"] for r in rows if r["answer"]))   # the stage's answer, per board and kernel
    _caption(fig, said + [f"Each capacity is one search of the same arrivals for every system, resolved to "
                          f"{100 * (2 ** (1 / 2 ** steps) - 1):.0f} % (its {steps} bisections): a point reaches the "
                          f"three GPUs within that."])
    return fig
