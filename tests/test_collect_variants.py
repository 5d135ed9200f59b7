"""Collect variants (collect.variants, heterospec.config.collect_variants): a name in collect.algorithms that is an algorithm
config with some keys set and a draft implementation. The collect of a variant runs what its name says (its rows
carry the name; a speculating target writes rounds; a kernel draft's calls say so) and, under greedy decoding,
reasons like the algorithm it varies; its digest moves with its own settings only; a bad variant is one line."""
from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from omegaconf import OmegaConf, open_dict

from conftest import copy_quantized
from heterospec.config import compose_config
from heterospec.config.digest import ResolvedRun
from heterospec.config.collect_variants import check_collect, variant_config
from heterospec.errors import UserError

OVERRIDES = ["experiment=default"]
KEYS = ("problem_id", "prediction", "correct", "output", "stop", "steps", "draft_steps", "target_steps", "backtracks")


def test_a_variant_is_its_algorithm_with_its_keys_and_its_draft():
    cfg = compose_config(OVERRIDES)
    brsd, sd, kernel, w8a8 = (variant_config(cfg, OVERRIDES, n) for n in ("brsd", "brsd_sd", "brsd_u280", "brsd_w8a8"))
    rsd_sd = variant_config(cfg, OVERRIDES, "rsd_sd")
    # the experiment's own algorithm keys (threshold 0.4) hold under every variant, and rsd_sd is RSD
    assert {c.algorithm.threshold for c in (brsd, sd, kernel, w8a8, rsd_sd)} == {0.4}
    assert rsd_sd.algorithm.name == "rsd" and not rsd_sd.algorithm.backtrack and sd.algorithm.backtrack
    assert (brsd.algorithm.target_decoding, sd.algorithm.target_decoding, rsd_sd.algorithm.target_decoding) == \
        ("plain", "chain", "chain")
    assert (kernel.collect.draft, w8a8.collect.draft, brsd.collect.draft) == ("u280", "w8a8", "model")
    assert cfg.algorithm.target_decoding == "plain"          # the run's own config is left alone


@pytest.mark.parametrize("change, message", [
    ({"algorithms": ["rsd", "brsd_zz"]}, "collect.algorithms: 'brsd_zz' is neither an algorithm config"),
    ({"algorithms": ["x"], "variants": {"x": {"algorithm": "zz"}}}, "collect.variants.x.algorithm: 'zz', expected"),
    ({"algorithms": ["x"], "variants": {"x": {"algorithm": "brsd", "draft": "u250"}}},
     r"collect.variants.x.draft: 'u250', expected one of \['model', 'w8a8'\] or a board of hls.boards"),
    ({"algorithms": ["x"], "variants": {"x": {"algorithm": "brsd", "executors": ["pipelined"]}}},
     r"collect.variants.x.executors: 'pipelined' is not in collect.executors \['sequential', 'step_ahead'\]"),
    ({"algorithms": ["x"], "variants": {"x": {"algorithm": "brsd", "overrides": {"treshold": 0.5}}}},
     "collect.variants.x.overrides: no algorithm key 'treshold'"),
])
def test_a_bad_variant_is_one_line(change, message):
    cfg = compose_config(OVERRIDES)
    with open_dict(cfg):
        cfg.collect = OmegaConf.merge(cfg.collect, change)
    with pytest.raises(UserError, match=message) as e:
        check_collect(cfg)
    assert "\n" not in str(e.value)


