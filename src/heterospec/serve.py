"""The ``serve`` stage: a serving run on the collect's three workers, measured at each load point, every request
traced (docs/serving.md).

    python -m heterospec.serve experiment=ci

One Session serves, in order: the problems one at a time (the unloaded latency, the unit of a Poisson load; it warms
the workers too), then ``serving.repeats`` rounds over the load points (so the two runs of a load point lie apart in
time and drift shows). Each load-point run serves ``serving.requests`` requests and is journaled when it ends; a
killed stage redoes only the run it was in (its timings measured again) and keeps every finished one.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from heterospec import stage
from heterospec.arrivals import Arrivals, open_times, request_order
from heterospec.config import compose_config, dataset_config
from heterospec.config.collect_variants import draft_implementation
from heterospec.config.drafts import is_board
from heterospec.config.digest import digest
from heterospec.config.serving_checks import ROLES, check_serving, load_points, serving_dataset
from heterospec.errors import UserError
from heterospec.paths import RunPaths
from heterospec.precision import DTYPE_PRECISION, kv_bytes_per_token
from heterospec.reasoning.serving_schemas import SERVING_TABLES
from heterospec.store import write_parquet

log = logging.getLogger("heterospec.serve")


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _spec(cfg, paths: RunPaths, dataset: str) -> str:
    """What a journaled run depends on: the serving section, the algorithm, the models and their manifests, the
    devices, the dataset, the package and the tables' schema versions."""
    import heterospec

    parts = [digest(cfg.serving, cfg.algorithm, cfg.models, cfg.system.torch_devices, dataset_config(cfg, dataset),
                    cfg.collect.draft, cfg.collect.threads_per_role), heterospec.__version__]
    parts += [str(t.metadata) for t in SERVING_TABLES.values()]
    parts += [paths.model_manifest(r).read_text() for r in ROLES if paths.model_manifest(r).exists()]
    return "\n".join(parts)


def _open_journal(journal: Path, spec: str) -> None:
    stamp = journal / "SPEC"
    if journal.exists() and (not stamp.exists() or stamp.read_text() != spec):
        print(f"[serve] settings or models changed since {journal} was written: starting afresh", file=sys.stderr)
        shutil.rmtree(journal)
    journal.mkdir(parents=True, exist_ok=True)
    stamp.write_text(spec)


