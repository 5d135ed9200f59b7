"""The load replay stage on the artifact's Config1 traces: its tables, the DuckDB views and figures over them, and
bad input stopped with one line naming the key before anything runs."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import artifact_run, heterospec
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.replay.load.stage import point_stage, run_stage

SMALL = ["load.requests=30", "load.max_requests=60", "load.seeds=2", "load.search_steps=2", "load.curve=[0.5]", "load.systems=[gpu3,hetero_u280]",
         "load.methods=[target,rsd,brsd]", "replay.datasets=[gsm8k]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run with the artifact's gsm8k traces imported (both trace sets), in a scratch folder."""
    return artifact_run(tmp_path_factory, "load_test", SMALL)


def test_stage_writes_capacity_points_requests_and_draws(run, monkeypatch, tmp_path):
    root, paths, over = run
    cap = run_stage(compose_config(over), paths, over)
    assert cap.num_rows == 6 and set(cap.column("method").to_pylist()) == {"target", "rsd", "brsd"}
    assert cap.column("unloaded_same").to_pylist() == [1.0] * 6   # alone at batch 1: the single-request replay
    points = pq.read_table(paths.load_points).to_pylist()
    requests = pq.read_table(paths.load_requests)
    assert len({p["point"] for p in points}) == len(points)
    for c in cap.to_pylist():   # below every hard limit, the least of its seeds, counted at the full size
        assert c["capacity_rps"] < c["limit_rps"] and c["seeds"] == 2
        assert c["capacity_lo_rps"] <= c["capacity_rps"] <= c["capacity_hi_rps"]
        mine = [p for p in points if p["system"] == c["system"] and p["method"] == c["method"]]
        assert {p["seed"] for p in mine if p["purpose"] == "search"} == {0, 1}
        if c["capacity_rps"] > 0:
            assert c["counted"] == 60 and c["p99_s"] <= c["slo_s"]
            at = [p for p in mine if p["purpose"] == "search" and p["offered_rps"] == c["capacity_rps"]]
            assert at and at[0]["keeps_up"] and at[0]["counted"] == 60   # the realised rate of a point that met
    assert requests.num_rows == sum(p["requests"] for p in points)
    from heterospec.report.__main__ import draw
    from heterospec.store.catalog import build
    monkeypatch.chdir(root)
    db = Path("results") / "heterospec.duckdb"
    assert {"load_curve", "load_capacity_summary"} <= set(build(db, Path(".")))
    for name in ("load_latency", "load_capacity", "load_utilisation"):
        files = draw(name, "load_test", tmp_path, db)
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000, files


def one_line(e: pytest.ExceptionInfo, key: str) -> None:
    text = str(e.value)
    assert "\n" not in text and key in text, text


@pytest.mark.parametrize("override, key", [
    ("load.arrivals.rate=0", "load.arrivals.rate"),
    ("load.arrivals.rate=-2", "load.arrivals.rate"),
    ("load.max_batch.target=5000", "load.max_batch.target"),
    ("load.draft_lanes=4", "load.draft_lanes"),
    ("load.batching.prm=greedy", "load.batching.prm"),
])
def test_bad_load_settings_are_one_line_before_anything_runs(run, override, key):
    root, paths, over = run
    with pytest.raises(UserError) as e:
        point_stage(compose_config([*over, override]), paths, [*over, override])
    one_line(e, key)


@pytest.mark.parametrize("override, key", [("load.slo.multiple=0.5", "load.slo.multiple"),
                                           ("load.slo.seconds=0.01", "load.slo.seconds")])
def test_an_slo_below_the_unloaded_latency_is_refused(run, override, key):
    root, paths, over = run
    for f in (paths.load_requests, paths.load_points, paths.load_capacity):
        f.unlink(missing_ok=True)
    with pytest.raises(UserError) as e:
        run_stage(compose_config([*over, override]), paths, [*over, override])
    one_line(e, key)
    assert not paths.load_capacity.exists()   # nothing ran, nothing written


def test_timestamps_out_of_order_name_the_file_and_line(run, tmp_path):
    root, paths, over = run
    times = tmp_path / "times.txt"
    times.write_text("0.0\n1.5\n# a comment\n1.0\n")
    with pytest.raises(UserError) as e:
        point_stage(compose_config([*over, "load.arrivals.kind=timestamps", f"load.arrivals.path={times}"]), paths,
                    over)
    one_line(e, f"{times}:4")


def test_cli_bad_input_exits_2_with_one_line(run):
    root, paths, over = run
    r = heterospec("replay", "load-point", *over, "load.arrivals.rate=0", cwd=root)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("heterospec:")]
    assert len(lines) == 1 and "load.arrivals.rate" in lines[0], r.stderr