def test_a_variants_digest_moves_with_its_own_settings_only():
    def specs(extra):
        ov = OVERRIDES + extra
        run = ResolvedRun(compose_config(ov), ov)
        return {a: run.spec("collect_shard", {"dataset": "synthetic", "algorithm": a})
                for a in ("rsd", "brsd", "brsd_sd", "brsd_u280", "brsd_w8a8")}

    before = specs([])
    assert len(set(before.values())) == 5
    # adding collects to the grid reruns none of the others
    assert specs(["collect.algorithms=[rsd,brsd,brsd_sd,brsd_u280]"]) == before
    moved = lambda extra: {a for a, s in specs(extra).items() if s != before[a]}     # noqa: E731
    assert moved(["collect.variants.brsd_sd.overrides.target_decoding=tree"]) == {"brsd_sd"}
    assert moved(["collect.variants.brsd_u280.draft=v80"]) == {"brsd_u280"}
    # a run's algorithm key holds for every algorithm config it collects (the experiment's thresholds do)
    assert moved(["algorithm.max_backtracks=3"]) == moved(["collect.limit=7"]) == set(before)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_variant_collects_reason_like_their_algorithm(trained_models, ci_quantized, tmp_path):
    """Three ci problems: brsd_sd writes brsd's outputs with token-level rounds in its target writes; brsd_u280
    drafts with the kernel and writes what brsd_w8a8 (the torch int8 reference) writes; every row carries the
    variant's name. `heterospec collect compare` counts them alike, and counts a changed PRM reward."""
    from heterospec.collect import merge, run_shard
    from heterospec.hls import stage as hls
    from heterospec.reasoning.collect_schemas import COLLECT_TABLES
    from heterospec.store import read_parquet

    ov = ["experiment=ci", "collect.limit=3"]
    cfg, paths = trained_models.run(ov)
    copy_quantized(ci_quantized, paths)
    hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    hls.library(cfg, "u280", paths.hls_codegen("u280"), paths.hls_lib("u280"))

    def collect(name, executor="sequential"):
        out = run_shard(cfg, paths, ov, "synthetic", name, executor, "0of1", processes=False)
        merge(paths, "synthetic", name, executor, 1)
        return {t: read_parquet(out[t], COLLECT_TABLES[t]).to_pylist() for t in ("problems", "calls", "rounds")}

    got = {n: collect(n) for n in ("brsd", "brsd_sd", "brsd_w8a8", "brsd_u280")}
    ahead = {n: collect(n, "step_ahead") for n in ("brsd_w8a8", "brsd_u280")}
    for name, tables in got.items():
        assert {r["algorithm"] for t in tables.values() for r in t} <= {name} and len(tables["problems"]) == 3
    view = lambda n, got=got: [{k: r[k] for k in KEYS} for r in got[n]["problems"]]     # noqa: E731
    assert view("brsd_sd") == view("brsd") and view("brsd_u280") == view("brsd_w8a8")
    assert view("brsd_u280", ahead) == view("brsd_w8a8", ahead) == view("brsd_w8a8")
    target_writes = [c for c in got["brsd_sd"]["calls"] if c["role"] == "target" and c["phase"] == "decode"]
    assert target_writes and len(got["brsd_sd"]["rounds"]) >= len(target_writes) and not got["brsd"]["rounds"]
    impl = lambda n: {c["impl"] for c in got[n]["calls"] if c["role"] == "draft"}     # noqa: E731
    assert impl("brsd_u280") == {"kernel:u280"} and impl("brsd_w8a8") == {"w8a8"} and impl("brsd") == {"float32"}

    # the comparison, over a catalogue of these collects and of copies of brsd's with one PRM reward changed and of
    # brsd_u280's with a KVMU pointer changed: the step-ahead pointer of a step drafted ahead (how far a cancelled
    # draft got: not compared) under step_ahead, a valid pointer under sequential
    import pyarrow.parquet as pq
    from heterospec.store.catalog import build
    from heterospec.store.compare import compare_collects

    run = tmp_path / "results" / "r"
    shutil.copytree(paths.root / "collect", run / "collect")

    def copy(name, new, change):
        src, dst = run / "collect" / "synthetic" / name, run / "collect" / "synthetic" / new
        shutil.copytree(src, dst)
        for f in dst.rglob("*.parquet"):
            t = pq.read_table(f)
            rows = [{**r, "algorithm": new} for r in t.to_pylist()]
            change(f, rows)
            pq.write_table(pa.Table.from_pylist(rows, t.schema), f)

    def reward(f, rows):
        if f.name == "calls.parquet":
            rows[next(i for i, r in enumerate(rows) if r["role"] == "prm")]["prm_score"] += 0.01

    def pointer(f, rows):
        if f.name == "kvmu.parquet":
            field, why = ("step_ahead", "step_ahead") if "step_ahead" in f.parts else ("valid", "prm")
            rows[next(i for i, r in enumerate(rows) if r["reason"] == why)][field] += 1

    copy("brsd", "brsd_x", reward)
    copy("brsd_u280", "brsd_y", pointer)
    db = tmp_path / "results" / "heterospec.duckdb"
    build(db, tmp_path)
    counts = lambda a, b: compare_collects(db, (cfg.name, a), (cfg.name, b))[1]     # noqa: E731
    assert counts("brsd", "brsd_sd") == [("synthetic", "sequential", 3, 3, 3, 3, 3)]
    assert counts("brsd_u280", "brsd_w8a8") == [("synthetic", "sequential", 3, 3, 3, 3, 3),
                                                ("synthetic", "step_ahead", 3, 3, 3, 3, 3)]
    assert counts("brsd", "brsd_x") == [("synthetic", "sequential", 3, 3, 3, 2, 3)]
    assert counts("brsd_u280", "brsd_y") == [("synthetic", "sequential", 3, 3, 3, 3, 2),
                                             ("synthetic", "step_ahead", 3, 3, 3, 3, 3)]
    with pytest.raises(UserError, match="no problems collected by both .*/brsd and .*/zz"):
        counts("brsd", "zz")


