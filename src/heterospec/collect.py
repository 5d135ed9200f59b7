"""The ``collect`` stage: RSD / BRSD on a problem range, every model call traced.

    python -m heterospec.collect run --dataset synthetic --algorithm brsd --executor step_ahead \\
        --shard 0of1 experiment=ci
    python -m heterospec.collect timed --dataset synthetic --shard 0of1 experiment=ci
    python -m heterospec.collect variant --dataset synthetic --algorithm brsd_u280 --shard 0of1 experiment=default
    python -m heterospec.collect merge --dataset synthetic --algorithm brsd --executor step_ahead experiment=ci
    heterospec collect report                      the Table III / KV-reuse / speedup summary

A shard writes each finished problem to a journal (atomically) and skips journaled problems
when restarted, so a killed run loses at most the problem in flight. ``merge`` joins the shards.
With ``collect.repeats`` k > 1 each problem runs k times, in k rounds over the shard's problems; the tables keep
the first round's trace and the ``repeats`` table every round's timings (:mod:`heterospec.reasoning.repeats`).

``timed`` runs the collects whose timings the replay fits and validates (every algorithm config under every
executor, ``collect.repeats`` times) in one job over one session, in rounds as above and interleaved problem by
problem within a round (:func:`run_timed`): the same journals and tables as one ``run`` per collect, measured in
the same minutes. ``variant`` runs a collect variant's executors the same way, in one job over one session of its
draft (:func:`run_variant`), so that its step-ahead speedup is measured as the timed collects' is.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec import stage
from heterospec.config import dataset_config
from heterospec.config.schema import COLLECT_GRID
from heterospec.config.collect_variants import draft_implementation, is_variant, own_draft, timed_collects, variant_config
from heterospec.config.collect_variants import executors as collect_executors
from heterospec.config.drafts import is_board
from heterospec.errors import UserError
from heterospec.paths import ROLES, RunPaths
from heterospec.progress import progress
from heterospec.reasoning.repeats import check_same_steps, journal_name, repeat_rows
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.store import read_parquet, write_parquet

log = logging.getLogger("heterospec.collect")

SESSION_KEYS = ("target_decoding", "temperature")   # the algorithm keys a Session's workers are built with


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


def _journal_spec(cfg, alg, paths: RunPaths, dataset: str, executor: str, shard: str, job: str = "") -> str:
    """What a journaled problem depends on: settings, the models' manifests, the package version, the tables' schema
    versions; ``job``, where it is not the collect's own: what its timings were measured beside (a variant's
    executors interleaved, so that a block-wise journal of it is not taken for one)."""
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
    parts += [dataset, executor, shard, heterospec.__version__, *(str(t.metadata) for t in COLLECT_TABLES.values())]
    parts += [job] if job else []
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


@dataclass
class Collect:
    """One collect of a shard: (dataset, algorithm, executor) over the shard's problems, ``repeats`` runs of each,
    every run journaled as it finishes (``journal_name(index, repeat)`` in ``journal``)."""
    cfg: Any               # the run's config as this collect sees it (collect_variants.variant_config)
    dataset: str
    algorithm: str
    executor: str
    shard: str             # <i>of<n>
    problems: list         # the shard's problems, in order
    repeats: int
    journal: Path
    out: dict[str, Path]   # table -> its shard Parquet

    @property
    def alg(self):
        return self.cfg.algorithm

    def done(self, index: int, repeat: int) -> bool:
        return (self.journal / journal_name(index, repeat)).exists()

    def record(self, index: int, repeat: int, rows: dict) -> None:
        _journal_write(self.journal / journal_name(index, repeat), rows)


def plan_collect(cfg, paths: RunPaths, overrides: list[str], dataset: str, algorithm: str, executor: str,
                 shard: str, job: str = "") -> Collect:
    """The collect of one shard, its journal opened (kept only if written under the same settings and models, and
    in the same kind of ``job``: :func:`_journal_spec`)."""
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
    check_strategy(str(cfg.algorithm.target_decoding), "algorithm.target_decoding", plain=True)  # before reading
    problems = load_problems(dataset_config(cfg, dataset, overrides), cfg.collect.limit)
    mine = [problems[k] for k in shard_range(len(problems), i, n)]
    out = {t: paths.collect_shard(dataset, algorithm, executor, shard, t) for t in COLLECT_TABLES}
    journal = out["problems"].parent / "journal"
    _open_journal(journal, _journal_spec(cfg, cfg.algorithm, paths, dataset, executor, shard, job))
    return Collect(cfg, dataset, algorithm, executor, shard, mine, repeats, journal, out)


def open_session(cfg, paths: RunPaths, alg, processes: bool | None = None):
    """The three workers for collects of the run's draft implementation (``cfg.collect.draft``) with ``alg``'s way
    of writing the target."""
    from heterospec.models.role_manifest import read_manifest
    from heterospec.reasoning.session import Session

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
    return Session(cfg, checkpoints, processes=use_processes, threads=cfg.collect.threads_per_role, alg=alg,
                   speculative_draft=read_manifest(paths.model_manifest("draft"))["path"], decodings=decodings)


def run_problems(session, todo: list[tuple[Collect, int, int]], desc: str) -> None:
    """Run each (collect, problem index, repeat) in order on ``session``, journaling each run as it finishes."""
    executors: dict[int, object] = {}
    correct = 0
    bar = progress(todo, desc=desc, unit="problem")
    for done, (c, k, j) in enumerate(bar, 1):   # bar.n lags between refreshes
        if id(c) not in executors:
            executors[id(c)] = session.executor(c.executor, c.alg)
        rows = session.run(c.problems[k], c.alg, c.executor, executors[id(c)])
        c.record(k, j, rows)
        correct += rows["problems"][0]["correct"]
        bar.set_postfix(acc=f"{100 * correct / done:.0f}%", refresh=False)


def write_tables(c: Collect) -> dict[str, Path]:
    """The shard's tables from its journal: the first repeat's rows, every repeat's timings (``repeats``)."""
    run_fields = dict(run=c.cfg.name, models=c.cfg.models.name, dataset=c.dataset, algorithm=c.algorithm,
                      executor=c.executor)
    tables: dict[str, list[dict]] = {t: [] for t in COLLECT_TABLES}
    for k in range(len(c.problems)):
        rows = json.loads((c.journal / journal_name(k, 0)).read_text())
        for t in COLLECT_TABLES:
            tables[t].extend({**run_fields, **r} for r in rows.get(t, ()))
        for j in range(1, c.repeats):
            again = json.loads((c.journal / journal_name(k, j)).read_text())
            check_same_steps(rows, again, j)
            tables["repeats"].extend({**run_fields, **r} for r in repeat_rows(again, j))
        if c.repeats > 1:
            tables["repeats"].extend({**run_fields, **r} for r in repeat_rows(rows, 0))
    for t, schema in COLLECT_TABLES.items():
        write_parquet(tables[t], c.out[t], schema)
    acc = 100 * sum(r["correct"] for r in tables["problems"]) / max(1, len(tables["problems"]))
    log.info("%s/%s/%s shard %s: %d problems, %.1f%% correct", c.dataset, c.algorithm, c.executor, c.shard,
             len(c.problems), acc)
    return c.out


