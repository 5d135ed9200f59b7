"""The load replay checked against a serving run (docs/serving.md).

* Outputs: every served request against the sequential collect of the same problem: answer, output, steps, the
  PRM's verdicts, every call's tokens, and by how much the PRM's scores moved (padding's rounding).
* Load: per load point and repeat, the measured P50 / P90 latency and throughput against the load replay's on the
  same arrivals, on the run's collect system under the sequential schedule, priced by the ``measured`` profile with
  batched prices fitted from the serving run's own passes (written as ``batch_prices/v1``).

    python -m heterospec.replay.serving_validate experiment=ci
"""
from __future__ import annotations

import logging
import platform
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from heterospec import stage
from heterospec.config.serving_checks import serving_dataset
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.reasoning.collect_schemas import CALLS_TRACE_SCHEMA, PROBLEMS_SCHEMA, STEPS_TRACE_SCHEMA
from heterospec.reasoning.serving_schemas import TABLES
from heterospec.replay.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.store.parquet import read_parquet, versioned, write_parquet

log = logging.getLogger("heterospec.serving_validate")

_RUN = [pa.field("run", pa.string()), pa.field("dataset", pa.string()), pa.field("algorithm", pa.string()),
        pa.field("load_index", pa.int32()), pa.field("repeat", pa.int32())]

OUTPUTS_SCHEMA = versioned("serving_outputs", 1, _RUN + [
    pa.field("request", pa.int32()),
    pa.field("problem_id", pa.string()),
    pa.field("identical_answer", pa.bool_()),     # the \boxed{} answer
    pa.field("identical_output", pa.bool_()),     # the whole reasoning text
    pa.field("identical_steps", pa.bool_()),      # the controller's steps: position and outcome, in order
    pa.field("identical_verdicts", pa.bool_()),   # every PRM call's verdict, in order
    pa.field("identical_calls", pa.bool_()),      # every call's role, phase, tokens in and out and KV length, in order
    pa.field("prm_calls", pa.int32()),
    pa.field("max_score_diff", pa.float64()),     # largest |PRM score - the sequential collect's| over its PRM calls
])

VALIDATION_SCHEMA = versioned("serving_validation", 1, _RUN + [
    pa.field("arrivals", pa.string()),            # poisson | closed | timestamps
    pa.field("load", pa.float64()),
    pa.field("rate_per_s", pa.float64()),         # poisson: offered requests per second
    pa.field("requests", pa.int32()),
    pa.field("measured_p50_s", pa.float64()),     # request latency, arrival to its last step
    pa.field("measured_p90_s", pa.float64()),
    pa.field("measured_throughput", pa.float64()),   # requests per second: requests / (last end - first arrival)
    pa.field("replayed_p50_s", pa.float64()),     # the load replay on the same arrivals (null: not replayed)
    pa.field("replayed_p90_s", pa.float64()),
    pa.field("replayed_throughput", pa.float64()),
    pa.field("system", pa.string()),              # what the replay modelled
    pa.field("schedule", pa.string()),
    pa.field("profile", pa.string()),
])


def load_summary(arrivals: list[float], ends: list[float]) -> tuple[float, float, float]:
    """(P50, P90 latency, throughput) of requests arriving at ``arrivals`` and ending at ``ends`` (s): percentiles
    linear between order statistics (DuckDB's quantile_cont), throughput = requests / (last end - first arrival)."""
    lat = np.asarray(ends, float) - np.asarray(arrivals, float)
    span = max(ends) - min(arrivals)
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 90)), len(lat) / span


def _by(table: pa.Table, keys: tuple[str, ...], order: tuple[str, ...]) -> dict[tuple, list[dict]]:
    """Rows grouped by ``keys``, each group sorted by ``order``."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in table.to_pylist():
        out[tuple(r[k] for k in keys)].append(r)
    for rows in out.values():
        rows.sort(key=lambda r: tuple(r[k] for k in order))
    return out


_CALL = ("role", "phase", "tokens_in", "tokens_out", "kv_len")


def outputs(serving: dict[str, pa.Table], reference: dict[str, pa.Table]) -> list[dict]:
    """Each served request against the sequential collect's trace of its problem (OUTPUTS_SCHEMA rows)."""
    ref_problems = {r["problem_id"]: r for r in reference["problems"].to_pylist()}
    ref_calls = _by(reference["calls"], ("problem_id",), ("step_idx", "start_ns"))
    ref_steps = _by(reference["steps"], ("problem_id",), ("step_idx",))
    calls = _by(serving["calls"], ("load_index", "repeat", "request"), ("step_idx", "start_ns"))
    steps = _by(serving["steps"], ("load_index", "repeat", "request"), ("step_idx",))
    out = []
    for r in serving["requests"].to_pylist():
        pid, key = r["problem_id"], (r["load_index"], r["repeat"], r["request"])
        if pid not in ref_problems:
            raise UserError(f"serving: problem {pid} is not in the sequential collect of {r['algorithm']}; "
                            f"serving.problems must not exceed the problems collected (collect.limit)")
        mine, theirs = calls[key], ref_calls[(pid,)]
        prm = [(a["prm_score"], b["prm_score"]) for a, b in zip(mine, theirs) if a["role"] == b["role"] == "prm"]
        out.append(dict(
            run=r["run"], dataset=r["dataset"], algorithm=r["algorithm"], load_index=r["load_index"],
            repeat=r["repeat"], request=r["request"], problem_id=pid,
            identical_answer=r["prediction"] == ref_problems[pid]["prediction"],
            identical_output=r["output"] == ref_problems[pid]["output"],
            identical_steps=[(s["position"], s["outcome"]) for s in steps[key]] ==
                            [(s["position"], s["outcome"]) for s in ref_steps[(pid,)]],
            identical_verdicts=[c["outcome"] for c in mine if c["role"] == "prm"] ==
                               [c["outcome"] for c in theirs if c["role"] == "prm"],
            identical_calls=[tuple(c[k] for k in _CALL) for c in mine] == [tuple(c[k] for k in _CALL) for c in theirs],
            prm_calls=sum(c["role"] == "prm" for c in mine),
            max_score_diff=max((abs(a - b) for a, b in prm), default=0.0)))
    return out


