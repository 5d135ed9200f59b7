"""One function per figure of the paper. Each takes the rows of one DuckDB view (dicts, one run) and returns a
matplotlib figure; :data:`FIGURES` says which view each reads, so the plotted rows are exactly the view's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from heterospec.report import load_figures
from heterospec.report.labels import METHOD_COLORS, METHOD_LABELS, SYSTEMS
from heterospec.report.plot import grouped_bars, legend_right, panels

def _system(name: str) -> str:
    return SYSTEMS.get(name, name)


def _traces(r: dict) -> str:
    return f"{r['dataset']}\n{r['trace_set']}, {r['profile']}"


def table3(rows):
    """Table III: accuracy per method and dataset, one panel per source: this run, and each paper config."""
    methods = {**METHOD_LABELS, "brsd_opt": "BRSD + opt."}
    order = {m: i for i, m in enumerate(methods)}
    sources = list(dict.fromkeys(r["source"] for r in rows))
    fig, axes = panels(len(sources), width=4.2 if len(sources) > 1 else 5.5, title="Table III: accuracy by method")
    for ax, source in zip(axes, sources):
        pts = sorted((r for r in rows if r["source"] == source), key=lambda r: order.get(r["method"], len(order)))
        grouped_bars(ax, pts, lambda r: r["dataset"], lambda r: methods.get(r["method"], r["method"]), "accuracy",
                     "accuracy (%)", labels=True, colors=METHOD_COLORS)
        ax.set_ylim(0, 105)
        ax.set_xlabel("dataset")
        ax.set_title(f"{source}: models {pts[0]['models']}" if source == "ours" else f"{source} ({pts[0]['models']})",
                     fontsize=8)
    legend_right(fig, axes, "method")
    return fig


def _design_order(label: str) -> tuple:
    """3-GPU baseline, then T2 on GPUs, then the FPGA+GPU designs: the paper's left-to-right order."""
    return (not label.startswith("3-GPU"), not label.startswith("T2"), label)


def _per_trace_set(rows, metrics, title, hue, hue_key=None, legend=""):
    """A grid: one row of panels per metric, one column per (trace set, profile); bars per dataset and ``hue``."""
    sets = sorted(dict.fromkeys((r["trace_set"], r["profile"]) for r in rows), key=lambda k: k[0].startswith("ours_"))
    hues = sorted(dict.fromkeys(map(hue, rows)), key=hue_key) if hue_key else list(dict.fromkeys(map(hue, rows)))
    colors = {h: f"C{i % 10}" for i, h in enumerate(hues)}     # a system keeps its colour in every panel
    fig, axes = panels(len(metrics) * len(sets), width=4.4, height=2.8, title=title, ncols=len(sets))
    for i, (col, label) in enumerate(metrics):
        for j, key in enumerate(sets):
            ax = axes[i * len(sets) + j]
            grouped_bars(ax, [r for r in rows if (r["trace_set"], r["profile"]) == key], lambda r: r["dataset"],
                         hue, col, label, hue_key=hue_key, colors=colors)
            if i == 0:
                ax.set_title(f"traces {key[0]}, profile {key[1]}")
    legend_right(fig, axes[:len(sets)], legend)
    return fig


def figure8(rows):
    """Figure 8: latency, goodput and energy per token of each system, per dataset and trace set."""
    return _per_trace_set(rows, [("latency_s", "latency per problem (s)"), ("goodput_tok_s", "goodput (tokens/s)"),
                                 ("j_per_token", "energy (J/token)")],
                          "Figure 8: end-to-end comparison per system (traces ours_*: this run's collect traces)",
                          lambda r: f"{r['design']}: {_system(r['system'])}", _design_order, "design: system")


METHOD_ORDER = ("target", "target + token spec.", "RSD", "RSD + token spec.", "BRSD", "BRSD + token spec.")
SPEC_COLORS = {"target": "tab:purple", "target + token spec.": "plum", "RSD": "tab:blue",
               "RSD + token spec.": "lightsteelblue", "BRSD": "tab:orange", "BRSD + token spec.": "navajowhite"}


def _method_key(m: str) -> int:
    return METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER)