def _resuming(todo: list, total: int) -> None:
    if len(todo) < total:
        print(f"[collect] resuming: {total - len(todo)} of {total} problem runs already done", file=sys.stderr)


def run_shard(cfg, paths: RunPaths, overrides: list[str], dataset: str, algorithm: str, executor: str,
              shard: str, processes: bool | None = None) -> dict[str, Path]:
    """Collect one shard; returns the paths of its tables."""
    c = plan_collect(cfg, paths, overrides, dataset, algorithm, executor, shard)
    # repeats run in rounds over the problems, so a problem's repeats meet the machine at different times
    todo = [(c, k, j) for j in range(c.repeats) for k in range(len(c.problems)) if not c.done(k, j)]
    _resuming(todo, len(c.problems) * c.repeats)
    if todo:
        with open_session(c.cfg, paths, c.alg, processes) as session:
            run_problems(session, todo, f"collect {dataset}/{algorithm}/{executor} {shard}")
    return write_tables(c)


def interleaved_order(collects: list[Collect], seed: int) -> list[tuple[Collect, int, int]]:
    """Every (collect, problem index, repeat): round by round (repeat j of every problem before repeat j + 1 of any,
    as a block-wise collect repeats), problem by problem within a round; within a problem, every collect's run of the
    round in an order shuffled by ``seed``, the problem's id and the round (so it is the same on a rerun and in any
    shard). What is compared (the collects) shares the problem's seconds; a problem's repeats lie a round apart, so
    a slow spell of a few seconds reaches one of them, not all (the validation counts the fastest)."""
    import random

    order = []
    for j in range(max(c.repeats for c in collects)):
        for k, prob in enumerate(collects[0].problems):
            runs = [(c, k, j) for c in collects if j < c.repeats]
            random.Random(f"{seed}/{prob.id}/{j}").shuffle(runs)
            order += runs
    return order


def run_interleaved(cfg, paths: RunPaths, overrides: list[str], dataset: str, shard: str,
                    names: list[tuple[str, str]], what: str, processes: bool | None = None, job: str = ""
                    ) -> dict[tuple[str, str], dict[str, Path]]:
    """The collects ``names`` ((algorithm, executor) each) of one shard in one job over one session: round by round
    (``collect.repeats``), problem by problem, every collect's run of a problem in a seeded shuffled order
    (:func:`interleaved_order`), so that the machine's load in any minute falls on all of them alike. Each collect's
    journal and tables are those :func:`run_shard` writes; returns {(algorithm, executor): its tables}. ``what``
    names them in the progress bar and the errors; ``job`` goes into their journals' spec (:func:`_journal_spec`)."""
    collects = [plan_collect(cfg, paths, overrides, dataset, a, e, shard, job) for a, e in names]
    check_one_session(collects, what)
    todo = [(c, k, j) for c, k, j in interleaved_order(collects, int(cfg.seed)) if not c.done(k, j)]
    _resuming(todo, sum(len(c.problems) * c.repeats for c in collects))
    if todo:
        with open_session(collects[0].cfg, paths, collects[0].alg, processes) as session:
            run_problems(session, todo, f"collect {dataset} {what} ({len(collects)} collects) {shard}")
    return {(c.algorithm, c.executor): write_tables(c) for c in collects}


