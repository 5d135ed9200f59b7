"""`heterospec results-doc RUN` writes docs/results/<run>.md from a run's catalogue views (each table after the
`heterospec query` command that prints it, the run, commit and date above) and rewrites the README's results blocks
with the named table; `--check` names a stale block; a README without blocks is left alone."""
from __future__ import annotations

import re
import shlex

import pytest

from conftest import heterospec
from heterospec.errors import UserError
from heterospec.store.catalog import query
from heterospec.store.results_page import HEADLINES, README_HEADLINES, rewrite_blocks
from test_readme_tables import two_run_tree

README = """\
# A project

Text before.

<!-- results: table3 -->
an old table
<!-- /results: table3 -->

Between.

<!-- results: model_quality -->
<!-- /results: model_quality -->
Text after.
"""


@pytest.fixture
def tree(tmp_path):
    """A results tree with every view present (empty) and run r1's evaluations (Table III rows), r2's one row."""
    db = two_run_tree(tmp_path)
    (tmp_path / "README.md").write_text(README)
    return tmp_path, db


def test_every_headline_table_asks_its_view_for_columns_it_has(tree):
    _, db = tree
    assert set(HEADLINES) == {"model_quality", "table3", "collect_summary", "step_ahead_speedup", "dfvg",
                              "replay_validation", "load_capacity", "load_design_space", "serving"}
    for name, tables in HEADLINES.items():
        for t in tables:
            assert query(db, f"SELECT {t.columns} FROM {t.view} LIMIT 0")[0] == \
                [c.strip() for c in t.columns.split(",")], (name, t.view)
    # the README's compact tables: one per name, each query runs (a pivot reads only, with its values listed)
    assert set(README_HEADLINES) == set(HEADLINES)
    for name, t in README_HEADLINES.items():
        query(db, t.sql("r1"))


def test_the_page_shows_each_table_after_the_command_that_prints_it(tree):
    root, db = tree
    r = heterospec("results-doc", "r1", "--db", str(db), "--out", str(root / "docs" / "results"),
                   "--readme", str(root / "README.md"), cwd=root)
    assert r.returncode == 0, r.stderr
    page = (root / "docs" / "results" / "r1.md").read_text()
    assert page.startswith("# Results of run `r1`")
    assert "* commit: unknown (not a git checkout) (the checkout's HEAD when this page was generated" in page
    assert re.search(r"^\* generated: 20\d\d-\d\d-\d\d \d\d:\d\d UTC$", page, re.M)
    table3 = page.split("## table3\n")[1].split("\n## ")[0]
    command = re.search(r"<!-- runnable -->\n```bash\n(heterospec query .*)\n```", table3).group(1)
    assert command == ("heterospec query \"SELECT dataset, method, problems, accuracy FROM table3 "
                       "WHERE run = 'r1' ORDER BY ALL\"")
    assert "| dataset | method | problems | accuracy |\n|---|---|---|---|\n| synthetic | draft_only | 4 | 25 |\n" \
           "| synthetic | target_only | 4 | 100 |" in table3
    # the command shown prints the same rows (r1's two methods, not r2's)
    printed = heterospec(*shlex.split(command)[1:], "--db", str(db), "--format", "csv")
    assert printed.stdout.splitlines() == ["dataset,method,problems,accuracy", "synthetic,draft_only,4,25.0",
                                           "synthetic,target_only,4,100.0"], printed.stderr
    # a table without rows for the run is one line, under every other name too
    assert "*Model quality (docs/models.md): no rows for run r1 in view `model_quality`; skipped.*" in page
    assert all(f"## {name}\n" in page for name in HEADLINES)