def check_kv_room(cfg, role: str, model_config: dict) -> None:
    """``serving.max_batch.<role>`` sequences of the model's longest context must fit the role's device memory."""
    b = int(cfg.serving.max_batch[role])
    heads = int(model_config["num_attention_heads"])
    head_dim = int(model_config.get("head_dim") or int(model_config["hidden_size"]) // heads)
    per_token = kv_bytes_per_token(int(model_config["num_hidden_layers"]),
                                   int(model_config.get("num_key_value_heads") or heads), head_dim,
                                   DTYPE_PRECISION.get(str(cfg.models[role].dtype), "fp32"))
    tokens = int(model_config["max_position_embeddings"])
    need_gb = b * tokens * per_token / 1e9
    device = cfg.system[role]
    have_gb = float(device.memory_gb) if device.get("memory_gb") is not None else None
    if have_gb is not None and need_gb > have_gb:
        raise UserError(f"serving.max_batch.{role}: {b} sequences of up to {tokens} tokens need {need_gb:.1f} GB of KV "
                        f"cache; the {role}'s device ({device.name}) holds {have_gb:g} GB")


def _checkpoints(cfg, paths: RunPaths) -> tuple[dict[str, str], dict]:
    """(each role's checkpoint, the decoding recipes): a board's kernel drafts as a batch kernel with a slot for
    every request of a load-point run (heterospec.hls.kernel_serving)."""
    from heterospec.models.role_manifest import read_manifest

    checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
    decodings = {}
    impl = draft_implementation(cfg)
    if impl == "w8a8":
        if not paths.quantized_draft.exists():
            raise UserError(f"collect.draft=w8a8 but {paths.quantized_draft} does not exist; run the quantize stage first")
        checkpoints["draft"] = str(paths.quantized_draft.parent.resolve())
    elif is_board(impl):
        from dataclasses import replace
        from heterospec.hls.kernel_draft import kernel_recipe
        from heterospec.hls.kernel_lib import build_batch_library
        checkpoints["draft"], recipe = kernel_recipe(cfg, paths, impl)
        slots = max(int(cfg.serving.requests), int(cfg.serving.max_batch.draft))
        lib = build_batch_library(Path(recipe.kernel_dir), slots, cxx=cfg.hls.cxx)
        decodings["draft"] = replace(recipe, batch_library=str(lib))
    for r in ROLES:
        config = Path(checkpoints[r]) / "config.json"
        if config.is_file():
            check_kv_room(cfg, r, json.loads(config.read_text()))
    return checkpoints, decodings


def run_stage(cfg, paths: RunPaths, overrides: list[str], processes: bool = True) -> dict[str, Path]:
    """Serve every load point ``serving.repeats`` times (resuming a journal); returns the tables' paths."""
    from heterospec.tasks import load_problems

    check_serving(cfg)
    points = load_points(cfg)
    s = cfg.serving
    dataset = serving_dataset(cfg)
    alg = cfg.algorithm if cfg.algorithm.name == s.algorithm else \
        compose_config([*overrides, f"algorithm={s.algorithm}"]).algorithm
    if alg.target_decoding != "plain":
        raise UserError(f"algorithm.target_decoding={alg.target_decoding}: a serving run's target writes plainly "
                        f"(its batches are of plain decoding)")
    problems = load_problems(dataset_config(cfg, dataset, overrides), int(s.problems))
    journal = paths.serving_journal
    _open_journal(journal, _spec(cfg, paths, dataset))
    runs = [(rep, li) for rep in range(int(s.repeats)) for li in range(len(points))]
    todo = [(seq, rep, li) for seq, (rep, li) in enumerate(runs) if not (journal / f"run-{li}-{rep}.json").exists()]
    if len(todo) < len(runs):
        print(f"[serve] resuming: {len(runs) - len(todo)} of {len(runs)} load-point runs already done", file=sys.stderr)
    if todo:
        _serve_runs(cfg, paths, alg, problems, points, todo, journal, processes)
    return _merge(cfg, paths, dataset, runs, journal)


def _serve_runs(cfg, paths, alg, problems, points, todo, journal, processes) -> None:
    from heterospec.progress import progress
    from heterospec.reasoning.serving import Dispatcher, ServedRequest, serve
    from heterospec.reasoning.session import Session

    s = cfg.serving
    batch = {r: int(s.max_batch[r]) for r in ROLES}
    checkpoints, decodings = _checkpoints(cfg, paths)
    with Session(cfg, checkpoints, processes=processes, threads=cfg.collect.threads_per_role, alg=alg,
                 serving=batch, decodings=decodings) as session:
        prompts = [session.prompt_ids(p.question) for p in problems]

        def requests(order: list[int], times: list[float]) -> list[ServedRequest]:
            return [ServedRequest(k, problems[i], prompts[i], t) for k, (i, t) in enumerate(zip(order, times))]

        def run(reqs: list[ServedRequest], closed: tuple[int, float] | None = None):
            d = Dispatcher(session.roles, batch)
            results, t0 = serve(d, reqs, alg, alg.max_tokens_per_call, session.devices, session.impls, closed)
            return d, results, t0

        # the problems one at a time: the unloaded latency (and the workers warmed), kept across a resume
        calibration = journal / "unloaded.json"
        _, results, _ = run(requests(list(range(len(problems))), [0.0] * len(problems)), (1, 0.0))
        if not calibration.exists():
            _write_json(calibration, {"unloaded_s": statistics.fmean(r["problems"][0]["latency_s"]
                                                                     for r in results.values())})
        unloaded = json.loads(calibration.read_text())["unloaded_s"]
        order = request_order(len(problems), int(s.requests), int(s.seed))
        for seq, rep, li in progress(todo, desc="serve", unit="run"):
            point = points[li]
            kind = str(s.arrivals)
            rate = float(point) / unloaded if kind == "poisson" else None
            closed = (int(point), float(s.think_s)) if kind == "closed" else None
            if kind == "closed":
                times = [0.0] * len(order)
            else:
                a = Arrivals(kind, rate=rate or 1.0, path=str(point) if kind == "timestamps" else "", seed=int(s.seed),
                             key="serving")
                times = open_times(a, len(order))
            reqs = requests(order[:len(times)], times)
            started = time.time()
            d, results, t0 = run(reqs, closed)
            meta = dict(load_index=li, repeat=rep, sequence=seq, arrivals=kind,
                        load=float(point) if kind != "timestamps" else float(li), rate_per_s=rate,
                        unloaded_s=unloaded, run_started_unix_s=started)
            _write_json(journal / f"run-{li}-{rep}.json", _run_rows(meta, reqs, results, d.records, t0))


def _run_rows(meta: dict, reqs, results: dict, records: list[dict], t0: int) -> dict[str, list[dict]]:
    """One load-point run's rows for the serving tables (run fields not filled)."""
    keys = dict(load_index=meta["load_index"], repeat=meta["repeat"])
    out = {t: [] for t in SERVING_TABLES}
    for req in reqs:
        rows = results[req.index]
        problem = rows["problems"][0]
        queued = {r: sum(c["queued_ns"] for c in rows["calls"] if c["role"] == r) / 1e9 for r in ROLES}
        out["requests"].append(dict(**meta, request=req.index, client=req.client, arrival_s=req.arrival_s,
                                    finish_s=req.arrival_s + problem["latency_s"],
                                    **{f"{r}_queue_s": queued[r] for r in ROLES}, **problem))
        out["calls"] += [dict(**keys, request=req.index, **c) for c in rows["calls"]]
        out["steps"] += [dict(**keys, request=req.index, **st) for st in rows["steps"]]
        out["kvmu"] += [dict(**keys, request=req.index, **k) for k in rows["kvmu"]]
    out["passes"] = [dict(**keys, role=p["role"], seq=p["seq"], phase=p["phase"], batch=len(p["requests"]),
                          requests=p["requests"], held=p["held"], fed=p["fed"], start_ns=p["start_ns"] - t0,
                          end_ns=p["end_ns"] - t0, cpu_ns=p["cpu_ns"], forwards=p["forwards"]) for p in records]
    return out


def _merge(cfg, paths: RunPaths, dataset: str, runs, journal: Path) -> dict[str, Path]:
    """The journaled runs, in session order, into the serving tables."""
    fields = dict(run=cfg.name, models=cfg.models.name, dataset=dataset, algorithm=str(cfg.serving.algorithm))
    tables: dict[str, list[dict]] = {t: [] for t in SERVING_TABLES}
    for rep, li in runs:
        rows = json.loads((journal / f"run-{li}-{rep}.json").read_text())
        for t in SERVING_TABLES:
            tables[t] += [{**fields, **r} for r in rows.get(t, [])]
    out = {t: write_parquet(tables[t], paths.serving_table(t), schema) for t, schema in SERVING_TABLES.items()}
    n = len(tables["requests"])
    log.info("served %d requests in %d load-point runs; %.1f%% correct", n, len(runs),
             100 * sum(r["correct"] for r in tables["requests"]) / max(1, n))
    return out


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.serve", "Serve several problems at once at each load point, traced.")
    args = stage.parse(p, argv)
    from heterospec.reasoning.workers import start_forkserver
    start_forkserver()
    cfg, paths = stage.compose(args)
    run_stage(cfg, paths, args.overrides)


if __name__ == "__main__":
    stage.run(main)