def methods(rows):
    """Figure 8 with token-level speculation: per system, the target alone (plain, with token-level speculation)
    against RSD / BRSD (plain, with token-level speculation in their target writes)."""
    sets = list(dict.fromkeys((r["trace_set"], r["dataset"], r["profile"]) for r in rows))
    fig, axes = panels(len(sets), width=4.6, height=3.2, ncols=min(len(sets), 3),
                       title="Step-level vs token-level speculation per system (the paper's designs: T2 on 3 GPUs, "
                             "T1+T2 with the FPGA draft)")
    for ax, key in zip(axes, sets):
        pts = [r for r in rows if (r["trace_set"], r["dataset"], r["profile"]) == key]
        grouped_bars(ax, pts, lambda r: _system(r["system"]), lambda r: r["method"], "latency_s",
                     "latency per problem (s)", labels=True, hue_key=_method_key, colors=SPEC_COLORS)
        ax.set_title(f"traces {key[0]}, {key[1]}, profile {key[2]}", fontsize=8)
    legend_right(fig, axes, "method")
    return fig


def tau_sweep(rows):
    """Latency against tau (tokens per verification round) per system: the target alone with token-level
    speculation and step-level speculation with it (lines), their plain counterparts (dashed, flat)."""
    keys = list(dict.fromkeys((r["trace_set"], r["dataset"], r["profile"], r["system"]) for r in rows))
    systems = list(dict.fromkeys(k[3] for k in keys))
    sets = list(dict.fromkeys(k[:3] for k in keys))
    fig, axes = panels(len(sets) * len(systems), width=3.6, height=2.8, ncols=len(systems))
    fig.suptitle("Where step-level speculation stops paying: latency against the draft's tau", y=1.005)
    for i, s in enumerate(sets):
        for j, system in enumerate(systems):
            ax = axes[i * len(systems) + j]
            pts = [r for r in rows if (r["trace_set"], r["dataset"], r["profile"], r["system"]) == (*s, system)]
            taus = sorted({r["tau"] for r in pts if r["tau"] is not None})
            for m in sorted(dict.fromkeys(r["method"] for r in pts), key=_method_key):
                mine = [r for r in pts if r["method"] == m]
                color = SPEC_COLORS.get(m.replace(" + token spec.", ""))
                if mine and mine[0]["tau"] is None:
                    ax.plot([taus[0], taus[-1]] if taus else [1, 1], [mine[0]["latency_s"]] * 2, ls="--",
                            color=color, label=m)
                else:
                    xy = sorted((r["tau"], r["latency_s"]) for r in mine)
                    ax.plot(*zip(*xy), marker="o", ms=3, color=color, label=m)
            ax.set_title(f"{_system(system)}: {s[0]}, {s[1]} ({s[2]})", fontsize=7)
            ax.set_xlabel("tau (tokens per round)")
            ax.set_ylabel("latency per problem (s)")
    legend_right(fig, axes, "method (dashed: plain decoding)")
    return fig


def accuracy_latency(rows):
    """Accuracy against latency per method, one panel per system (and this machine, measured): what step-level
    speculation buys in latency and costs in accuracy next to the lossless token-level baseline."""
    systems = list(dict.fromkeys((r["dataset"], r["system"]) for r in rows))
    fig, axes = panels(len(systems), width=3.8, height=3.2, ncols=min(len(systems), 4),
                       title="Accuracy against latency per system (accuracy: this run; latency: replayed or measured)")
    markers = {"measured: sequential": "o", "measured: step_ahead": "s", "measured: evaluate": "D"}
    for ax, (ds, system) in zip(axes, systems):
        for r in sorted((r for r in rows if (r["dataset"], r["system"]) == (ds, system)),
                        key=lambda r: _method_key(r["method"])):
            ax.scatter(r["latency_s"], r["accuracy"], color=SPEC_COLORS.get(r["method"]), edgecolor="black",
                       linewidth=0.4, marker=markers.get(r["latency_from"], "o"), s=40,
                       label=r["method"] if r["latency_from"] != "measured: step_ahead" else None)
        ax.set_title(f"{_system(system)} ({ds})", fontsize=8)
        ax.set_xlabel("latency per problem (s)")
        ax.set_ylabel("accuracy (%)")
    legend_right(fig, axes, "method")
    return fig


