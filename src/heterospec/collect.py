"""The ``collect`` stage: RSD / BRSD on a problem range, every model call traced.

    python -m heterospec.collect run --dataset synthetic --algorithm brsd --executor step_ahead \\
        --shard 0of1 experiment=ci
    python -m heterospec.collect merge --dataset synthetic --algorithm brsd --executor step_ahead experiment=ci
    heterospec collect report                      the Table III / KV-reuse / speedup summary

A shard writes each finished problem to a journal (atomically) and skips journaled problems
when restarted, so a killed run loses at most the problem in flight. ``merge`` joins the shards.
With ``collect.repeats`` k > 1 each problem runs k times, in k rounds over the shard's problems; the tables keep
the first round's trace and the ``repeats`` table every round's timings (:mod:`heterospec.reasoning.repeats`).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pyarrow as pa

from heterospec import stage
from heterospec.config import dataset_config
from heterospec.config.schema import COLLECT_GRID
from heterospec.config.collect_variants import draft_implementation, own_draft, variant_config
from heterospec.config.drafts import is_board
from heterospec.errors import UserError
from heterospec.paths import ROLES, RunPaths
from heterospec.progress import progress
from heterospec.reasoning.repeats import check_same_steps, journal_name, repeat_rows
from heterospec.reasoning.collect_schemas import TABLES
from heterospec.store import read_parquet, write_parquet

log = logging.getLogger("heterospec.collect")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2of8"`` -> (2, 8)."""
    try:
        i, n = (int(x) for x in text.split("of"))
    except ValueError:
        raise UserError(f"--shard {text}: expected <i>of<n>, e.g. 0of4") from None
    if not 0 <= i < n:
        raise UserError(f"--shard {text}: need 0 <= i < n")
    return i, n


def shard_range(n_problems: int, shard: int, shards: int) -> range:
    """Contiguous problem indices of one shard; shards cover every problem once."""
    lo, hi = n_problems * shard // shards, n_problems * (shard + 1) // shards
    return range(lo, hi)


def _journal_write(path: Path, rows: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(rows))
    os.replace(tmp, path)


def _journal_spec(cfg, alg, paths: RunPaths, dataset: str, executor: str, shard: str) -> str:
    """What a journaled problem depends on: settings, the models' manifests, the package version, the tables' schema
    versions."""
    import hashlib

    from omegaconf import OmegaConf

    import heterospec
    # not repeats: raising it keeps the journaled first repeats and runs only the new ones; not the grid either
    collect = OmegaConf.masked_copy(cfg.collect, [k for k in cfg.collect if k not in ("repeats", *COLLECT_GRID)])
    # a speculative target also reads the strategies' knobs and the draft device (heterospec.config.digest)
    speculation = cfg.token_speculation
    parts = [OmegaConf.to_yaml(n, resolve=True) for n in
             (dataset_config(cfg, dataset), alg, cfg.models, collect, cfg.system.torch_devices, speculation,
              cfg.system.draft)]
    parts += [dataset, executor, shard, heterospec.__version__, *(str(t.metadata) for t in TABLES.values())]
    parts += [paths.model_manifest(r).read_text() for r in ROLES if paths.model_manifest(r).exists()]
    impl = draft_implementation(cfg)
    if is_board(impl) and paths.hls_codegen(impl).exists():
        parts.append(paths.hls_codegen(impl).read_text())  # a regenerated kernel drafts anew
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _open_journal(journal: Path, spec: str) -> None:
    """Keep a journal only if it was written under the same spec; otherwise start it afresh."""
    import shutil
    stamp = journal / "SPEC"
    if journal.exists() and (not stamp.exists() or stamp.read_text() != spec):
        print(f"[collect] settings or models changed since {journal} was written: starting afresh", file=sys.stderr)
        shutil.rmtree(journal)
    journal.mkdir(parents=True, exist_ok=True)
    stamp.write_text(spec)


