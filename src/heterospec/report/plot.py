"""Drawing helpers shared by the figures: grouped bars, dot strips, legends outside the axes."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.grid": True, "grid.alpha": 0.3,
                     "axes.axisbelow": True, "savefig.dpi": 130, "svg.hashsalt": "heterospec"})


def panels(n: int, width: float = 4.2, height: float = 3.4, title: str = "", ncols: int | None = None):
    """``n`` axes, ``ncols`` to a row (default all in one row), sized for a report page."""
    ncols = min(n, ncols or n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 1.6, height * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    return fig, list(axes.flat[:n])


def grouped_bars(ax, rows: list[dict], group, hue, value: str, ylabel: str, labels: bool = False,
                 hue_key=None, colors: dict | None = None) -> None:
    """One cluster of bars per ``group(row)``, one bar per ``hue(row)`` (sorted by ``hue_key``), height ``row[value]``;
    ``colors`` fixes a hue's colour (so it is the same in every panel)."""
    groups = list(dict.fromkeys(group(r) for r in rows))
    hues = sorted(dict.fromkeys(hue(r) for r in rows), key=hue_key) if hue_key else list(dict.fromkeys(map(hue, rows)))
    width = 0.8 / max(len(hues), 1)
    for j, h in enumerate(hues):
        xs, ys = [], []
        for r in rows:
            if hue(r) == h and r[value] is not None:
                xs.append(groups.index(group(r)) - 0.4 + width * (j + 0.5))
                ys.append(r[value])
        bars = ax.bar(xs, ys, width, label=h, color=(colors or {}).get(h))
        if labels:
            ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=1)
    tilt = sum(len(str(g)) for g in groups) > 40
    ax.set_xticks(range(len(groups)), groups, rotation=25 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylabel(ylabel)


def legend_right(fig, ax, title: str = "") -> None:
    """The legend outside the plot, right of the last axes, so it never hides a bar; ``ax`` may be a list of axes
    (each label once, in order of appearance)."""
    entries: dict = {}
    for a in ax if isinstance(ax, list) else [ax]:
        for handle, name in zip(*a.get_legend_handles_labels()):
            entries.setdefault(name, handle)
    handles, names = list(entries.values()), list(entries)
    if handles:
        fig.legend(handles, names, title=title or None, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def save(fig, stem) -> list:
    """Write ``<stem>.png`` and ``<stem>.svg``; returns the two paths."""
    out = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.tight_layout()
    for path in out:
        fig.savefig(path, bbox_inches="tight", metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return out