def figure10(rows):
    """Figure 10: the ablation baseline → +T2 → +T1, speedup over the 3-GPU baseline, with and without backtracking."""
    order = {"baseline": 0, "+T2": 1, "+T1": 2}
    return _per_trace_set(rows, [("speedup", "speedup over 3-GPU (×)"), ("latency_s", "latency per problem (s)")],
                          "Figure 10: ablation (with_bt: BRSD with backtracking, no_bt: without)",
                          lambda r: f"{r['technique']} ({_system(r['system'])})",
                          lambda h: (order.get(h.split(" ")[0], 3), h), "technique (system)")


def time_shares(rows):
    """Where the time and energy go: communication share, stall ratio, energy spent on discarded work."""
    return _per_trace_set(rows, [("comm_pct", "communication (% of latency)"), ("stall_pct", "stall (% of latency)"),
                                 ("discarded_energy_pct", "energy on discarded work (%)")],
                          "Time and energy shares per system and schedule",
                          lambda r: f"{_system(r['system'])}, {r['schedule']}", None, "system, schedule")


def replay_validation(rows):
    """The replay against our own measurements, per trace set and executor, its error taken apart: noise (the
    per-problem MAE beside the noise floor of two runs of the same problem), drift (each job's draft pace against
    its executor's jobs pooled) and the model's error (the schedule-only MAE, and the error on the mean, P50 and P90
    latency with their bootstrap intervals, the quantiles by Harrell-Davis and by the sample quantile)."""
    fig, axes = panels(3, width=4.0, height=3.6, title="Replay validation: noise, drift and model error")
    label = {r["trace_set"] + ", " + r["executor"]: r for r in rows}
    per_problem = [dict(group=g, kind=kind, value=r[col]) for g, r in label.items()
                   for kind, col in [("noise floor (two runs)", "noise_floor_pct"), ("replay MAE", "mae_pct"),
                                     ("schedule-only MAE", "schedule_only_mae_pct")] if r[col] is not None]
    grouped_bars(axes[0], per_problem, lambda r: r["group"], lambda r: r["kind"], "value", "error per problem (%)",
                 labels=True, colors={"noise floor (two runs)": "lightgray", "replay MAE": "tab:blue",
                                      "schedule-only MAE": "tab:green"})
    axes[0].set_title("noise vs model, per problem", fontsize=9)
    ax = axes[1]
    # the quantiles by both estimators: Harrell-Davis (filled, what the bar judges) beside the sample's (hollow)
    stats = [("mean", "tab:orange", "error on the mean latency"),
             ("p50_hd", "tab:purple", "P50, Harrell-Davis"), ("p50", "tab:purple", "P50, sample quantile"),
             ("p90_hd", "tab:brown", "P90, Harrell-Davis"), ("p90", "tab:brown", "P90, sample quantile")]
    for j, (stat, color, name) in enumerate(stats):
        pts = [(k, r) for k, r in enumerate(label.values()) if r.get(f"{stat}_error_pct") is not None]
        x = [k - 0.3 + 0.15 * j for k, _ in pts]
        y = [r[f"{stat}_error_pct"] for _, r in pts]
        err = [[r[f"{stat}_error_pct"] - r[f"{stat}_error_low_pct"] for _, r in pts],
               [r[f"{stat}_error_high_pct"] - r[f"{stat}_error_pct"] for _, r in pts]]
        ax.errorbar(x, y, yerr=err, fmt="o", color=color, capsize=3, label=name,
                    mfc="white" if stat in ("p50", "p90") else color)
    ax.axhspan(-5, 5, color="tab:green", alpha=0.12, label="±5 % bar")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(label)), list(label), rotation=25, ha="right")
    ax.set_ylabel("replay − measured (% of measured)")
    ax.set_title("model: aggregate error, 95 % interval", fontsize=9)
    ax = axes[2]
    paced = [(k, r["draft_pace"]) for k, r in enumerate(label.values()) if r.get("draft_pace") is not None]
    bars = ax.bar([k for k, _ in paced], [v for _, v in paced], 0.6, color="tab:gray", label="draft pace of the collect")
    ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.axhspan(0.95, 1.05, color="tab:green", alpha=0.12, label="1 ± 0.05")
    ax.set_xticks(range(len(label)), list(label), rotation=25, ha="right")
    ax.set_ylim(0, max([1.3] + [v * 1.15 for _, v in paced]))
    ax.set_ylabel("draft ms per token / its executor's collects' (×)")
    ax.set_title("drift: each collect's draft pace", fontsize=9)
    legend_right(fig, axes, "")
    return fig