def test_a_variant_with_another_draft_runs_each_problem_once(trained_models, ci_quantized):
    """collect.repeats serves the replay's validation, which reads no variant drafted by another implementation:
    brsd_w8a8 runs each problem once (no repeats rows, one journal entry per problem), brsd keeps its repeats."""
    from heterospec.collect import run_shard
    from heterospec.reasoning.collect_schemas import COLLECT_TABLES
    from heterospec.store import read_parquet

    ov = ["experiment=ci", "collect.limit=2", "collect.repeats=2"]
    cfg, paths = trained_models.run(ov)
    copy_quantized(ci_quantized, paths)
    repeats = {}
    for name in ("brsd", "brsd_w8a8"):
        out = run_shard(cfg, paths, ov, "synthetic", name, "sequential", "0of1", processes=False)
        repeats[name] = {r["repeat"] for r in read_parquet(out["repeats"], COLLECT_TABLES["repeats"]).to_pylist()}
        repeats[name + " journal"] = len(list((out["problems"].parent / "journal").glob("*.json")))
    assert repeats == {"brsd": {0, 1}, "brsd journal": 4, "brsd_w8a8": set(), "brsd_w8a8 journal": 2}


def test_a_variants_executors_run_in_one_job_unless_it_has_one():
    """The default's variants (both executors) each run in one job, interleaved (rule collect_variant); ci's, under
    the sequential executor only, block-wise (rule collect_shard); an algorithm config is not a variant's job."""
    from heterospec.collect import run_variant
    from heterospec.config.collect_variants import paired_variants

    assert paired_variants(compose_config(OVERRIDES)) == ["brsd_u280", "brsd_w8a8"]
    assert paired_variants(compose_config(["experiment=ci"])) == []
    with pytest.raises(UserError, match="collect variant --algorithm brsd: not a collect variant"):
        run_variant(compose_config(OVERRIDES), None, OVERRIDES, "synthetic", "brsd", "0of1")


def test_a_variants_executors_run_interleaved_problem_by_problem_to_the_block_wise_tables(trained_models,
                                                                                            ci_quantized):
    """brsd_w8a8 under both executors in one job over one session (heterospec.collect.run_variant): every problem's
    two runs journaled before the next problem's, in the seeded order of interleaved_order (so the step-ahead
    speedup compares runs of the same seconds), a block-wise journal of it found there not resumed; the tables are
    those of one block-wise collect per executor."""
    from heterospec.collect import Collect, interleaved_order, run_shard, run_variant
    from heterospec.reasoning.collect_schemas import COLLECT_TABLES
    from heterospec.reasoning.repeats import journal_name
    from heterospec.tasks import load_problems
    from test_collect_timed import decided, same

    ov = ["experiment=ci", "collect.limit=3"]
    cfg, paths = trained_models.run(ov)
    copy_quantized(ci_quantized, paths)
    run_shard(cfg, paths, ov, "synthetic", "brsd_w8a8", "sequential", "0of1", processes=False)   # block-wise
    out = run_variant(cfg, paths, ov, "synthetic", "brsd_w8a8", "0of1", processes=False)
    assert sorted(out) == [("brsd_w8a8", "sequential"), ("brsd_w8a8", "step_ahead")]
    written = sorted((f.stat().st_mtime_ns, e, f.name) for (_, e), tables in out.items()
                     for f in (tables["problems"].parent / "journal").glob("*.json"))
    problems = load_problems(cfg.dataset, 3)
    plans = [Collect(None, "synthetic", "brsd_w8a8", e, "0of1", problems, 1, None, {})
             for e in ("sequential", "step_ahead")]
    order = [(c.executor, journal_name(k, j)) for c, k, j in interleaved_order(plans, int(cfg.seed))]
    assert [(e, name) for _, e, name in written] == order and len(order) == 6
    _, block = trained_models.run(ov)
    copy_quantized(ci_quantized, block)
    for (a, e), tables in out.items():
        mine = run_shard(cfg, block, ov, "synthetic", a, e, "0of1", processes=False)
        for t in COLLECT_TABLES:
            assert same(decided(tables[t], t, e), decided(mine[t], t, e)), (a, e, t)
