"""Every command the README and docs show is marked, and (slow) every one marked runnable runs.

The marks are the line just above each fenced ```bash block of README.md and docs/**/*.md (docs/results/, generated,
excepted): ``<!-- runnable -->``, ``<!-- runnable: plan -->``, ``<!-- runnable: ci -->``, ``<!-- not-runnable: REASON
-->``, or the newcomer blocks' ``<!-- newcomer: run|test -->`` (.ci/run runs the test one; nothing here runs them).
A fast test fails, naming file:line, for a block without exactly one valid mark. The slow tests run each runnable,
plan and ci block (one case each, id file:line) with ``bash -euo pipefail`` in one scratch copy of the checkout whose
results/ holds a finished ``ci`` run, also copied to results/default (its rows relabelled ``default``), with
HETEROSPEC_ARTIFACT / HETEROSPEC_DATASETS set to ../shared's artifact sample and benchmarks and the placeholders
/data/HeteroReason and /data/benchmarks replaced by them; a plan block's ``snakemake`` commands get ``-n``, a ci
block's run ``experiment=ci``.

``HETEROSPEC_DOCS=a.md:b.md`` checks and runs those markdown files instead (tests/data/documented_commands.md is a
hand-written one). ``HETEROSPEC_DOCS_TREE=DIR`` builds the scratch tree in DIR and keeps it: a later session copies
the checkout's files over it again, reuses its ci run (then "Nothing to be done") and removes every other run the
blocks made, so that they run as in a fresh tree.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, SHARED, run_cmd

ARTIFACT = SHARED / "heteroreason_ae"
DATASETS = SHARED / "datasets"
PLACEHOLDERS = {"/data/HeteroReason": ARTIFACT, "/data/benchmarks": DATASETS}
TIMEOUT_S = {"runnable": 2400, "plan": 300, "ci": 1800}  # a runnable block is meant to take seconds; the artifact
MAX_CI_BLOCKS = 3                                         # replay takes about 17 minutes on 2 busy cores (its load
                                                          # search alone about 15: docs/load.md), twice that
RUN = ("runnable", "plan", "ci")

MARK_LIKE = re.compile(r"^\s*<!--\s*(runnable|not-runnable|newcomer)\b")
MARKS = [
    (re.compile(r"^<!-- runnable -->$"), "runnable"),
    (re.compile(r"^<!-- runnable: plan -->$"), "plan"),
    (re.compile(r"^<!-- runnable: ci -->$"), "ci"),
    (re.compile(r"^<!-- not-runnable: \S.*\S -->$|^<!-- not-runnable: \S -->$"), "not-runnable"),
    (re.compile(r"^<!-- newcomer: (run|test) -->$"), "newcomer"),
]
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(\S*)")


@dataclass(frozen=True)
class Block:
    path: str           # the markdown file, relative to the checkout's root when inside it
    line: int           # the opening fence's line, 1-based
    mark: str | None    # runnable, plan, ci, not-runnable, newcomer; None: no valid mark
    text: str           # the block's lines, the fence's indentation removed

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def mark_of(line: str) -> str | None:
    return next((kind for pattern, kind in MARKS if pattern.match(line.strip())), None)


def parse(text: str, path: str) -> tuple[list[Block], list[str]]:
    """The ```bash blocks of one markdown text with their marks, and its problems ("file:line: what"): a bash block
    whose line above is no valid mark, two marks above one block, a mark above no bash block."""
    lines = text.splitlines()
    blocks, problems, marked, i = [], [], set(), 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, info = fence.groups()
        end = next((j for j in range(i + 1, len(lines))
                    if re.match(rf"^\s*{re.escape(ticks[0])}{{{len(ticks)},}}\s*$", lines[j])), len(lines))
        if info == "bash":
            above = lines[i - 1] if i else ""
            mark = mark_of(above)
            where = f"{path}:{i + 1}"
            if mark is None:
                problems.append(f"{where}: bash block without a mark on the line above "
                                + (f"(not a valid mark: {above.strip()!r})" if MARK_LIKE.match(above) else
                                   "(<!-- runnable -->, <!-- runnable: plan|ci -->, <!-- not-runnable: REASON -->)"))
            else:
                marked.add(i - 1)
                if i >= 2 and MARK_LIKE.match(lines[i - 2]):
                    marked.add(i - 2)
                    problems.append(f"{where}: bash block with more than one mark above it")
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:end]]
            blocks.append(Block(path, i + 1, mark, "\n".join(body) + "\n"))
        i = end + 1
    for k, ln in enumerate(lines):
        if MARK_LIKE.match(ln) and k not in marked and not any(b.line == k + 2 for b in blocks):
            problems.append(f"{path}:{k + 1}: mark not directly above a ```bash block: {ln.strip()!r}")
    return blocks, problems