def serving_load(rows):
    """A serving run against the load replay: P50 and P90 latency (by Harrell-Davis and by the sample quantile) and
    throughput per load point, each measured repeat a marker, the replay on the same arrivals a line."""
    def offered(r):
        return r["rate_per_s"] if r["rate_per_s"] is not None else r["load"]

    poisson = all(r["rate_per_s"] is not None for r in rows)
    fig, axes = panels(3, width=3.8, height=3.2,
                       title=f"Serving {rows[0]['algorithm'].upper()} on this machine against the load replay "
                             f"({rows[0]['profile'] or 'not replayed'} profile)")
    # the quantiles by Harrell-Davis (filled markers, solid line: what the bars judge) and by the sample quantile
    # (hollow, dashed), the same estimator on both sides
    for ax, (m, label) in zip(axes, [("p50", "P50 latency (s)"), ("p90", "P90 latency (s)"),
                                     ("throughput", "throughput (requests/s)")]):
        series = [(f"{m}_hd_s", ", Harrell-Davis", "-", None), (f"{m}_s", ", sample quantile", "--", "white")] \
            if m != "throughput" else [(m, "", "-", None)]
        for col, tag, ls, face in series:
            for rep, marker in zip(sorted({r["repeat"] for r in rows}), "os^v"):
                pts = sorted((offered(r), r[f"measured_{col}"]) for r in rows if r["repeat"] == rep)
                ax.plot(*zip(*pts), marker=marker, ls="none", color="tab:blue", mfc=face or "tab:blue",
                        label=f"measured, repeat {rep}{tag}")
            replayed = sorted({(offered(r), r[f"replayed_{col}"]) for r in rows if r[f"replayed_{col}"] is not None})
            if replayed:
                ax.plot(*zip(*replayed), marker="x", ls=ls, color="tab:orange", label=f"load replay{tag}")
        if m == "throughput" and poisson:
            top = max(offered(r) for r in rows)
            ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--", label="offered load")
        ax.set_xlabel("offered load (requests/s)" if poisson else f"load ({rows[0]['arrivals']})")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    legend_right(fig, axes, "")
    return fig


def dfvg_tau(rows):
    """DFVG: τ (tokens per verification round) against drafted tokens per round, per strategy."""
    fig, (ax,) = panels(1, width=5, height=4, title="DFVG: τ against drafted tokens per round")
    for r in rows:
        ax.scatter(r["mean_nodes"], r["tau"], s=40, marker="^" if r["strategy"] == "tree" else "o",
                   label=f"{r['strategy']} (T={r['temperature']})")
    top = max(max(r["mean_nodes"], r["tau"]) for r in rows) + 1
    ax.plot([0, top], [1, top + 1], color="grey", lw=0.8, ls="--", label="every drafted token accepted")
    ax.set_xlabel("drafted tokens per round (mean tree nodes)")
    ax.set_ylabel("τ (tokens per verification round)")
    legend_right(fig, ax, "strategy")
    return fig


def dfvg_speedups(rows):
    """DFVG: measured speedups over target greedy decoding and over Hugging Face assisted generation."""
    fig, axes = panels(2, title="DFVG: measured speedups on this CPU")
    for ax, (col, label) in zip(axes, [("speedup_vs_target_greedy", "speedup over target greedy (×)"),
                                       ("speedup_vs_hf_assisted", "speedup over HF assisted generation (×)")]):
        grouped_bars(ax, rows, lambda r: r["method"], lambda r: r["models"], col, label, labels=True)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("method")
    legend_right(fig, axes[-1], "models")
    return fig


def dfvg_designs(rows):
    """DFVG: simulated FPGA+GPU, GPU-only speculative and plain decoding, tokens/s and J/token per strategy."""
    fig, axes = panels(2, title="DFVG: simulated designs")
    for ax, (col, label) in zip(axes, [("tokens_per_s", "tokens/s"), ("j_per_token", "energy (J/token)")]):
        grouped_bars(ax, rows, lambda r: f"{r['strategy']}\n{r['profile']}", lambda r: r["design"], col, label)
        ax.set_xlabel("strategy, latency profile")
    legend_right(fig, axes[-1], "design")
    return fig


