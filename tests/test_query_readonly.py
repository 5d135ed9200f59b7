"""`heterospec query` reads and never writes: its DuckDB session may read the results and the configured data
folders only; COPY ... TO (anywhere, the results folder included), ATTACH, INSTALL/LOAD, SET and reading a file
elsewhere are refused in one line, no file is written, and every view of the catalogue still answers."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import heterospec
from heterospec.dfvg.schemas import DFVG_GENERATIONS_SCHEMA, DFVG_REPLAY_SCHEMA, DFVG_ROUNDS_SCHEMA
from heterospec.errors import UserError
from heterospec.evaluate import EVALUATION_SCHEMA
from heterospec.hls.perf_table import HLS_PERF_SCHEMA
from heterospec.hls.stage import HLS_CSIM_SCHEMA, KVMU_SYNTH_SCHEMA
from heterospec.hls.tables import HLS_BREAKDOWN_SCHEMA, HLS_RESOURCES_SCHEMA
from heterospec.models.quality_report import MODEL_QUALITY_SCHEMA
from heterospec.quantize.w8a8_quality import QUANTIZE_QUALITY_SCHEMA
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.reasoning.serving_schemas import SERVING_TABLES
from heterospec.replay.artifact.replays import ARTIFACT_REPLAY_SCHEMA
from heterospec.replay.load.design_space import LOAD_DESIGN_SPACE_SCHEMA
from heterospec.replay.load.load_metrics import LOAD_CAPACITY_SCHEMA, LOAD_POINTS_SCHEMA, LOAD_REQUESTS_SCHEMA
from heterospec.replay.profiles.batch_prices import BATCH_PRICES_SCHEMA
from heterospec.replay.profiles.measured import MEASURED_FIT_SCHEMA
from heterospec.replay.validation.against_serving import SERVING_OUTPUTS_SCHEMA
from heterospec.replay.validation.against_serving import SERVING_VALIDATION_SCHEMA
from heterospec.replay.validation.against_serving import SERVING_ERRORS_SCHEMA
from heterospec.replay.validation.against_serving import SERVING_REPLAYED_SCHEMA
from heterospec.replay.simulator.metrics import REPLAY_RESULTS_SCHEMA
from heterospec.replay.validation.against_collect import REPLAY_VALIDATION_AGGREGATE_SCHEMA, REPLAY_VALIDATION_SCHEMA
from heterospec.report.sources import PAPER_TABLE3_SCHEMA
from heterospec.report.sweep import SWEEP_POINTS_SCHEMA
from heterospec.replay.grid.tau_sweep import TAU_SWEEP_SCHEMA
from heterospec.store import write_parquet
from heterospec.store.catalog import SUMMARIES, TABLES, build, query
from heterospec.store.machines import MACHINES_SCHEMA

# each catalogue table's schema: the real one its stage writes
SCHEMAS = {"evaluations": EVALUATION_SCHEMA, "model_quality": MODEL_QUALITY_SCHEMA,
           "quantize_quality": QUANTIZE_QUALITY_SCHEMA, "hls_perf": HLS_PERF_SCHEMA, "hls_breakdown": HLS_BREAKDOWN_SCHEMA,
           "hls_resources": HLS_RESOURCES_SCHEMA, "hls_csim": HLS_CSIM_SCHEMA, "kvmu_synth": KVMU_SYNTH_SCHEMA,
           "machines": MACHINES_SCHEMA,
           "replay_results": REPLAY_RESULTS_SCHEMA, "replay_artifact": ARTIFACT_REPLAY_SCHEMA, "replay_validation": REPLAY_VALIDATION_SCHEMA,
           "replay_validation_aggregate": REPLAY_VALIDATION_AGGREGATE_SCHEMA,
           "measured_fit": MEASURED_FIT_SCHEMA, "dfvg_generations": DFVG_GENERATIONS_SCHEMA, "dfvg_rounds": DFVG_ROUNDS_SCHEMA,
           "dfvg_replay": DFVG_REPLAY_SCHEMA, "sweep_points": SWEEP_POINTS_SCHEMA, "paper_table3": PAPER_TABLE3_SCHEMA,
           "tau_sweep": TAU_SWEEP_SCHEMA, "load_requests": LOAD_REQUESTS_SCHEMA, "load_points": LOAD_POINTS_SCHEMA,
           "load_capacity": LOAD_CAPACITY_SCHEMA, "load_design_space": LOAD_DESIGN_SPACE_SCHEMA,
           **{f"collect_{k}": v for k, v in COLLECT_TABLES.items()},
           # the serving run and its validation
           **{f"serving_{k}": v for k, v in SERVING_TABLES.items()}, "serving_batch_prices": BATCH_PRICES_SCHEMA,
           "serving_outputs": SERVING_OUTPUTS_SCHEMA, "serving_validation": SERVING_VALIDATION_SCHEMA,
           "serving_replayed": SERVING_REPLAYED_SCHEMA, "serving_errors": SERVING_ERRORS_SCHEMA}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """A project with one (empty, correctly typed) Parquet file under every glob, and its catalogue."""
    root = tmp_path_factory.mktemp("project")
    assert set(SCHEMAS) == set(TABLES), "a new catalogue table needs its schema here"
    for view, globs in TABLES.items():
        for g in (globs,) if isinstance(globs, str) else globs:
            write_parquet([], root / g.replace("*", "r1"), SCHEMAS[view])
    db = root / "results" / "heterospec.duckdb"
    assert set(build(db, root)) == set(TABLES) | set(SUMMARIES)
    (root / "results" / "r1" / "notes.csv").write_text("a,b\n1,2\n")
    (root / "outside.csv").write_text("secret\n42\n")
    return root, db


def test_every_view_answers_in_the_sandbox(catalogue):
    _, db = catalogue
    for view in [*TABLES, *SUMMARIES]:
        cols, rows = query(db, f"SELECT * FROM {view}")
        assert cols and rows == [], view
    # reading the results directly, and describing, still work
    assert query(db, "SELECT * FROM read_csv('results/r1/notes.csv')")[1] == [(1, 2)]
    assert query(db, "DESCRIBE accuracy")[1]


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 42) TO '{root}/written.csv'",
    "COPY (SELECT 42) TO '{root}/results/r1/written.csv'",          # inside the results: still a write
    "EXPLAIN ANALYZE COPY (SELECT 42) TO '{root}/results/written.csv'",
    "SELECT 1; COPY (SELECT 42) TO '{root}/results/written.csv'",
    "EXPORT DATABASE '{root}/results/written'",
    "ATTACH '{root}/written.duckdb' AS w",
    "INSTALL httpfs", "LOAD httpfs",
    "SET enable_external_access = true", "RESET lock_configuration",
])
def test_statements_that_write_attach_load_or_lift_the_limits_are_refused(catalogue, sql):
    root, db = catalogue
    before = sorted(p for p in root.rglob("*"))
    with pytest.raises(UserError, match=r"^query refused: \w+ statements are not allowed; queries only read"):
        query(db, sql.format(root=root))
    assert sorted(p for p in root.rglob("*")) == before


@pytest.mark.parametrize("path", ["/etc/passwd", "{root}/outside.csv", "results/../outside.csv",
                                  "{root}/results/../outside.csv", "{root}/results_evil/x.csv"])
def test_reading_outside_the_allowed_folders_is_refused(catalogue, path):
    root, db = catalogue
    with pytest.raises(UserError, match=r"^query refused: .* is outside the folders a query may read"):
        query(db, f"SELECT * FROM read_csv('{path.format(root=root)}')")
    with pytest.raises(UserError, match="query refused"):     # a setting cannot be changed in the session either
        query(db, "PRAGMA enable_profiling")


def test_the_command_refuses_in_one_line_and_reads_the_configured_data_paths(catalogue, tmp_path):
    root, db = catalogue
    r = heterospec("query", f"COPY (SELECT 42) TO '{tmp_path}/x.csv'", "--db", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("heterospec: query refused: COPY statements are not allowed")
    assert not (tmp_path / "x.csv").exists()
    r = heterospec("query", "SELECT * FROM read_csv('/etc/passwd')", "--db", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("heterospec: query refused: /etc/passwd is outside the folders a query may read")
    # paths.datasets (here from HETEROSPEC_DATASETS) is readable, and so is a folder named with --allow
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    sql = f"SELECT answer FROM read_json('{tmp_path}/gsm8k/test.jsonl')"
    r = heterospec("query", sql, "--db", str(db), "--format", "csv", env={"HETEROSPEC_DATASETS": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.splitlines() == ["answer", "2"], r.stderr
    r = heterospec("query", sql, "--db", str(db), "--format", "csv")
    assert r.returncode == 2 and "query refused" in r.stderr
    r = heterospec("query", sql, "--db", str(db), "--format", "csv", "--allow", str(tmp_path / "gsm8k"))
    assert r.returncode == 0 and r.stdout.splitlines() == ["answer", "2"], r.stderr


def test_a_reader_that_stops_early_ends_the_command_quietly(catalogue):
    """``heterospec query ... | head``: the command stops at the first write after the reader has gone, without a
    traceback, with the shell's status for a command that SIGPIPE ended."""
    _, db = catalogue
    p = subprocess.Popen([sys.executable, "-m", "heterospec", "query", "SELECT range AS n FROM range(300000)", "--db",
                          str(db), "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"n"
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == "", err
