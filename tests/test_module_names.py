"""One name, one meaning: no two modules of the package share a base name unless the name has one stated meaning.

The listing (base name -> each module's path and its docstring's first line) is read from the source with ``ast``;
a clash prints every module of that name with its first line, so the fix (a name for what each holds) is plain.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The base names many modules share on purpose, each with its one meaning. A module of one of these names must fit
# its meaning (a pattern its docstring's first line matches; None: Python's own convention, nothing to read).
SHARED = {
    "__init__": ("a package itself: what the package holds", None),
    "__main__": ("``python -m <package>``: the package's command", None),
    # a package's stage.py is its stage's entry point ("The <X> stage: ..."); heterospec/stage.py is the part every
    # stage's entry point shares (parsing, composing the config, errors as one line)
    "stage": ("a stage's entry point", re.compile(r"^(The (``)?[\w ]+(``)? stage: |What every .*entry point shares)")),
}


def base_names(src: Path = SRC) -> dict[str, list[tuple[str, str]]]:
    """Base name -> [(module path under src, its docstring's first line)] for every module of the package."""
    out = defaultdict(list)
    for p in sorted((src / "heterospec").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(p.read_text(), str(p))) or ""
        out[p.stem].append((str(p.relative_to(src)), doc.strip().splitlines()[0] if doc.strip() else ""))
    return dict(out)


def clashes(names: dict[str, list[tuple[str, str]]]) -> list[str]:
    """One line per base name that several modules share without a stated meaning, or per module of a shared
    name whose first line does not fit that meaning."""
    out = []
    for name, mods in sorted(names.items()):
        if name in SHARED:
            meaning, fits = SHARED[name]
            out += [f"{path} ({first!r}) does not read as {name}'s meaning, {meaning}"
                    for path, first in mods if fits is not None and not fits.search(first)]
        elif len(mods) > 1:
            out.append(f"{name}: " + "; ".join(f"{path} ({first!r})" for path, first in mods))
    return out


def test_no_two_modules_share_a_base_name_with_different_meanings():
    names = base_names()
    assert len(names) > 100 and {"stage", "__init__"} <= set(names)   # the listing reads the whole package
    found = clashes(names)
    if found:
        pytest.fail("\n".join(["modules that share a base name (name each for what it holds):", *found]), False)


def test_a_duplicate_name_or_a_stage_of_another_meaning_is_found(tmp_path):
    pkg = tmp_path / "heterospec"
    for path, doc in [("__init__.py", "The package."), ("a/__init__.py", ""), ("b/__init__.py", ""),
                      ("a/report.py", "Figures of a run."), ("b/report.py", "Tables printed to the terminal."),
                      ("a/stage.py", "The ``a`` stage: what it runs."), ("b/stage.py", "Helpers for stages.")]:
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text(f'"""{doc}"""\n')
    assert clashes(base_names(tmp_path)) == [
        "report: heterospec/a/report.py ('Figures of a run.'); heterospec/b/report.py ('Tables printed to the "
        "terminal.')",
        "heterospec/b/stage.py ('Helpers for stages.') does not read as stage's meaning, a stage's entry point"]