def hls_latency(rows):
    """HLS: the draft kernel's ms/token against context length, with the HBM roofline; one panel per model."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = panels(len(models), width=4.6, height=3.6, title="HLS draft kernel: decode latency")
    for ax, model in zip(axes, models):
        roofs = set()
        for key in dict.fromkeys((r["board"], r["clock_mhz"]) for r in rows if r["model"] == model):
            pts = sorted((r for r in rows if (r["board"], r["clock_mhz"], r["model"]) == (*key, model)),
                         key=lambda r: r["context_len"])
            line, = ax.plot([r["context_len"] for r in pts], [r["ms_per_token"] for r in pts], marker="o", ms=3,
                            label=f"{key[0]} at {key[1]:g} MHz: modelled")
            if key[0] not in roofs:          # the memory roofline does not depend on the clock: one line per board
                roofs.add(key[0])
                ax.plot([r["context_len"] for r in pts], [r["roofline_ms"] for r in pts], ls="--", color="0.35",
                        label=f"{key[0]}: memory roofline (any clock)")
        ax.set_title(model)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("decode latency (ms/token)")
        ax.set_ylim(bottom=0)
    legend_right(fig, axes[-1], "board, clock")
    return fig


def hls_breakdown(rows):
    """HLS: where the time of one token goes, per component, by context length."""
    designs = list(dict.fromkeys((r["board"], r["clock_mhz"], r["model"]) for r in rows))
    fig, axes = panels(len(designs), width=4.6, title="HLS draft kernel: where the time goes", ncols=2)
    for ax, key in zip(axes, designs):
        pts = [r for r in rows if (r["board"], r["clock_mhz"], r["model"]) == key]
        contexts = sorted(dict.fromkeys(r["context_len"] for r in pts))
        bottom = [0.0] * len(contexts)
        for comp in dict.fromkeys(r["component"] for r in pts):
            ms = [sum(r["ms"] for r in pts if r["component"] == comp and r["context_len"] == c) for c in contexts]
            ax.bar([str(c) for c in contexts], ms, bottom=bottom, label=comp)
            bottom = [b + m for b, m in zip(bottom, ms)]
        ax.set_title(f"{key[0]} at {key[1]:g} MHz\n{key[2]}")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("time per token (ms)")
    legend_right(fig, axes[-1], "component")
    return fig


def kvmu_resources(rows):
    """The KVMU's LUTs and flip-flops against the pointer width (Yosys synth_xilinx)."""
    fig, (ax,) = panels(1, width=5, height=3.6, title="KVMU resources against pointer width")
    pts = sorted(rows, key=lambda r: r["pointer_bits"])
    for col, label in [("lut", "LUTs"), ("ff", "flip-flops")]:
        ax.plot([r["pointer_bits"] for r in pts], [r[col] for r in pts], marker="o", label=label)
    ax.set_xticks(sorted({r["pointer_bits"] for r in pts}))
    ax.set_xlabel("pointer width (bits)")
    ax.set_ylabel("cells (count)")
    ax.set_ylim(bottom=0)
    legend_right(fig, ax, "resource")
    return fig