def test_the_readme_blocks_get_the_named_table_and_check_names_a_stale_one(tree):
    root, db = tree
    readme = root / "README.md"
    args = ("results-doc", "r1", "--db", str(db), "--out", str(root / "docs" / "results"), "--readme", str(readme))
    check = heterospec(*args, "--check", cwd=root)
    assert check.returncode == 1 and f"{readme}:5 table3: stale" in check.stderr and "model_quality" in check.stderr
    assert readme.read_text() == README and not (root / "docs" / "results").exists()   # --check writes nothing
    assert heterospec(*args, cwd=root).returncode == 0
    text = readme.read_text()
    assert text.startswith("# A project\n\nText before.\n\n<!-- results: table3 -->\n\n| dataset | draft_only |")
    block = text.split("<!-- results: table3 -->")[1].split("<!-- /results: table3 -->")[0]
    # the README's compact table: Table III pivoted to one row per dataset, methods as columns in the paper's order,
    # a method the run lacks empty (hand-written from the tree's rows: draft 1 of 4 right, target 4 of 4)
    assert block.split("\n")[2:5] == [
        "| dataset | draft_only | target_only | target_sd | rsd | brsd | brsd_w8a8 | brsd_u280 |",
        "|---|---|---|---|---|---|---|---|",
        "| synthetic | 25 | 100 |  |  |  |  |  |"]
    assert "an old table" not in block and "prm_auroc" not in block     # not another name's table
    # its source line: the run's page, its machines (none recorded here) and the command that prints the same row
    command = re.search(r"<sub>\[run `r1`\]\(docs/results/r1.md\) on an unrecorded machine: "
                        r"`(heterospec query .*)`</sub>", block).group(1)
    printed = heterospec(*shlex.split(command)[1:], "--db", str(db), "--format", "csv")
    assert printed.stdout.splitlines()[1] == "synthetic,25.0,100.0,,,,,", printed.stderr
    assert "no rows for run `r1` in view `model_quality`" in text.split("<!-- results: model_quality -->")[1]
    assert text.endswith("<!-- /results: model_quality -->\nText after.\n")
    assert heterospec(*args, "--check", cwd=root).returncode == 0
    readme.write_text(text.replace("| 25 |", "| 26 |"))
    check = heterospec(*args, "--check", cwd=root)
    assert check.returncode == 1 and check.stderr.splitlines()[0] == \
        f"{readme}:5 table3: stale (heterospec results-doc r1 rewrites it)"


def test_a_readme_without_blocks_is_left_alone_and_bad_blocks_are_one_line(tree):
    root, db = tree
    plain = root / "PLAIN.md"
    plain.write_text("# No blocks\n")
    before = plain.stat().st_mtime_ns
    r = heterospec("results-doc", "r1", "--db", str(db), "--out", str(root / "out"), "--readme", str(plain))
    assert r.returncode == 0 and plain.stat().st_mtime_ns == before and (root / "out" / "r1.md").exists()
    with pytest.raises(UserError, match=r"^R.md:2: results block 'nope' names no headline table"):
        rewrite_blocks("x\n<!-- results: nope -->\n<!-- /results: nope -->\n", "R.md", {})
    with pytest.raises(UserError, match=r"^R.md:1: results block 'table3' is not closed"):
        rewrite_blocks("<!-- results: table3 -->\n<!-- /results: dfvg -->\n", "R.md", {"table3": ""})
    r = heterospec("results-doc", "nope", "--db", str(db), "--readme", "")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "run nope: none of the headline tables" in r.stderr


XEON = {"cpu_model": "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz", "cpu_id": "family 6 model 85 stepping 7",
        "vector_isa": "avx512", "logical_cores": 2, "usable_cores": 2, "host": "node1", "commit": "a" * 40,
        "dirty": False, "recorded_at": "2026-01-02T03:04:05Z"}
EPYC = {**XEON, "cpu_model": "AMD EPYC 7B12", "cpu_id": "family 23 model 49 stepping 0", "vector_isa": "avx2",
        "logical_cores": 16, "usable_cores": 4, "host": "node2", "commit": "b" * 40, "dirty": True}


