"""The artifact's Figure 8 tables, regenerated from the shared artifact files they are computed from.

    python -m heterospec.replay.artifact.figure8 [--artifact ../shared/heteroreason_ae]

* ``figure8/outputs/figure8_projected_compare_normalized_metrics.csv`` (weak / strong baseline, ours on U280 and on
  V80, per config and dataset, plus the mean of the datasets) from ``figure8/rebuilt_u280/`` and ``rebuilt_v80/``.
* The published Figure 8 (``Analysis/reference_results/figure_metrics.json``): the Config1 "ours" row (latency,
  throughput, J/token) from the artifact's v11 replay of the with-backtracking traces
  (``Hardware/reference_results/simulator_reference__commit634922e.json``) and the busy-average system power
  REFERENCE.md states; every row's J/token from its throughput and that power.

Neither starts from traces: the traces behind these numbers are not shared (docs/replay.md, "Figure 8 tables").
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from heterospec.errors import UserError

DATASETS = ("math500", "gsm8k", "gaokao2023en", "olympiadbench")   # figure_metrics.json's dataset_order
METRICS = ("avg_latency_s", "throughput_tokens_s", "avg_energy_kj_per_problem")
# Busy-average system power (W) the artifact's energy uses (REFERENCE.md, "Energy"): three GPUs / FPGA + two GPUs.
SYSTEM_POWER_W = {"Config1": {"gpu": 551.19, "fpga": 488.42}, "Config2": {"gpu": 506.55, "fpga": 438.09}}
COMPARE_CSV = "figure8/outputs/figure8_projected_compare_normalized_metrics.csv"
REBUILT_CSV = "figure8/rebuilt_{}/figure8_simulator_goodput_energy_normalized_metrics.csv"
V11_REFERENCE = "Hardware/reference_results/simulator_reference__commit634922e.json"
FIGURE_METRICS = "Analysis/reference_results/figure_metrics.json"


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise UserError(f"{path}: not found (the shared HeteroReason artifact files)")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def projected_compare(root: Path) -> list[dict]:
    """The projected-compare table's rows: per config and dataset the baselines (the U280 table's; the V80 table
    holds the same) and each device's "ours", each metric from the rebuilt tables' totals; then the datasets' mean."""
    rebuilt = {dev: _read_csv(root / REBUILT_CSV.format(dev)) for dev in ("u280", "v80")}
    rows = []
    for dev, table in rebuilt.items():
        for r in table:
            if r["row_type"] != "dataset" or (dev == "v80" and r["method"] != "ours"):
                continue
            total = float(r["total_latency_s"])
            rows.append(dict(row_type="dataset", config=r["config"], dataset=r["dataset"],
                             method=f"ours_{dev}" if r["method"] == "ours" else r["method"],
                             avg_latency_s=total / int(r["n_problems"]),
                             throughput_tokens_s=int(r["goodput_tokens"]) / total,
                             avg_energy_kj_per_problem=float(r["total_energy_j"]) / int(r["n_energy_problems"]) / 1e3))
    for config in sorted({r["config"] for r in rows}):
        for method in dict.fromkeys(r["method"] for r in rows if r["config"] == config):
            part = [r for r in rows if r["config"] == config and r["method"] == method and r["row_type"] == "dataset"]
            rows.append(dict(row_type="mean_of_datasets", config=config, dataset="average", method=method,
                             **{m: sum(r[m] for r in part) / len(part) for m in METRICS}))
    return rows


def published_ours(root: Path) -> dict:
    """Figure 8's Config1 "ours" metrics per dataset (in DATASETS order) from the v11 reference and the power."""
    path = root / V11_REFERENCE
    if not path.is_file():
        raise UserError(f"{path}: not found (the shared HeteroReason artifact files)")
    ref = json.loads(path.read_text())["cases"]["Config1"]["with_bt"]["datasets"]
    power = SYSTEM_POWER_W["Config1"]["fpga"]
    out = {"latency_s": [], "throughput_tokens_s": [], "energy_j_per_token": []}
    for ds in DATASETS:
        d = ref[ds]
        out["latency_s"].append(d["average_latency_ms"] / 1e3)
        out["throughput_tokens_s"].append(d["total_generated_tokens"] / d["total_latency_s"])
        out["energy_j_per_token"].append(power * d["total_latency_s"] / d["total_generated_tokens"])
    return out


def energy_per_token(published: dict) -> dict:
    """Every published row's J/token from its throughput: busy-average power / tokens per second."""
    out = {}
    for config, c in published["configs"].items():
        for method, tput in c["metrics"]["throughput_tokens_s"].items():
            power = SYSTEM_POWER_W[config]["fpga" if method == "ours" else "gpu"]
            out[(config, method)] = [power / t for t in tput]
    return out


def worst_errors(root: Path) -> dict[str, tuple[int, float]]:
    """Per regenerated table: (numbers compared, max relative error against the artifact's own file)."""
    def rel(a: float, b: float) -> float:
        return abs(a - b) / abs(b)
    out = {}
    have = {(r["row_type"], r["config"], r["dataset"], r["method"]): r for r in _read_csv(root / COMPARE_CSV)}
    ours = projected_compare(root)
    if {(r["row_type"], r["config"], r["dataset"], r["method"]) for r in ours} != set(have):
        raise UserError(f"{root / COMPARE_CSV}: its rows are not the rebuilt tables' configs x datasets x methods")
    errs = [rel(r[m], float(have[(r["row_type"], r["config"], r["dataset"], r["method"])][m]))
            for r in ours for m in METRICS]
    out[COMPARE_CSV] = (len(errs), max(errs))
    path = root / FIGURE_METRICS
    if not path.is_file():
        raise UserError(f"{path}: not found (the shared HeteroReason artifact files)")
    published = json.loads(path.read_text())["figure8"]
    want = published["configs"]["Config1"]["metrics"]
    errs = [rel(v, want[m]["ours"][k]) for m, vals in published_ours(root).items() for k, v in enumerate(vals)]
    out[f"{FIGURE_METRICS}: figure8 Config1 ours"] = (len(errs), max(errs))
    errs = [rel(v, published["configs"][c]["metrics"]["energy_j_per_token"][m][k])
            for (c, m), vals in energy_per_token(published).items() for k, v in enumerate(vals)]
    out[f"{FIGURE_METRICS}: figure8 energy_j_per_token"] = (len(errs), max(errs))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m heterospec.replay.artifact.figure8", description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=Path("../shared/heteroreason_ae"),
                    help="the shared HeteroReason artifact files")
    a = ap.parse_args(argv)
    try:
        for table, (n, err) in worst_errors(a.artifact).items():
            print(f"{table}: {n} numbers regenerated, max |relative error| {100 * err:.2g} %")
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