def sweep(rows):
    """A parameter sweep (the threshold sweep): accuracy and target-step share per value, and the latency of the
    same traces simulated on the paper's systems and measured on this machine."""
    param = rows[0]["parameter"]
    measured = [r for r in rows if r["profile"] == "measured"]
    quality = [r for r in measured if r["schedule"] == "sequential"]
    fig, axes = panels(4, width=5.0, height=2.5, title=f"Sweep over {param}", ncols=1)
    values = sorted({float(r["value"]) for r in rows})

    def lines(ax, pts, series, col, style=None, order=None):
        for key in sorted(dict.fromkeys(map(series, pts)), key=order or (lambda k: 0)):
            xs_ys = sorted((float(r["value"]), r[col]) for r in pts if series(r) == key)
            ax.plot(*zip(*xs_ys), marker="o", ms=3, label=key, **(style(key) if style else {}))

    lines(axes[0], quality, lambda r: f"{r['dataset']}, {METHOD_LABELS.get(r['algorithm'], r['algorithm'])}", "accuracy")
    axes[0].set_ylabel("accuracy (%)")
    lines(axes[1], quality, lambda r: f"{r['dataset']}, {METHOD_LABELS.get(r['algorithm'], r['algorithm'])}",
          "target_step_share")
    axes[1].set_ylabel("target-step share (% of steps)")
    simulated = [r for r in rows if r["profile"] != "measured"]
    designs = list(dict.fromkeys(sorted((f"{r['design']}: {_system(r['system'])}" for r in simulated),
                                        key=_design_order)))
    dash = {a: ls for a, ls in zip(dict.fromkeys(r["algorithm"] for r in rows), ["-", "--", ":", "-."] * 4)}

    def style(key):
        design, _, algorithm = key.rpartition(" | ")
        return {"color": f"C{designs.index(design) % 10}" if design in designs else None,
                "ls": dash.get(algorithm, "-")}
    lines(axes[2], simulated, lambda r: f"{r['design']}: {_system(r['system'])} | {r['algorithm']}", "latency_s", style,
          order=lambda k: (list(dash).index(k.rpartition(" | ")[2]), _design_order(k)))
    axes[2].set_ylabel("simulated latency per problem (s)")
    axes[2].set_title(f"paper's systems, profile {', '.join(sorted({r['profile'] for r in simulated})) or '-'}",
                      fontsize=8)
    executors = list(dict.fromkeys(r["schedule"] for r in measured))
    lines(axes[3], measured, lambda r: f"{r['schedule']} executor | {r['algorithm']}", "latency_s",
          lambda k: {"ls": dash.get(k.rpartition(" | ")[2], "-"),
                     "color": f"C{executors.index(k.split(' ')[0]) % 10}"})
    axes[3].set_ylabel("measured latency per problem (s)")
    axes[3].set_title("this machine (collect stage)", fontsize=8)
    titles = ["dataset, algorithm", "dataset, algorithm", "design: system | algorithm", "executor | algorithm"]
    for ax, title in zip(axes, titles):
        ax.set_xticks(values)
        ax.set_xlabel(param)
        ax.legend(fontsize=7, title=title, title_fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5),
                  frameon=False)
    return fig


@dataclass(frozen=True)
class Figure:
    view: str                       # the DuckDB view whose rows (of one run) the figure plots
    draw: Callable
    group: str                      # the report's subcategory


FIGURES: dict[str, Figure] = {
    "table3": Figure("table3_vs_paper", table3, "Accuracy"),
    "figure8": Figure("replay_figure8", figure8, "Replay"),
    "figure10": Figure("replay_figure10", figure10, "Replay"),
    "time_shares": Figure("replay_time_shares", time_shares, "Replay"),
    "methods": Figure("replay_methods", methods, "Replay"),
    "tau_sweep": Figure("tau_sweep_design", tau_sweep, "Replay"),
    "accuracy_latency": Figure("accuracy_latency", accuracy_latency, "Replay"),
    "replay_validation": Figure("replay_validation_summary", replay_validation, "Replay"),
    "serving_load": Figure("serving_validation", serving_load, "Serving"),
    "dfvg_tau": Figure("dfvg_summary", dfvg_tau, "DFVG"),
    "dfvg_speedups": Figure("dfvg_speed", dfvg_speedups, "DFVG"),
    "dfvg_designs": Figure("dfvg_replay_summary", dfvg_designs, "DFVG"),
    "hls_latency": Figure("hls_perf", hls_latency, "HLS"),
    "hls_breakdown": Figure("hls_breakdown", hls_breakdown, "HLS"),
    "kvmu_resources": Figure("kvmu_synth", kvmu_resources, "HLS"),
    "sweep": Figure("sweep_systems", sweep, "Sweep"),
    "load_latency": Figure("load_curve", load_figures.load_latency, "Load"),
    "load_capacity": Figure("load_capacity_summary", load_figures.load_capacity, "Load"),
    "load_utilisation": Figure("load_capacity_summary", load_figures.load_utilisation, "Load"),
    "load_design_space": Figure("load_design_space_summary", load_figures.load_design_space, "Load"),
}