def run_timed(cfg, paths: RunPaths, overrides: list[str], dataset: str, shard: str,
              processes: bool | None = None) -> dict[tuple[str, str], dict[str, Path]]:
    """The timed collects (:func:`~heterospec.config.collect_variants.timed_collects`) of one shard in one job
    (:func:`run_interleaved`)."""
    names = timed_collects(cfg)
    if not names:
        raise UserError("collect.algorithms names no algorithm config: there are no timed collects to run")
    return run_interleaved(cfg, paths, overrides, dataset, shard, names, "timed", processes)


def run_variant(cfg, paths: RunPaths, overrides: list[str], dataset: str, algorithm: str, shard: str,
                processes: bool | None = None) -> dict[tuple[str, str], dict[str, Path]]:
    """A collect variant's executors (its ``executors``, else ``collect.executors``) of one shard in one job
    (:func:`run_interleaved`) over one session of its draft: its step-ahead speedup compares runs of the same
    minutes, not two jobs' runs beside different other work."""
    if not is_variant(cfg, algorithm):
        raise UserError(f"collect variant --algorithm {algorithm}: not a collect variant (collect.variants "
                        f"{sorted(cfg.collect.variants)}); an algorithm config's collects run in `collect timed`")
    names = [(algorithm, e) for e in collect_executors(cfg, algorithm)]
    # its journals say so: a block-wise one (collect run, or this stage before 976c8ab) starts afresh, not resumed
    job = "interleaved: " + ", ".join(e for _, e in names)
    return run_interleaved(cfg, paths, overrides, dataset, shard, names, algorithm, processes, job)


def check_one_session(collects: list[Collect], what: str = "timed") -> None:
    """The collects share one session: the same problems, the same way of writing the target, the same sampling."""
    first = collects[0]
    for c in collects[1:]:
        if [p.id for p in c.problems] != [p.id for p in first.problems]:
            raise UserError(f"collect: the {what} collects {first.algorithm} and {c.algorithm} read different "
                            f"problems")
        for key in SESSION_KEYS:
            if c.alg[key] != first.alg[key]:
                raise UserError(f"algorithm.{key}: {c.alg[key]!r} in {c.algorithm}, {first.alg[key]!r} in "
                                f"{first.algorithm}; the {what} collects share one session (one value for all, or "
                                f"make one a collect variant)")


def merge(paths: RunPaths, dataset: str, algorithm: str, executor: str, shards: int) -> None:
    """Join the shards of one (dataset, algorithm, executor) into its tables."""
    for t, schema in COLLECT_TABLES.items():
        parts = [read_parquet(paths.collect_shard(dataset, algorithm, executor, f"{i}of{shards}", t), schema)
                 for i in range(shards)]
        write_parquet(pa.concat_tables(parts), paths.collect_table(dataset, algorithm, executor, t), schema)
    log.info("merged %d shard(s) of %s/%s/%s", shards, dataset, algorithm, executor)


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.collect", "Run RSD / BRSD with traces; merge shards.")
    p.add_argument("command", choices=["run", "timed", "variant", "merge"])
    p.add_argument("--dataset", required=True)
    p.add_argument("--algorithm", help="run, merge: an algorithm config (rsd | brsd) or a collect.variants name; "
                                       "variant: a collect.variants name")
    p.add_argument("--executor", choices=["sequential", "step_ahead"], help="run, merge")
    p.add_argument("--shard", default="0of1", help="run, timed, variant: which problem range, <i>of<n>")
    p.add_argument("--shards", type=int, default=None, help="merge: how many shards (default collect.shards)")
    args = stage.parse(p, argv)
    if args.command in ("run", "merge") and not (args.algorithm and args.executor):
        raise UserError(f"collect {args.command}: needs --algorithm and --executor")
    if args.command == "variant" and not args.algorithm:
        raise UserError("collect variant: needs --algorithm (a collect.variants name; its executors run interleaved)")
    if args.command in ("run", "timed", "variant"):
        from heterospec.reasoning.workers import start_forkserver
        start_forkserver()             # the workers' imports beside this process's config and model checks
    cfg, paths = stage.compose(args)
    if args.command == "run":
        run_shard(cfg, paths, args.overrides, args.dataset, args.algorithm, args.executor, args.shard)
    elif args.command == "timed":
        run_timed(cfg, paths, args.overrides, args.dataset, args.shard)
    elif args.command == "variant":
        run_variant(cfg, paths, args.overrides, args.dataset, args.algorithm, args.shard)
    else:
        merge(paths, args.dataset, args.algorithm, args.executor, args.shards or cfg.collect.shards)


if __name__ == "__main__":
    stage.run(main)
