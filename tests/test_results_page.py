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
                              "replay_validation", "load_capacity", "serving"}
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
    # its source line: the run's page and the command that prints the same row
    command = re.search(r"<sub>\[run `r1`\]\(docs/results/r1.md\): `(heterospec query .*)`</sub>", block).group(1)
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