def run_shard(cfg, paths: RunPaths, overrides: list[str], dataset: str, algorithm: str, executor: str,
              shard: str, processes: bool | None = None) -> dict[str, Path]:
    """Collect one shard; returns the paths of its tables."""
    from heterospec.models.role_manifest import read_manifest
    from heterospec.reasoning.session import Session
    from heterospec.speculative.stepwise import check_strategy
    from heterospec.tasks import load_problems

    i, n = parse_shard(shard)
    repeats = int(cfg.collect.repeats)
    if repeats < 1:
        raise UserError(f"collect.repeats is {repeats}, expected 1 or more")
    if repeats > 1 and not own_draft(cfg, algorithm):
        # another draft implementation's timings stay out of the replay's fit and validation, which is all that
        # repeats are for: it runs once (the default's kernel and int8 collects would otherwise double)
        print(f"[collect] {algorithm}: runs each problem once (collect.repeats={repeats} serves the replay's "
              f"validation, which does not read a variant drafted by {draft_implementation(cfg, algorithm)})",
              file=sys.stderr)
        repeats = 1
    cfg = variant_config(cfg, overrides, algorithm)   # a variant sets algorithm keys and the draft (collect.variants)
    alg = cfg.algorithm
    check_strategy(str(alg.target_decoding), "algorithm.target_decoding", plain=True)   # before anything is read
    problems = load_problems(dataset_config(cfg, dataset, overrides), cfg.collect.limit)
    mine = [problems[k] for k in shard_range(len(problems), i, n)]
    out = {t: paths.collect_shard(dataset, algorithm, executor, shard, t) for t in TABLES}
    journal = out["problems"].parent / "journal"
    _open_journal(journal, _journal_spec(cfg, alg, paths, dataset, executor, shard))
    # repeats run in rounds over the problems, so a problem's repeats meet the machine at different times
    todo = [(j, k, p) for j in range(repeats) for k, p in enumerate(mine)
            if not (journal / journal_name(k, j)).exists()]
    if len(todo) < len(mine) * repeats:
        print(f"[collect] resuming: {len(mine) * repeats - len(todo)} of {len(mine) * repeats} problem runs already "
              f"done", file=sys.stderr)
    if todo:
        checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
        decodings = {}
        impl = draft_implementation(cfg)
        if impl == "w8a8":  # the quantize stage's W8A8 export stands in for the draft
            if not paths.quantized_draft.exists():
                raise UserError(f"collect.draft=w8a8 but {paths.quantized_draft} does not exist; "
                                f"run the quantize stage first (python -m heterospec.quantize)")
            checkpoints["draft"] = str(paths.quantized_draft.parent.resolve())
        elif is_board(impl):     # the board's generated HLS kernel drafts, from the W8A8 export
            from heterospec.hls.kernel_draft import kernel_recipe
            checkpoints["draft"], decodings["draft"] = kernel_recipe(cfg, paths, impl)
        use_processes = cfg.collect.processes if processes is None else processes
        # the target speculates with the float draft, whatever the run's draft is (a W8A8 export is the FPGA's)
        with Session(cfg, checkpoints, processes=use_processes, threads=cfg.collect.threads_per_role, alg=alg,
                     speculative_draft=read_manifest(paths.model_manifest("draft"))["path"],
                     decodings=decodings) as session:
            ex = session.executor(executor, alg)
            correct = 0
            bar = progress(todo, desc=f"collect {dataset}/{algorithm}/{executor} {shard}", unit="problem")
            for done, (j, k, prob) in enumerate(bar, 1):   # bar.n lags between refreshes
                rows = session.run(prob, alg, executor, ex)
                _journal_write(journal / journal_name(k, j), rows)
                correct += rows["problems"][0]["correct"]
                bar.set_postfix(acc=f"{100 * correct / done:.0f}%", refresh=False)
    run_fields = dict(run=cfg.name, models=cfg.models.name, dataset=dataset, algorithm=algorithm, executor=executor)
    tables: dict[str, list[dict]] = {t: [] for t in TABLES}
    for k in range(len(mine)):
        rows = json.loads((journal / journal_name(k, 0)).read_text())
        for t in TABLES:
            tables[t].extend({**run_fields, **r} for r in rows.get(t, ()))
        for j in range(1, repeats):
            again = json.loads((journal / journal_name(k, j)).read_text())
            check_same_steps(rows, again, j)
            tables["repeats"].extend({**run_fields, **r} for r in repeat_rows(again, j))
        if repeats > 1:
            tables["repeats"].extend({**run_fields, **r} for r in repeat_rows(rows, 0))
    for t, schema in TABLES.items():
        write_parquet(tables[t], out[t], schema)
    acc = 100 * sum(r["correct"] for r in tables["problems"]) / max(1, len(tables["problems"]))
    log.info("%s/%s/%s shard %s: %d problems, %.1f%% correct", dataset, algorithm, executor, shard, len(mine), acc)
    return out


def merge(paths: RunPaths, dataset: str, algorithm: str, executor: str, shards: int) -> None:
    """Join the shards of one (dataset, algorithm, executor) into its tables."""
    for t, schema in TABLES.items():
        parts = [read_parquet(paths.collect_shard(dataset, algorithm, executor, f"{i}of{shards}", t), schema)
                 for i in range(shards)]
        write_parquet(pa.concat_tables(parts), paths.collect_table(dataset, algorithm, executor, t), schema)
    log.info("merged %d shard(s) of %s/%s/%s", shards, dataset, algorithm, executor)


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.collect", "Run RSD / BRSD with traces; merge shards.")
    p.add_argument("command", choices=["run", "merge"])
    p.add_argument("--dataset", required=True)
    p.add_argument("--algorithm", required=True, help="an algorithm config (rsd | brsd) or a collect.variants name")
    p.add_argument("--executor", required=True, choices=["sequential", "step_ahead"])
    p.add_argument("--shard", default="0of1", help="run: which problem range, <i>of<n>")
    p.add_argument("--shards", type=int, default=None, help="merge: how many shards (default collect.shards)")
    args = stage.parse(p, argv)
    if args.command == "run":
        from heterospec.reasoning.workers import start_forkserver
        start_forkserver()             # the workers' imports beside this process's config and model checks
    cfg, paths = stage.compose(args)
    if args.command == "run":
        run_shard(cfg, paths, args.overrides, args.dataset, args.algorithm, args.executor, args.shard)
    else:
        merge(paths, args.dataset, args.algorithm, args.executor, args.shards or cfg.collect.shards)


if __name__ == "__main__":
    stage.run(main)