def _record(root, run: str, jobs: list[tuple[str, str, dict]]):
    """Write each (stage, job, machine) of ``run`` into the tree's results, and rebuild its catalogue."""
    from heterospec.store.catalog import build
    from heterospec.store.machines import record
    for stage, job, machine in jobs:
        record(root / "results" / run, run, stage, job, machine)
    db = root / "results" / "heterospec.duckdb"
    build(db, root)
    return db


def test_the_page_names_the_machines_and_commits_the_run_recorded(tree):
    root, _ = tree
    db = _record(root, "r1", [("evaluate", "evaluate --method draft_only", XEON),
                              ("evaluate", "evaluate --method target_only", XEON),
                              ("models", "models train --role draft", EPYC),
                              ("models", "models train --role prm", {"recorded_at": "2026-01-01T00:00:00Z"})])
    _record(root, "r2", [("evaluate", "evaluate --method draft_only", EPYC)])   # another run's: not r1's
    readme = root / "README.md"
    r = heterospec("results-doc", "r1", "--db", str(db), "--out", str(root / "docs" / "results"),
                   "--readme", str(readme), cwd=root)
    assert r.returncode == 0, r.stderr
    page = (root / "docs" / "results" / "r1.md").read_text()
    head = page.split("\n## ")[0].splitlines()
    xeon = "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz (family 6 model 85 stepping 7, avx512), 2 logical cores"
    epyc = "AMD EPYC 7B12 (family 23 model 49 stepping 0, avx2), 16 logical cores (4 usable)"
    # the jobs ran on two machines (and a role trained before manifests recorded one) at two commits: all listed,
    # the checkout's HEAD beside them (the tree is no git checkout)
    assert head[4:] == [
        "* run: `r1` (`results/r1/`)",
        "* commits: the run's 3 jobs ran at 2 commits:",
        f"  * {'a' * 40}: 2 jobs (evaluate)",
        f"  * {'b' * 40} with uncommitted changes: 1 job (models)",
        "* checkout HEAD when this page was generated: unknown (not a git checkout)",
        "* machines: the run's 4 jobs ran on 3 machines; compare its numbers with a run's on the same CPU model: "
        "[models.md](../models.md#reproducibility):",
        f"  * {xeon}: 2 jobs (evaluate)",
        f"  * {epyc}: 1 job (models)",
        "  * machine not recorded: 1 job (models)",
        head[-1]], head
    assert head[-1].startswith("* generated: ")
    # each README block's source line names the run and its machines
    block = readme.read_text().split("<!-- results: table3 -->")[1].split("<!-- /results: table3 -->")[0]
    assert f"<sub>[run `r1`](docs/results/r1.md) on 3 machines: {xeon}; {epyc}; machine not recorded: `heterospec " \
           "query" in block, block


def test_one_machine_and_the_checkouts_own_commit_are_one_line_each(tree):
    from heterospec.store.results_page import header
    root, _ = tree
    db = _record(root, "r1", [("evaluate", "evaluate --method draft_only", XEON)])
    xeon = "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz (family 6 model 85 stepping 7, avx512), 2 logical cores"
    machine = (f"* machine: {xeon} (recorded by the run's 1 job; compare its numbers with a run's on the same CPU "
               "model: [models.md](../models.md#reproducibility))")
    assert header(db, "r1", "a" * 40) == [f"* commit: {'a' * 40} (recorded by the run's 1 job)", machine]
    assert header(db, "r1", "c" * 40)[1] == f"* checkout HEAD when this page was generated: {'c' * 40}"
    # a run made before runs recorded them: the checkout's HEAD, said to be only that
    assert header(db, "r2", "c" * 40) == [
        f"* commit: {'c' * 40} (the checkout's HEAD when this page was generated; the run recorded no commit: made "
        "before runs recorded it)",
        "* machine: not recorded (the run was made before runs recorded their machine)"]