def device_name(device: str) -> str:
    """The name of a torch device on this machine: the GPU's, or the CPU's model name."""
    if device.startswith("cuda"):
        import torch
        return torch.cuda.get_device_name(int(device.split(":")[1]) if ":" in device else 0)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def batch_prices(passes: pa.Table, cfg) -> list[dict]:
    """The serving run's passes as measured batched prices (``batch_prices/v1``): one row per pass with its mean
    context and mean tokens fed per sequence; a draft lane's decode call as its mean per-token pass, counted once
    per token."""
    names = {}
    rows = []
    for p in passes.to_pylist():
        role, n = p["role"], p["batch"]
        device = str(cfg.system.torch_devices[role])
        names.setdefault(device, device_name(device))
        ms = (p["end_ns"] - p["start_ns"]) / 1e6
        if p["forwards"] == 0:
            continue
        if p["forwards"] > 1:             # a lane's whole decode call: tokens one by one after its context
            context, tokens, ms, reps = p["held"][0] + p["forwards"] // 2, 1, ms / p["forwards"], p["forwards"]
        else:
            context, tokens, reps = round(sum(p["held"]) / n), round(sum(p["fed"]) / n), 1
        rows.append(dict(run=cfg.name, device=device, device_name=names[device], role=role, phase=p["phase"],
                         batch=n, context=context, tokens=max(1, tokens), ms=ms, ms_min=ms, ms_max=ms, repeats=reps,
                         dtype=str(cfg.models[role].dtype)))
    return rows


def reference_tables(paths: RunPaths, dataset: str, algorithm: str) -> dict[str, pa.Table]:
    """The sequential collect of the served algorithm: the outputs every served request must equal."""
    schemas = {"problems": PROBLEMS_SCHEMA, "calls": CALLS_TRACE_SCHEMA, "steps": STEPS_TRACE_SCHEMA}
    return {t: read_parquet(paths.collect_table(dataset, algorithm, "sequential", t), s) for t, s in schemas.items()}


def measured_rows(requests: pa.Table) -> list[dict]:
    """Per load point and repeat, the measured summary (VALIDATION_SCHEMA rows, replayed columns empty)."""
    out = []
    for (li, rep), rows in sorted(_by(requests, ("load_index", "repeat"), ("request",)).items()):
        p50, p90, thr = load_summary([r["arrival_s"] for r in rows], [r["finish_s"] for r in rows])
        r0 = rows[0]
        out.append(dict(run=r0["run"], dataset=r0["dataset"], algorithm=r0["algorithm"], load_index=li, repeat=rep,
                        arrivals=r0["arrivals"], load=r0["load"], rate_per_s=r0["rate_per_s"], requests=len(rows),
                        measured_p50_s=p50, measured_p90_s=p90, measured_throughput=thr, replayed_p50_s=None,
                        replayed_p90_s=None, replayed_throughput=None, system=None, schedule=None, profile=None))
    return out


def validate(cfg, paths: RunPaths) -> pa.Table:
    """Write the serving run's outputs check, its batched prices and the load validation; returns the validation."""
    dataset = serving_dataset(cfg)
    serving = {t: read_parquet(paths.serving_table(t), s) for t, s in TABLES.items()}
    same = outputs(serving, reference_tables(paths, dataset, str(cfg.serving.algorithm)))
    write_parquet(same, paths.serving_outputs, OUTPUTS_SCHEMA)
    write_parquet(batch_prices(serving["passes"], cfg), paths.serving_table("batch_prices"), BATCH_PRICES_SCHEMA)
    rows = measured_rows(serving["requests"])
    table = write_parquet(rows, paths.serving_validation, VALIDATION_SCHEMA)
    n = len(same)
    log.info("outputs: %d of %d requests identical to the sequential collect (answers %d, steps %d, verdicts %d, "
             "calls %d); PRM scores within %.2e", sum(r["identical_output"] for r in same), n,
             sum(r["identical_answer"] for r in same), sum(r["identical_steps"] for r in same),
             sum(r["identical_verdicts"] for r in same), sum(r["identical_calls"] for r in same),
             max((r["max_score_diff"] for r in same), default=0.0))
    for r in rows:
        log.info("load %g (%s) repeat %d: P50 %.3f s, P90 %.3f s, %.3f requests/s", r["load"], r["arrivals"],
                 r["repeat"], r["measured_p50_s"], r["measured_p90_s"], r["measured_throughput"])
    return table


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.replay.serving_validate",
                     "The serving run's outputs against the sequential collect's; the load replay against it.")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    validate(cfg, paths)


if __name__ == "__main__":
    stage.run(main)