def doc_files() -> list[Path]:
    """HETEROSPEC_DOCS's files, else README.md and docs/**/*.md (docs/results/ is generated: not checked)."""
    if os.environ.get("HETEROSPEC_DOCS"):
        return [Path(p) if Path(p).is_absolute() else ROOT / p for p in os.environ["HETEROSPEC_DOCS"].split(":")]
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "results" not in p.relative_to(ROOT / "docs").parts)
    return [ROOT / "README.md", *docs]


def collect() -> tuple[list[Block], list[str]]:
    blocks, problems = [], []
    for f in doc_files():
        name = str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f)
        b, p = parse(f.read_text(), name)
        blocks += b
        problems += p
    return blocks, problems


# --- rewriting a block for its mark ----------------------------------------------------------------------------

SNAKEMAKE = re.compile(r"""^\s*(?:(?:\w+=(?:'[^']*'|"[^"]*"|\S*)|env|time|\S*python[\d.]*\s+-m)\s+)*snakemake(?=\s|$)""")


def segments(line: str) -> list[str]:
    """A shell line cut into commands and the separators between them (&&, ||, ;, |), quotes respected."""
    out, cur, quote, i = [], "", None, 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (not cur or cur[-1].isspace()):       # a comment: to the end of the line, kept as is
            return out + [cur, line[i:], ""]
        else:
            sep = next((s for s in ("&&", "||", ";", "|") if line.startswith(s, i)), None)
            if sep and not (sep == "|" and i and line[i - 1] == ">"):
                out += [cur, sep]
                cur, i = "", i + len(sep)
                continue
        cur += c
        i += 1
    return out + [cur]


def runs_snakemake(command: str) -> re.Match | None:
    """Where ``snakemake`` is the program a command runs (``snakemake ...``, ``X=y snakemake``, ``python -m
    snakemake``), not an argument (``pip install snakemake``, ``echo 'snakemake'``)."""
    return SNAKEMAKE.match(command)


def rewrite_command(command: str, mark: str) -> str:
    m = runs_snakemake(command)
    if m is None or mark == "runnable":
        return command
    if mark == "plan":
        return command[:m.end()] + " -n" + command[m.end():]
    if re.search(r"(?<!\S)experiment=\S+", command):               # ci: experiment=X becomes experiment=ci
        return re.sub(r"(?<!\S)experiment=[^\s'\"]+", "experiment=ci", command)
    if re.search(r"(?<!\S)--config(?=\s)", command):
        return re.sub(r"(?<!\S)--config(?=\s)", "--config experiment=ci", command, count=1)
    return command.rstrip() + " --config experiment=ci" + command[len(command.rstrip()):]


def rewrite(block: Block) -> str:
    """The script a marked block runs: placeholders replaced; plan: ``snakemake -n``; ci: ``experiment=ci``."""
    text = block.text
    for placeholder, path in PLACEHOLDERS.items():
        text = text.replace(placeholder, str(path))
    text = re.sub(r"\\\n", " ", text)                               # one line per command
    return "\n".join("".join(rewrite_command(s, block.mark) if k % 2 == 0 else s
                             for k, s in enumerate(segments(ln))) for ln in text.splitlines()) + "\n"


