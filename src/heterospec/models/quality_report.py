"""The trio's quality report (``heterospec models evaluate``): one Parquet row per run.

The bars the embedded default must meet (target accuracy >= 75 %, draft >= 20 % and at least
30 points below the target, PRM AUROC >= 0.95 on the draft's own steps, whole trio trained in
<= 10 minutes) are checked here and printed beside the numbers, so a tuned task that drifts below
them shows it.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from heterospec.config import dataset_config
from heterospec.models.role_manifest import read_manifest, record_training_machine
from heterospec.paths import ROLES, RunPaths
from heterospec.store import read_parquet, versioned, write_parquet

MODEL_QUALITY_SCHEMA = versioned("model_quality", 2, [
    pa.field("run", pa.string()),
    pa.field("experiment", pa.string()),
    pa.field("models", pa.string()),
    pa.field("problems", pa.int32()),               # held-out synthetic problems evaluated
    pa.field("draft_accuracy", pa.float64()),       # % correct, greedy
    pa.field("target_accuracy", pa.float64()),
    pa.field("gap_points", pa.float64()),           # target - draft, percentage points
    pa.field("prm_auroc", pa.float64()),            # on the draft's greedy steps: correct vs wrong (checker)
    pa.field("prm_false_reject", pa.float64()),     # correct draft steps scoring < threshold
    pa.field("prm_miss", pa.float64()),             # wrong draft steps scoring >= threshold
    pa.field("threshold", pa.float64()),            # algorithm.threshold the two rates use
    pa.field("draft_steps_correct", pa.int32()),    # draft steps judged (after each correct prefix)
    pa.field("draft_steps_wrong", pa.int32()),
    pa.field("prm_auroc_corruptions", pa.float64()),  # correct steps vs one synthetic corruption per problem
    pa.field("params_draft", pa.int64()),
    pa.field("params_prm", pa.int64()),
    pa.field("params_target", pa.int64()),
    pa.field("train_s_draft", pa.float64()),
    pa.field("train_s_prm", pa.float64()),
    pa.field("train_s_target", pa.float64()),
    pa.field("meets_bars", pa.bool_()),             # the embedded default's quality bars
])

BARS = {"target_accuracy": 75.0, "draft_accuracy": 20.0, "gap_points": 30.0, "prm_auroc": 0.95}
TRAIN_BUDGET_S = 600.0


def _bars_met(row: dict) -> bool:
    return (row["target_accuracy"] >= BARS["target_accuracy"] and row["draft_accuracy"] >= BARS["draft_accuracy"]
            and row["gap_points"] >= BARS["gap_points"] and (row["prm_auroc"] or 0) >= BARS["prm_auroc"])


def quality_report(cfg, paths: RunPaths, overrides: list[str], out: Path, reuse: bool = False) -> pa.Table:
    """Evaluate the trained trio on held-out problems and write the report row to ``out``."""
    from heterospec.models.quality import evaluate_quality   # torch: only when a report is made

    if reuse and Path(out).exists():
        return read_parquet(out, MODEL_QUALITY_SCHEMA)
    manifests = {role: read_manifest(paths.model_manifest(role)) for role in ROLES}
    synthetic = dataset_config(cfg, "synthetic", overrides)
    n = synthetic.limit if cfg.eval_limit < 0 else min(cfg.eval_limit, synthetic.limit)
    threshold = float(cfg.algorithm.threshold)
    q = evaluate_quality(cfg.models, synthetic, {r: Path(m["path"]) for r, m in manifests.items()}, n=n,
                         threshold=threshold)
    row = dict(run=cfg.name, experiment=cfg.experiment, models=cfg.models.name, problems=n,
               draft_accuracy=100 * q["draft_accuracy"], target_accuracy=100 * q["target_accuracy"],
               gap_points=100 * (q["target_accuracy"] - q["draft_accuracy"]), prm_auroc=q["prm_draft_auroc"],
               prm_false_reject=q["prm_draft_false_reject"], prm_miss=q["prm_draft_miss"], threshold=threshold,
               draft_steps_correct=q["prm_draft_n_correct"], draft_steps_wrong=q["prm_draft_n_wrong"],
               prm_auroc_corruptions=q["prm_auroc"])
    for role, m in manifests.items():
        row[f"params_{role}"] = m.get("train", {}).get("params")
        row[f"train_s_{role}"] = m.get("train", {}).get("wall_s")
    row["meets_bars"] = _bars_met(row)
    for m in manifests.values():   # the machines that trained the trio, also when another run trained it
        if m.get("source") == "train":
            record_training_machine(paths.root, cfg.name, m)
    write_parquet([row], out, MODEL_QUALITY_SCHEMA)
    return read_parquet(out, MODEL_QUALITY_SCHEMA)


def print_quality(table: pa.Table) -> None:
    """The report as a few readable lines, with each bar marked met or missed."""
    for row in table.to_pylist():
        def mark(ok: bool) -> str:
            return "ok" if ok else "MISSED"
        print(f"trio quality for run {row['run']} (models={row['models']}, {row['problems']} held-out problems)")
        print(f"  target accuracy  {row['target_accuracy']:6.1f} %   bar >= {BARS['target_accuracy']:.0f} %   "
              f"{mark(row['target_accuracy'] >= BARS['target_accuracy'])}")
        print(f"  draft accuracy   {row['draft_accuracy']:6.1f} %   bar >= {BARS['draft_accuracy']:.0f} % and "
              f">= {BARS['gap_points']:.0f} points below the target (gap {row['gap_points']:.1f})   "
              f"{mark(row['draft_accuracy'] >= BARS['draft_accuracy'] and row['gap_points'] >= BARS['gap_points'])}")
        print(f"  PRM AUROC        {row['prm_auroc']:6.3f}     bar >= {BARS['prm_auroc']:.2f}   "
              f"{mark(row['prm_auroc'] >= BARS['prm_auroc'])}   on the draft's own greedy steps "
              f"({row['draft_steps_correct']} correct, {row['draft_steps_wrong']} wrong)")
        print(f"  at threshold {row['threshold']:g}  false reject {100 * row['prm_false_reject']:.1f} % of correct steps, "
              f"miss {100 * row['prm_miss']:.1f} % of wrong ones")
        print(f"  PRM AUROC        {row['prm_auroc_corruptions']:6.3f}     on synthetic corruptions (second column)")
        t = {r: row[f"train_s_{r}"] for r in ROLES if row[f"train_s_{r}"] is not None}
        if t:
            # roles train as separate jobs, two at a time on a 2-core machine; the PRM waits for the draft
            wall = max(t.get("draft", 0) + t.get("prm", 0), t.get("target", 0))
            print("  training         " + ", ".join(f"{r} {s:.0f} s" for r, s in t.items())
                  + f"; wall on 2 cores max(draft + prm, target) = {wall:.0f} s (budget {TRAIN_BUDGET_S:.0f} s)")
        params = ", ".join(f"{r} {row[f'params_{r}']:,}" for r in ROLES if row[f"params_{r}"] is not None)
        if params:
            print(f"  parameters       {params}")
        print(f"  all bars met: {'yes' if row['meets_bars'] else 'no'}")
