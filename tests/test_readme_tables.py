"""`heterospec tables RUN` prints the README's tables of a run from the catalogue's views: every column it asks
for exists in its view, a run's rows come out (and only that run's), a view without rows says so, and a run with
none of them is one line. And the README itself: a front door with its headline tables where the generator puts
them."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import heterospec
from heterospec.cli import README_TABLES
from heterospec.evaluate import EVALUATION_SCHEMA
from heterospec.store import write_parquet
from heterospec.store.catalog import TABLES, build, query
from test_query_readonly import SCHEMAS


def _rows(run: str, method: str, correct: list[bool]) -> list[dict]:
    return [dict(run=run, experiment=run, models="tiny", dataset="synthetic", method=method, problem_id=str(i),
                 answer="1", prediction="1" if c else "2", correct=c, output="", prompt_tokens=3, output_tokens=5,
                 wall_s=0.1) for i, c in enumerate(correct)]


def two_run_tree(root: Path) -> Path:
    """A results tree under ``root`` with every view present (empty, so every table's SELECT is checked), run r1's
    evaluations (draft 1 of 4 right, target 4 of 4) and r2's one row; returns its catalogue."""
    for view, globs in TABLES.items():
        for g in (globs,) if isinstance(globs, str) else globs:
            write_parquet([], root / g.replace("*", "empty"), SCHEMAS[view])
    ev = root / "results" / "r1" / "evaluate" / "synthetic"
    write_parquet(_rows("r1", "draft_only", [True, False, False, False]), ev / "draft_only.parquet", EVALUATION_SCHEMA)
    write_parquet(_rows("r1", "target_only", [True, True, True, True]), ev / "target_only.parquet", EVALUATION_SCHEMA)
    write_parquet(_rows("r2", "draft_only", [False]), root / "results" / "r2" / "evaluate" / "synthetic" /
                  "draft_only.parquet", EVALUATION_SCHEMA)
    db = root / "results" / "heterospec.duckdb"
    build(db, root)
    return db


def test_readme_tables_of_a_run(tmp_path):
    db = two_run_tree(tmp_path)
    for _, view, columns in README_TABLES:
        assert query(db, f"SELECT {columns} FROM {view} LIMIT 0")[0] == [c.strip() for c in columns.split(",")]
    r = heterospec("tables", "r1", "--db", str(db))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Accuracy, Table III — run r1, view table3" in out
    assert "synthetic  draft_only   4         25" in out and "synthetic  target_only  4         100" in out, out
    table3 = out.split("view table3\n")[1].split("\n\n")[0]
    assert table3.endswith("(2 rows)"), table3              # r1's two methods, not r2's
    assert "Model quality (docs/models.md): no rows for run r1 in model_quality" in out
    r = heterospec("tables", "nope", "--db", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "run nope: none of the README's tables" in r.stderr


# The README as a front door (issue 35): short, no history in it, its headline tables between the results marks the
# docs/results generator rewrites, and a way to every docs page.
ROOT = Path(__file__).resolve().parents[1]
RESULTS_NAMES = ("model_quality", "table3", "collect_summary", "step_ahead_speedup", "replay_validation",
                 "load_capacity", "serving", "dfvg")
DATE = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")   # a commit hash: hex with a letter and a digit


def front_door_problems(text: str, docs: list[str]) -> list[str]:
    """Every way ``text`` (a README) fails as a front door, one line each; ``docs`` the pages it must link."""
    problems = []
    lines = text.splitlines()
    if len(lines) > 250:
        problems.append(f"README.md: {len(lines)} lines, more than 250")
    outside = re.sub(r"<!-- results: (\w+) -->.*?<!-- /results: \1 -->", "", text, flags=re.S)
    for pattern, what in ((DATE, "a date"), (HASH, "a commit hash")):
        problems += [f"README.md: {what} outside the generated tables: {m.group()}" for m in pattern.finditer(outside)]
    for name in RESULTS_NAMES:
        opened = [i for i, ln in enumerate(lines) if ln.strip() == f"<!-- results: {name} -->"]
        closed = [i for i, ln in enumerate(lines) if ln.strip() == f"<!-- /results: {name} -->"]
        if len(opened) != 1 or len(closed) != 1 or closed[0] <= opened[0] + 1:
            problems.append(f"README.md: results block {name}: {len(opened)} openings, {len(closed)} closings, "
                            "expected one of each with the table between")
    problems += [f"README.md: no link to {page}" for page in docs if f"]({page})" not in text]
    return problems


def _pages() -> list[str]:
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    return pages + ["docs/results/", "CHANGELOG.md"]


def test_readme_is_a_front_door():
    assert front_door_problems((ROOT / "README.md").read_text(), _pages()) == []


def test_front_door_problems_are_found():
    good = (ROOT / "README.md").read_text()
    assert front_door_problems(good + "\nmeasured at 1e39ce1 on 2026-12-01\n", _pages()) == [
        "README.md: a date outside the generated tables: 2026-12-01",
        "README.md: a commit hash outside the generated tables: 1e39ce1"]
    assert front_door_problems(good + "x\n" * 251, _pages())[0].endswith("lines, more than 250")
    no_block = good.replace("<!-- /results: serving -->", "")
    assert front_door_problems(no_block, _pages()) == [
        "README.md: results block serving: 1 openings, 0 closings, expected one of each with the table between"]
    assert front_door_problems(good.replace("](docs/load.md)", "](docs/load)"), _pages()) == [
        "README.md: no link to docs/load.md"]


ISSUE_35_CHECK = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]|\b[0-9a-f]{7}\b commit|at [0-9a-f]{7}")
# What makes a reference page an investigation log (issue 48): one run named by its number ("run 4", "run 12's",
# "Runs 10 to 12"), a time of day ("03:35 UTC"), words that compare with the past ("the previous model gave",
# "previously", "now 0.93 %", "no longer", "formerly"). A run's findings go to docs/results/ or CHANGELOG.md.
PAST_CHECK = re.compile(r"\bruns? [0-9]+\b|\b[0-2]?[0-9]:[0-5][0-9](:[0-5][0-9])? ?UTC\b"
                        r"|\bprevious(ly)?\b|\bformerly\b|\bno longer\b|\bnow\b", re.I)


def dated_lines(root: Path) -> list[str]:
    """Lines of README.md and docs/ (docs/results/ excepted: generated or a run's findings, with its commit and date)
    that cite a date or a commit, as issue 35's grep finds them, or a run's number, a time of day or the past, as
    issue 48's does."""
    pages = [root / "README.md"] + sorted(p for p in (root / "docs").rglob("*.md")
                                          if "results" not in p.relative_to(root / "docs").parts[:-1])
    return [f"{p.relative_to(root)}:{i}: {ln.strip()}" for p in pages if p.exists()
            for i, ln in enumerate(p.read_text().splitlines(), 1)
            if ISSUE_35_CHECK.search(ln) or PAST_CHECK.search(ln)]


def test_docs_cite_no_dates_or_commits(tmp_path):
    assert dated_lines(ROOT) == []
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "README.md").write_text("fine\nthe previous model gave 5.208 ms\n")
    (tmp_path / "docs" / "a.md").write_text(
        "ok\nmeasured at 6ed02ea\non the 03:35 UTC run\nrun 12's traces\nRun 3 read\nruns 10 to 12\n"
        "previously 1.55 %\nnow 0.93 %\nit no longer halves the speed\nthe serving stage 6; a run's 6 problems; run it; rerun 2 times\n"
        "at 07:01 the end\n")
    (tmp_path / "docs" / "results" / "r.md").write_text("commit 6ed02ea, 2026-12-02, run 4 at 03:35 UTC, "
                                                        "previously\n")
    assert dated_lines(tmp_path) == ["README.md:2: the previous model gave 5.208 ms",
                                     "docs/a.md:2: measured at 6ed02ea", "docs/a.md:3: on the 03:35 UTC run",
                                     "docs/a.md:4: run 12's traces", "docs/a.md:5: Run 3 read",
                                     "docs/a.md:6: runs 10 to 12", "docs/a.md:7: previously 1.55 %",
                                     "docs/a.md:8: now 0.93 %", "docs/a.md:9: it no longer halves the speed"]
