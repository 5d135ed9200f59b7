"""The load replay checked against a serving run (docs/serving.md).

* Outputs: every served request against the sequential collect of the same problem: answer, output, steps, the
  PRM's verdicts, every call's tokens, and by how much the PRM's scores moved (padding's rounding).
* Load: per load point and repeat, the measured P50 / P90 latency and throughput against the load replay's on the
  same arrivals, on the run's collect system under the sequential schedule, priced by the ``measured`` profile with
  batched prices fitted from the serving run's own passes (written as ``batch_prices/v1``).

    python -m heterospec.replay.validation.against_serving experiment=ci
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
from heterospec.config.collect_variants import draft_implementation
from heterospec.config.drafts import is_board
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.reasoning.collect_schemas import (COLLECT_CALLS_SCHEMA, COLLECT_KVMU_SCHEMA, COLLECT_PROBLEMS_SCHEMA,
                                                  COLLECT_STEPS_SCHEMA)
from heterospec.reasoning.serving_schemas import SERVING_TABLES
from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.replay.validation.noise import pair_spread
from heterospec.replay.validation.quantiles import harrell_davis, sample_quantile
from heterospec.store.parquet import read_parquet, versioned, write_parquet

log = logging.getLogger("heterospec.serving_validate")

_RUN = [pa.field("run", pa.string()), pa.field("dataset", pa.string()), pa.field("algorithm", pa.string()),
        pa.field("load_index", pa.int32()), pa.field("repeat", pa.int32())]

SERVING_OUTPUTS_SCHEMA = versioned("serving_outputs", 2, _RUN + [
    pa.field("request", pa.int32()),
    pa.field("problem_id", pa.string()),
    pa.field("identical_answer", pa.bool_()),     # the \boxed{} answer
    pa.field("identical_output", pa.bool_()),     # the whole reasoning text
    pa.field("identical_steps", pa.bool_()),      # the controller's steps: position and outcome, in order
    pa.field("identical_verdicts", pa.bool_()),   # every PRM call's verdict, in order
    pa.field("identical_calls", pa.bool_()),      # every call's role, phase, tokens in and out and KV length, in order
    pa.field("identical_kvmu", pa.bool_()),       # the draft's KVMU log: every transition's mode, pointers and reason
    pa.field("prm_calls", pa.int32()),
    pa.field("max_score_diff", pa.float64()),     # largest |PRM score - the sequential collect's| over its PRM calls
])

SERVING_VALIDATION_SCHEMA = versioned("serving_validation", 2, _RUN + [
    pa.field("arrivals", pa.string()),            # poisson | closed | timestamps
    pa.field("load", pa.float64()),
    pa.field("rate_per_s", pa.float64()),         # poisson: offered requests per second
    pa.field("requests", pa.int32()),
    pa.field("measured_p50_s", pa.float64()),     # request latency, arrival to its last step
    pa.field("measured_p90_s", pa.float64()),
    pa.field("measured_throughput", pa.float64()),   # requests per second: requests / (last end - first arrival)
    pa.field("measured_p50_hd_s", pa.float64()),  # the same quantiles by Harrell-Davis (replay.quantiles)
    pa.field("measured_p90_hd_s", pa.float64()),
    pa.field("replayed_p50_s", pa.float64()),     # the load replay on the same arrivals (null: not replayed)
    pa.field("replayed_p90_s", pa.float64()),
    pa.field("replayed_throughput", pa.float64()),
    pa.field("replayed_p50_hd_s", pa.float64()),
    pa.field("replayed_p90_hd_s", pa.float64()),
    pa.field("system", pa.string()),              # what the replay modelled
    pa.field("schedule", pa.string()),
    pa.field("profile", pa.string()),
])

# every served request beside its replay on the same arrivals: the paired per-request error
SERVING_REPLAYED_SCHEMA = versioned("serving_replayed", 1, _RUN + [
    pa.field("request", pa.int32()),
    pa.field("problem_id", pa.string()),
    pa.field("arrival_s", pa.float64()),          # from the load-point run's start
    pa.field("measured_s", pa.float64()),         # latency, arrival to its last step
    pa.field("replayed_s", pa.float64()),
])

# per load point, each statistic's error over the repeats with its bootstrap interval (:func:`load_errors`)
SERVING_ERRORS_SCHEMA = versioned("serving_errors", 1, [
    pa.field("run", pa.string()), pa.field("dataset", pa.string()), pa.field("algorithm", pa.string()),
    pa.field("load_index", pa.int32()), pa.field("load", pa.float64()),
    # p50 | p90 (sample quantiles) | p50_hd | p90_hd (Harrell-Davis) | mean | throughput: of the latencies (s) or the
    # requests/s; request_bias | request_mae: the paired per-request error (replayed - measured) / measured, signed
    # and absolute, averaged over the requests
    pa.field("statistic", pa.string()),
    pa.field("repeats", pa.int32()),
    pa.field("requests", pa.int32()),             # per repeat, counted
    pa.field("measured", pa.float64()),           # the mean over the repeats (null for the per-request errors)
    pa.field("replayed", pa.float64()),
    pa.field("rel_error", pa.float64()),          # (replayed - measured) / measured; the per-request error itself
    pa.field("ci_low", pa.float64()),             # percentile-bootstrap 95 % interval, requests resampled (null:
    pa.field("ci_high", pa.float64()),            #   throughput, a whole run's)
    # the repeats' own spread of the measured statistic, (max - min) / mean; for request_mae the noise floor: the
    # mean over requests of |a - b| / ((a + b) / 2) of one request's latencies in two repeats (same arrival, problem)
    pa.field("spread", pa.float64()),
])

QUANTILES = {"p50": (0.5, sample_quantile), "p90": (0.9, sample_quantile),
             "p50_hd": (0.5, harrell_davis), "p90_hd": (0.9, harrell_davis)}
# the bars are the serving_load view's (store/catalog.py, docs/serving.md): the Harrell-Davis quantiles within 10 %,
# the throughput within 5 %, and the repeats' spread of those quantiles below 5 %


def load_summary(arrivals: list[float], ends: list[float]) -> dict[str, float]:
    """{p50, p90, p50_hd, p90_hd: latency s, throughput: requests/s} of requests arriving at ``arrivals`` and ending at
    ``ends`` (s): the quantiles linear between order statistics (DuckDB's quantile_cont) and by Harrell-Davis,
    throughput = requests / (last end - first arrival)."""
    lat = np.asarray(ends, float) - np.asarray(arrivals, float)
    span = max(ends) - min(arrivals)
    return {**{s: f(lat, q) for s, (q, f) in QUANTILES.items()}, "throughput": len(lat) / span}


def _by(table: pa.Table, keys: tuple[str, ...], order: tuple[str, ...]) -> dict[tuple, list[dict]]:
    """Rows grouped by ``keys``, each group sorted by ``order``."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in table.to_pylist():
        out[tuple(r[k] for k in keys)].append(r)
    for rows in out.values():
        rows.sort(key=lambda r: tuple(r[k] for k in order))
    return out


_CALL = ("role", "phase", "tokens_in", "tokens_out", "kv_len")
_KVMU = ("mode", "valid", "current", "step_ahead", "reason")


def outputs(serving: dict[str, pa.Table], reference: dict[str, pa.Table]) -> list[dict]:
    """Each served request against the sequential collect's trace of its problem (SERVING_OUTPUTS_SCHEMA rows)."""
    ref_problems = {r["problem_id"]: r for r in reference["problems"].to_pylist()}
    ref_calls = _by(reference["calls"], ("problem_id",), ("step_idx", "start_ns"))
    ref_steps = _by(reference["steps"], ("problem_id",), ("step_idx",))
    calls = _by(serving["calls"], ("load_index", "repeat", "request"), ("step_idx", "start_ns"))
    steps = _by(serving["steps"], ("load_index", "repeat", "request"), ("step_idx",))
    ref_kvmu = _by(reference["kvmu"], ("problem_id",), ("seq",))
    kvmu = _by(serving["kvmu"], ("load_index", "repeat", "request"), ("seq",))
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
            identical_kvmu=[tuple(k[c] for c in _KVMU) for k in kvmu.get(key, [])] ==
                           [tuple(k[c] for c in _KVMU) for k in ref_kvmu.get((pid,), [])],
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


class Yielding:
    """A role that shares a core and yields it to another (``system.yields_to``): the load replay pauses it while
    that role works, so its price is its time less the time that role was busy (its wall time holds those pauses
    already). ``free(run, role, start, end)``: the ns of [start, end) (from the run's start) left to ``role``."""

    def __init__(self, cfg, passes: pa.Table):
        self.owner = {str(r): str(o) for r, o in cfg.system.yields_to.items()}
        self.busy: dict[tuple, list[tuple[int, int]]] = defaultdict(list)   # (load, repeat, role) -> its passes
        for p in passes.to_pylist():
            if p["role"] in self.owner.values():
                self.busy[(p["load_index"], p["repeat"], p["role"])].append((p["start_ns"], p["end_ns"]))

    def free(self, run: tuple[int, int], role: str, start: int, end: int) -> int:
        if role not in self.owner:
            return end - start
        taken = sum(max(0, min(end, b) - max(start, a)) for a, b in self.busy[(*run, self.owner[role])])
        return end - start - taken


def batch_prices(passes: pa.Table, cfg) -> list[dict]:
    """The serving run's passes as measured batched prices (``batch_prices/v1``): one row per pass with its mean
    context and mean tokens fed per sequence, its wall time (less its owner's busy time for a role that yields:
    :class:`Yielding`); a draft lane's decode call as its mean per-token pass, counted once per token."""
    names, yields = {}, Yielding(cfg, passes)
    impl = draft_implementation(cfg)       # what the draft's passes ran: its dtype, the int8 reference or a kernel
    dtypes = {**{r: str(cfg.models[r].dtype) for r in ("draft", "prm", "target")},
              **({"draft": "w8a8"} if impl == "w8a8" else {"draft": f"kernel:{impl}"} if is_board(impl) else {})}
    rows = []
    for p in passes.to_pylist():
        role, n = p["role"], p["batch"]
        device = str(cfg.system.torch_devices[role])
        names.setdefault(device, device_name(device))
        ms = yields.free((p["load_index"], p["repeat"]), role, p["start_ns"], p["end_ns"]) / 1e6
        if p["forwards"] == 0:
            continue
        if p["forwards"] > 1:             # a lane's whole decode call: tokens one by one after its context
            context, tokens, ms, reps = p["held"][0] + p["forwards"] // 2, 1, ms / p["forwards"], p["forwards"]
        else:
            context, tokens, reps = round(sum(p["held"]) / n), round(sum(p["fed"]) / n), 1
        rows.append(dict(run=cfg.name, device=device, device_name=names[device], role=role, phase=p["phase"],
                         batch=n, context=context, tokens=max(1, tokens), ms=ms, ms_min=ms, ms_max=ms, repeats=reps,
                         dtype=dtypes[role]))
    return rows


def reference_tables(paths: RunPaths, dataset: str, algorithm: str) -> dict[str, pa.Table]:
    """The sequential collect of the served algorithm: the outputs every served request must equal."""
    schemas = {"problems": COLLECT_PROBLEMS_SCHEMA, "calls": COLLECT_CALLS_SCHEMA, "steps": COLLECT_STEPS_SCHEMA,
               "kvmu": COLLECT_KVMU_SCHEMA}
    return {t: read_parquet(paths.collect_table(dataset, algorithm, "sequential", t), s) for t, s in schemas.items()}


def measured_rows(requests: pa.Table) -> list[dict]:
    """Per load point and repeat, the measured summary (SERVING_VALIDATION_SCHEMA rows, replayed columns empty)."""
    out = []
    for (li, rep), rows in sorted(_by(requests, ("load_index", "repeat"), ("request",)).items()):
        stats = load_summary([r["arrival_s"] for r in rows], [r["finish_s"] for r in rows])
        r0 = rows[0]
        out.append(dict(run=r0["run"], dataset=r0["dataset"], algorithm=r0["algorithm"], load_index=li, repeat=rep,
                        arrivals=r0["arrivals"], load=r0["load"], rate_per_s=r0["rate_per_s"], requests=len(rows),
                        **{_column("measured", k): v for k, v in stats.items()},
                        **{_column("replayed", k): None for k in stats}, system=None, schedule=None, profile=None))
    return out


def _column(side: str, stat: str) -> str:
    """The SERVING_VALIDATION_SCHEMA column of a :func:`load_summary` statistic: measured_p50_s, replayed_throughput, ..."""
    return f"{side}_{stat}" if stat == "throughput" else f"{side}_{stat.replace('_hd', '')}{'_hd' * ('_hd' in stat)}_s"


SCHEDULE = "sequential"     # each served request runs the sequential executor's calls
PROFILE = "measured"


def traced_problems(reference: dict[str, pa.Table]) -> list:
    """The served algorithm's problems as the replay reads them, from its sequential collect (the served requests'
    steps are these: the outputs check says so)."""
    from heterospec.replay.traces.reader import calls_from_collect
    from heterospec.replay.traces.problems import traced_problems

    steps = {(r["algorithm"], r["executor"], r["dataset"], r["problem_id"], r["step_idx"]): r["outcome"]
             for r in reference["steps"].to_pylist()}
    calls = calls_from_collect(reference["calls"], steps, Path("collect (sequential)"))
    return traced_problems(calls, "serving")


def serving_profile(serving: dict[str, pa.Table], run: str, yields: Yielding | None = None):
    """The ``measured`` profile fitted on the serving run's own calls made alone (a pass of one request: its price at
    batch 1, which the batch curve scales), and the host's time: a served request's controller works on the host
    between its jobs, and each job takes a moment to reach an idle worker (:func:`handover_ns`), neither on a device,
    so their sum is the profile's time per problem (added to a request's latency, occupying no device), the mean over
    the requests of :func:`host_ms`; no per-call dispatch time (the single-request fit's, which the load replay would
    charge to the device).
    A role that yields (``yields``) is priced by its time less its owner's busy time."""
    from heterospec.replay.traces.reader import calls_from_collect
    from heterospec.replay.profiles.measured import MEASURED_FIT_SCHEMA, MeasuredProfile, fit_calls

    def key(r: dict) -> str:
        return f"{r['load_index']}/{r['repeat']}/{r['request']}"

    steps = {("serving", "serving", r["dataset"], key(r), r["step_idx"]): r["outcome"]
             for r in serving["steps"].to_pylist()}
    rows = serving["calls"].to_pylist()
    alone = [{**r, "algorithm": "serving", "executor": "serving", "problem_id": key(r)} for r in rows
             if r["batch"] == 1.0]
    if yields is not None:        # the calls' times from the request's arrival; the passes' from the run's start
        arrival = {key(r): round(r["arrival_s"] * 1e9) for r in serving["requests"].to_pylist()}
        alone = [{**r, "end_ns": r["start_ns"] + yields.free((r["load_index"], r["repeat"]), r["role"],
                                                            arrival[key(r)] + r["start_ns"], arrival[key(r)] + r["end_ns"])}
                 for r in alone]
    calls = calls_from_collect(pa.Table.from_pylist(alone), steps, Path("serving calls"))
    requests = serving["requests"].to_pylist()
    host = host_ms(rows, requests, handover_ns(rows, requests))
    controller = pa.Table.from_pylist([dict(run=run, role="controller", phase="problem", calls=len(host),
                                            features=["1"], coefficients=[max(0.0, float(np.mean(host)))], r2=0.0,
                                            mape=0.0, wall_ms_mean=float(np.mean(host)))], schema=MEASURED_FIT_SCHEMA)
    return MeasuredProfile.from_fit(pa.concat_tables([fit_calls(calls, run), controller]))


def handover_ns(calls: list[dict], requests: list[dict]) -> dict[str, float]:
    """Per role, the median wait of a job at the lightest load point: what a job takes to reach an idle worker (the
    pipe, the worker's own bookkeeping before its pass), which the load replay does not queue."""
    light = min(r["load"] for r in requests)
    runs = {(r["load_index"], r["repeat"]) for r in requests if r["load"] == light}
    waits: dict[str, list[int]] = defaultdict(list)
    for c in calls:
        if (c["load_index"], c["repeat"]) in runs and c["phase"] in ("prefill", "score"):   # a job's first call
            waits[c["role"]].append(c["queued_ns"])
    return {role: float(np.median(w)) for role, w in waits.items()}


def host_ms(calls: list[dict], requests: list[dict], handover: dict[str, float] | None = None) -> list[float]:
    """Per request (in ``requests``' order), the milliseconds it spent outside the roles' work and queues: its latency
    less the time each of its jobs spent from joining a role's queue to its last call's end (a job's calls share their
    ``enqueued_ns``; times from the request's arrival), plus each job's wait up to the role's ``handover`` (ns)."""
    def key(r: dict) -> tuple:
        return r["load_index"], r["repeat"], r["request"]

    jobs: dict[tuple, int] = defaultdict(int)
    out: dict[tuple, float] = defaultdict(float)
    for c in calls:
        job = (*key(c), c["enqueued_ns"])
        jobs[job] = max(jobs[job], c["end_ns"] - c["enqueued_ns"])
        if c["phase"] in ("prefill", "score"):
            out[key(c)] += min(c["queued_ns"], (handover or {}).get(c["role"], 0.0))
    for job, ns in jobs.items():
        out[job[:3]] -= ns
    return [r["latency_s"] * 1e3 + out[key(r)] / 1e6 for r in requests]


def curve_prices(prices: list[dict]) -> pa.Table:
    """The batched prices a batch curve is fitted on: the roles and phases measured at more than one batch size."""
    sizes: dict[tuple, set] = defaultdict(set)
    for r in prices:
        sizes[(r["role"], r["phase"])].add(r["batch"])
    return pa.Table.from_pylist([r for r in prices if len(sizes[(r["role"], r["phase"])]) > 1],
                                schema=BATCH_PRICES_SCHEMA)


def serving_devices(cfg, paths: RunPaths, system, problems, profile, prices: pa.Table):
    """The devices as the serving run ran them: the draft a lane of one request at a time (or batching like the
    target), the PRM's batched passes and the target's continuous batching up to ``serving.max_batch``, each batch
    curve fitted on the run's own passes."""
    from omegaconf import OmegaConf

    from heterospec.replay.load.stage import device_plan

    mb = cfg.serving.max_batch
    load = OmegaConf.to_container(cfg.load, resolve=True)
    load.update(batching={"draft": "lanes" if int(mb.draft) == 1 else "continuous", "prm": "batched_prefill",
                          "target": "continuous", "link": "serial"},
                max_batch={r: int(mb[r]) for r in ("draft", "prm", "target")}, fpga_batch=1, draft_lanes=1)
    served = OmegaConf.merge(cfg, {"load": load})
    return device_plan(served, paths, system, PROFILE, problems, profile, batch_prices=prices)


def replayed(cfg, paths: RunPaths, serving: dict[str, pa.Table], reference: dict[str, pa.Table],
             prices: list[dict]) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """Per load point and repeat, the load replay's (arrival s, latency s) of each request, in request order, on the
    run's arrivals (the closed loop's clients for arrivals=closed: its own arrivals), the run's collect system under
    the sequential schedule."""
    from heterospec.config.hardware import system as hw_system
    from heterospec.replay.load import replay_closed, replay_requests

    problems = traced_problems(reference)
    by_id = {p.problem: p for p in problems}
    profile = serving_profile(serving, cfg.name, Yielding(cfg, serving["passes"]))
    system = hw_system(str(cfg.system.name), cfg)
    devices = serving_devices(cfg, paths, system, problems, profile, curve_prices(prices))
    out = {}
    for (li, rep), rows in sorted(_by(serving["requests"], ("load_index", "repeat"), ("request",)).items()):
        if rows[0]["arrivals"] == "closed":
            run = replay_closed([by_id[r["problem_id"]] for r in rows], int(rows[0]["load"]),
                                float(cfg.serving.think_s), system, SCHEDULE, profile, devices)
        else:
            run = replay_requests([(r["arrival_s"], by_id[r["problem_id"]]) for r in rows], system, SCHEDULE,
                                  profile, devices)
        out[(li, rep)] = [(q.arrival / 1e3, q.latency / 1e3) for q in sorted(run.requests, key=lambda q: q.index)]
    log.info("replayed on %s, schedule %s, profile %s: %s", system.name, SCHEDULE, PROFILE, devices.describe())
    return out


def validate(cfg, paths: RunPaths) -> pa.Table:
    """Write the serving run's outputs check, its batched prices and the load validation; returns the validation."""
    dataset = serving_dataset(cfg)
    serving = {t: read_parquet(paths.serving_table(t), s) for t, s in SERVING_TABLES.items()}
    reference = reference_tables(paths, dataset, str(cfg.serving.algorithm))
    same = outputs(serving, reference)
    write_parquet(same, paths.serving_outputs, SERVING_OUTPUTS_SCHEMA)
    prices = batch_prices(serving["passes"], cfg)
    write_parquet(prices, paths.serving_table("batch_prices"), BATCH_PRICES_SCHEMA)
    rows = measured_rows(serving["requests"])
    replay = replayed(cfg, paths, serving, reference, prices)
    for r in rows:
        times = replay[(r["load_index"], r["repeat"])]
        stats = load_summary([a for a, _ in times], [a + lat for a, lat in times])
        r.update({_column("replayed", k): v for k, v in stats.items()})
        r.update(system=str(cfg.system.name), schedule=SCHEDULE, profile=PROFILE)
    pairs = request_pairs(serving["requests"], replay)
    write_parquet(pairs, paths.serving_table("replayed"), SERVING_REPLAYED_SCHEMA)
    errors = load_errors(pairs, rows)
    write_parquet(errors, paths.serving_table("errors"), SERVING_ERRORS_SCHEMA)
    table = write_parquet(rows, paths.serving_validation, SERVING_VALIDATION_SCHEMA)
    n = len(same)
    log.info("outputs: %d of %d requests identical to the sequential collect (answers %d, steps %d, verdicts %d, "
             "calls %d); PRM scores within %.2e", sum(r["identical_output"] for r in same), n,
             sum(r["identical_answer"] for r in same), sum(r["identical_steps"] for r in same),
             sum(r["identical_verdicts"] for r in same), sum(r["identical_calls"] for r in same),
             max((r["max_score_diff"] for r in same), default=0.0))
    for r in rows:
        log.info("load %g (%s) repeat %d, %d requests: P50 %.3f s (replayed %.3f; Harrell-Davis %.3f, %.3f), P90 %.3f s "
                 "(%.3f; %.3f, %.3f), %.3f requests/s (%.3f)", r["load"], r["arrivals"], r["repeat"], r["requests"],
                 r["measured_p50_s"], r["replayed_p50_s"], r["measured_p50_hd_s"], r["replayed_p50_hd_s"],
                 r["measured_p90_s"], r["replayed_p90_s"], r["measured_p90_hd_s"], r["replayed_p90_hd_s"],
                 r["measured_throughput"], r["replayed_throughput"])
    print(errors_table(errors))
    return table


def request_pairs(requests: pa.Table, replay: dict[tuple[int, int], list[tuple[float, float]]]) -> list[dict]:
    """Every served request beside its replay (SERVING_REPLAYED_SCHEMA rows)."""
    out = []
    for (li, rep), rows in sorted(_by(requests, ("load_index", "repeat"), ("request",)).items()):
        for r, (_, lat) in zip(rows, replay[(li, rep)], strict=True):
            out.append(dict(run=r["run"], dataset=r["dataset"], algorithm=r["algorithm"], load_index=li, repeat=rep,
                            request=r["request"], problem_id=r["problem_id"], arrival_s=r["arrival_s"],
                            measured_s=r["finish_s"] - r["arrival_s"], replayed_s=lat))
    return out


def _spread(values) -> float | None:
    """(max - min) / mean of the repeats' values; None for one repeat."""
    v = np.asarray(values, float)
    return float((v.max() - v.min()) / v.mean()) if v.size > 1 else None


def load_errors(pairs: list[dict], summaries: list[dict], resamples: int = 2000, level: float = 0.95,
                seed: int = 0) -> list[dict]:
    """Per load point (SERVING_ERRORS_SCHEMA rows): the replay's error on each latency statistic (the sample and the
    Harrell-Davis P50 / P90, the mean), each the mean over the repeats of the statistic, with a percentile-bootstrap
    interval: the requests resampled with replacement, one draw of request indices for every repeat (a request's
    repeats share its arrival and problem) and each measured latency with its replay (a pair); the paired
    per-request error (signed and absolute) likewise, its noise floor the spread of one request's repeats; the
    throughput's error (no interval: a whole run's). Each with the repeats' own spread of the measured statistic.
    Requests are those present in every repeat of the point."""
    by: dict[int, dict[int, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    for p in pairs:
        by[p["load_index"]][p["repeat"]][p["request"]] = p
    thr = defaultdict(list)
    for r in summaries:
        thr[r["load_index"]].append((r["measured_throughput"], r["replayed_throughput"]))
    rng = np.random.default_rng(seed)
    out = []
    for li, reps in sorted(by.items()):
        ids = sorted(set.intersection(*(set(v) for v in reps.values())))
        m = np.array([[reps[j][i]["measured_s"] for i in ids] for j in sorted(reps)])     # repeats x requests
        r = np.array([[reps[j][i]["replayed_s"] for i in ids] for j in sorted(reps)])
        first = reps[min(reps)][ids[0]]
        keys = dict(run=first["run"], dataset=first["dataset"], algorithm=first["algorithm"], load_index=li,
                    load=next(s["load"] for s in summaries if s["load_index"] == li), repeats=len(reps),
                    requests=len(ids))
        stats = {**{k: (lambda x, q=q, f=f: f(x, q)) for k, (q, f) in QUANTILES.items()}, "mean": np.mean}
        draws = rng.integers(0, len(ids), size=(resamples, len(ids)))
        lo_i = int((1 - level) / 2 * resamples)
        for name, f in stats.items():
            meas, rep = float(np.mean([f(x) for x in m])), float(np.mean([f(x) for x in r]))
            boot = np.sort([np.mean([f(x[d]) for x in r]) / np.mean([f(x[d]) for x in m]) - 1 for d in draws])
            out.append(dict(keys, statistic=name, measured=meas, replayed=rep, rel_error=rep / meas - 1,
                            ci_low=float(boot[lo_i]), ci_high=float(boot[resamples - 1 - lo_i]),
                            spread=_spread([f(x) for x in m])))
        e = (r - m) / m                                     # the paired per-request error, repeats x requests
        noise = float(np.mean([pair_spread(list(m[:, k])) for k in range(len(ids))])) if len(m) > 1 else None
        for name, g, floor in (("request_bias", lambda x: x, None), ("request_mae", np.abs, noise)):
            per = g(e).mean(axis=0)                         # per request, over its repeats
            boot = np.sort(per[draws].mean(axis=1))
            out.append(dict(keys, statistic=name, measured=None, replayed=None, rel_error=float(per.mean()),
                            ci_low=float(boot[lo_i]), ci_high=float(boot[resamples - 1 - lo_i]), spread=floor))
        mt, rt = (np.mean([t[k] for t in thr[li]]) for k in (0, 1))
        out.append(dict(keys, statistic="throughput", measured=float(mt), replayed=float(rt),
                        rel_error=float(rt / mt - 1), ci_low=None, ci_high=None,
                        spread=_spread([t[0] for t in thr[li]])))
    return out


def errors_table(errors: list[dict]) -> str:
    """The load errors as a text table, one row per load point and statistic (%)."""
    from heterospec.text_table import format_table

    def pct(x):
        return "-" if x is None or not np.isfinite(x) else f"{100 * x:+.1f}"
    return format_table(["load", "statistic", "repeats", "requests", "measured", "replayed", "error_pct",
                         "95ci_pct", "spread_pct"],
                        [(e["load"], e["statistic"], e["repeats"], e["requests"],
                          "-" if e["measured"] is None else f"{e['measured']:.4g}",
                          "-" if e["replayed"] is None else f"{e['replayed']:.4g}", pct(e["rel_error"]),
                          "-" if e["ci_low"] is None else f"{pct(e['ci_low'])} to {pct(e['ci_high'])}",
                          "-" if e["spread"] is None else f"{100 * e['spread']:.1f}") for e in errors])


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.replay.validation.against_serving",
                     "The serving run's outputs against the sequential collect's; the load replay against it.")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    validate(cfg, paths)


if __name__ == "__main__":
    stage.run(main)
