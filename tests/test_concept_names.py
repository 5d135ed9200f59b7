"""One name per concept across the package: a table's schema constant is named after its versioned table, and no two
modules define a top-level class or a public constant of the same name (one concept, one definition, imported
where it is used). Read from the source with ``ast``; a clash names every module that defines the name."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def definitions(src: Path = SRC) -> dict[str, list[str]]:
    """Top-level class or public UPPER_CASE constant name -> the modules (paths under src) that define it."""
    out = defaultdict(list)
    for path in sorted((src / "heterospec").rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper() and t.id[0] != "_"]
            else:
                continue
            for n in names:
                out[n].append(str(path.relative_to(src)))
    return out


def schema_names(src: Path = SRC) -> list[tuple[str, str, str]]:
    """(module, constant, table) for every ``CONSTANT = versioned("table", ...)`` of the package."""
    out = []
    for path in sorted((src / "heterospec").rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "versioned"
                    and isinstance(node.value.args[0], ast.Constant)):
                for t in node.targets:
                    out.append((str(path.relative_to(src)), t.id, node.value.args[0].value))
    return out


def clashes(src: Path = SRC) -> list[str]:
    return [f"{name}: defined in {', '.join(where)}" for name, where in sorted(definitions(src).items())
            if len(where) > 1]


def misnamed_schemas(src: Path = SRC) -> list[str]:
    return [f"{mod}: {const} is the schema of table '{table}'; name it {table.upper()}_SCHEMA"
            for mod, const, table in schema_names(src) if const != f"{table.upper()}_SCHEMA"]


def test_each_class_and_constant_name_is_defined_once():
    found = clashes()
    assert not found, "\n" + "\n".join(found)


def test_each_schema_constant_is_named_after_its_table():
    found = misnamed_schemas()
    assert len(schema_names()) > 30
    assert not found, "\n" + "\n".join(found)


def test_a_second_definition_and_a_misnamed_schema_are_found(tmp_path):
    pkg = tmp_path / "heterospec"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "x.py").write_text('ROLES = ("draft",)\nclass Job:\n    pass\nCALLS_SCHEMA = versioned("serving_calls", 1, [])\n')
    (pkg / "b.py").write_text('ROLES = ("draft",)\n_PRIVATE = 1\nSTEPS_SCHEMA = versioned("steps", 1, [])\n')
    assert clashes(tmp_path) == ["ROLES: defined in heterospec/a/x.py, heterospec/b.py"]
    assert misnamed_schemas(tmp_path) == [
        "heterospec/a/x.py: CALLS_SCHEMA is the schema of table 'serving_calls'; name it SERVING_CALLS_SCHEMA"]


CHAIN = ("steps_from_calls", "steps_from_events")   # a trace table -> steps: called by the one loader only
LOADER = "heterospec/replay/traces/problems.py"


def chain_calls(src: Path = SRC) -> list[str]:
    """``module:line name`` for every call of a trace-to-steps function outside the one loader."""
    out = []
    for path in sorted((src / "heterospec").rglob("*.py")):
        rel = str(path.relative_to(src))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in CHAIN \
                    and rel != LOADER:
                out.append(f"{rel}:{node.lineno} {getattr(node.func, 'id', getattr(node.func, 'attr', ''))}")
    return out


def test_traces_become_problems_in_one_loader():
    found = chain_calls()
    assert not found, "call heterospec.replay.traces.problems instead:\n" + "\n".join(found)