def run_block(block: Block, tree: Path) -> subprocess.CompletedProcess:
    env = {"HETEROSPEC_ARTIFACT": str(ARTIFACT), "HETEROSPEC_DATASETS": str(DATASETS),
           "PYTHONPATH": str(tree / "src"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return run_cmd(["bash", "-euo", "pipefail", "-c", rewrite(block)], cwd=tree, env=env,
                   timeout=TIMEOUT_S[block.mark])


# --- fast: the marks, and the parsing and rewriting on hand-written markdown ----------------------------------------

def test_every_bash_block_has_exactly_one_valid_mark():
    blocks, problems = collect()
    assert blocks, f"no ```bash blocks in {[str(f) for f in doc_files()]}"
    assert not problems, "\n".join(problems)


def test_ci_blocks_are_few_and_the_artifact_replay_command_is_run():
    blocks, _ = collect()
    ci = [b.id for b in blocks if b.mark == "ci"]
    assert len(ci) <= MAX_CI_BLOCKS, f"{len(ci)} blocks marked runnable: ci (at most {MAX_CI_BLOCKS}): {ci}"
    artifact = [b for b in blocks if re.search(r"snakemake .*experiment=artifact_replay", b.text)]
    assert any(b.mark == "runnable" for b in artifact), \
        f"the artifact_replay command is in no block marked <!-- runnable --> ({[b.id for b in artifact]})"


EXAMPLE = """\
# Example

<!-- runnable -->
```bash
heterospec query "SELECT 1 AS one"
```

Text.
<!-- runnable: plan -->
```bash
HETEROSPEC_DATASETS=/data/benchmarks snakemake --cores all \\
    --config experiment=paper_config2 && echo planned
```

1. In a list:

   <!-- runnable: ci -->
   ```bash
   snakemake --cores 2 --config overrides='eval_limit=5' | tail -3; python -m snakemake --cores 1
   ```

<!-- not-runnable: needs a GPU -->
```bash
snakemake --cores all --profile workflow/profiles/slurm
```

<!-- newcomer: run -->
```bash
pip install snakemake && snakemake --cores all
```
```python
print("not a bash block: no mark needed")
```
"""


def test_blocks_are_found_with_their_marks_and_lines():
    blocks, problems = parse(EXAMPLE, "x.md")
    assert problems == []
    assert [(b.id, b.mark) for b in blocks] == [("x.md:4", "runnable"), ("x.md:10", "plan"), ("x.md:18", "ci"),
                                                ("x.md:23", "not-runnable"), ("x.md:28", "newcomer")]
    assert blocks[2].text == "snakemake --cores 2 --config overrides='eval_limit=5' | tail -3; " \
                             "python -m snakemake --cores 1\n"


@pytest.mark.parametrize("change, problem", [
    (("<!-- runnable -->\n```bash\nheterospec", "```bash\nheterospec"), "x.md:3: bash block without a mark"),
    (("<!-- runnable -->", "<!-- runnable: fast -->"), "x.md:4: bash block without a mark on the line above "
                                                       "(not a valid mark: '<!-- runnable: fast -->')"),
    (("<!-- not-runnable: needs a GPU -->", "<!-- not-runnable: -->"), "x.md:23: bash block without a mark"),
    (("<!-- runnable -->\n```bash", "<!-- not-runnable: slow -->\n<!-- runnable -->\n```bash"),
     "x.md:5: bash block with more than one mark"),
    (("<!-- runnable -->\n```bash", "<!-- runnable -->\n\n```bash"), "x.md:3: mark not directly above"),
])
def test_a_block_without_exactly_one_valid_mark_is_named_by_file_and_line(change, problem):
    _, problems = parse(EXAMPLE.replace(*change, 1), "x.md")
    assert any(p.startswith(problem) for p in problems), problems


def test_plan_and_ci_blocks_rewrite_their_snakemake_commands_only():
    blocks, _ = parse(EXAMPLE, "x.md")
    runnable, plan, ci, _, newcomer = blocks
    assert rewrite(runnable) == runnable.text
    assert rewrite(plan) == (f"HETEROSPEC_DATASETS={DATASETS} snakemake -n --cores all "
                             "     --config experiment=paper_config2 && echo planned\n")
    assert rewrite(ci) == ("snakemake --cores 2 --config experiment=ci overrides='eval_limit=5' | tail -3; "
                           "python -m snakemake --cores 1 --config experiment=ci\n")
    assert rewrite(Block("x.md", 1, "ci", "X=/data/HeteroReason snakemake --config experiment=dfvg 2>&1 | tee l\n")) \
        == f"X={ARTIFACT} snakemake --config experiment=ci 2>&1 | tee l\n"
    assert rewrite(Block("x.md", 1, "plan", newcomer.text)) == "pip install snakemake && snakemake -n --cores all\n"
    assert rewrite(Block("x.md", 1, "plan", "# snakemake --cores all\necho 'a; snakemake b'\n")) == \
        "# snakemake --cores all\necho 'a; snakemake b'\n"


def test_the_hand_written_example_is_fully_marked():
    blocks, problems = parse((ROOT / "tests" / "data" / "documented_commands.md").read_text(), "example.md")
    assert problems == [] and {b.mark for b in blocks} >= {"runnable", "plan"}


# --- slow: every runnable, plan and ci block run in a scratch tree with a finished ci run ---------------------------

def checkout_files() -> list[str]:
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    return [f for f in r.stdout.split("\0") if f and (ROOT / f).is_file()]


def relabel_run(run_dir: Path, old: str, new: str) -> None:
    """Every Parquet table under a copied run with its ``run`` column renamed (schema and metadata kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in run_dir.rglob("*.parquet"):
        table = pq.read_table(path)
        if "run" not in table.column_names:
            continue
        i = table.column_names.index("run")
        col = pa.array([new if v == old else v for v in table.column("run").to_pylist()], table.schema.field(i).type)
        pq.write_table(table.set_column(i, table.schema.field(i), col), path)


@pytest.fixture(scope="session")
def documented_tree(tmp_path_factory, trained_models) -> Path:
    """A scratch copy of the checkout (tracked and new files) with a finished ci run, also as results/default."""
    from heterospec.paths import ROLES, RunPaths

    kept = os.environ.get("HETEROSPEC_DOCS_TREE")
    tree = Path(kept) if kept else tmp_path_factory.mktemp("documented") / "heterospec"
    for f in checkout_files():
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tree / f)
    results = tree / "results"
    for old in results.glob("*") if kept else ():    # a kept tree: as a fresh one, but for its ci run (and default)
        if old.name not in ("ci", "default", "_models", "heterospec.duckdb"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    if not (results / "ci" / "config.yaml").exists():
        _, session = trained_models.run(["experiment=ci"])       # the session's ci trio, where Snakemake keys it
        paths = RunPaths(results / "ci", session.model_keys)
        for role in ROLES:
            if not paths.model_root(role).exists():
                shutil.copytree(session.model_root(role), paths.model_root(role))
    env = {"PYTHONPATH": str(tree / "src"), "HETEROSPEC_ARTIFACT": str(tree / "absent")}
    r = run_cmd([sys.executable, "-m", "snakemake", "--cores", "2", "--config", "experiment=ci"], cwd=tree, env=env,
                timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    if not (results / "default").exists():
        shutil.copytree(results / "ci", results / "default")
        relabel_run(results / "default", "ci", "default")
    return tree


def runnable_blocks() -> list:
    try:
        blocks, _ = collect()
    except OSError as e:
        return [pytest.param(None, id=f"unreadable:{e}")]
    return [pytest.param(b, id=b.id) for b in blocks if b.mark in RUN]


@pytest.mark.slow
@pytest.mark.parametrize("block", runnable_blocks())
def test_documented_command_runs(block, documented_tree):
    assert block is not None
    try:
        r = run_block(block, documented_tree)
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "") + (e.stderr or "")
        pytest.fail(f"{block.id} ({block.mark}) ran past {TIMEOUT_S[block.mark]} s:\n{block.text}\n{out[-3000:]}")
    assert r.returncode == 0, (f"{block.id} ({block.mark}) failed, rc {r.returncode}:\n{rewrite(block)}\n"
                               f"--- output (tail) ---\n{(r.stdout + r.stderr)[-4000:]}")
