"""The package's import graph, read from the source with ``ast`` (module-level and function-level imports alike):
no import cycles, and each stage imports only from its own layer or the layers below it (docs/ARCHITECTURE.md).
Every violation is one line naming the modules."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A top-level module or subpackage of heterospec belongs to exactly one layer.
LAYERS = [
    {"heterospec", "config", "errors", "paths", "store", "grading", "text_table", "stage", "manifests", "arrivals",
     "progress", "workflow_log", "trio"},  # leaves and shared plumbing
    {"ids", "precision", "shapes"},  # board and model ids; bytes per precision; published model shapes
    {"models", "tasks"},           # the trio and how one model decodes; the synthetic task and benchmarks
    {"speculative", "quantize"},   # token-level speculative decoding; W8A8
    {"reasoning"},                 # the RSD/BRSD engine (its target may write with token-level speculation)
    {"collect", "serve", "hls", "evaluate"},  # real runs of the engine (one by one; served); the accelerator build;
                                   # single-model decoding
    {"replay", "dfvg"},            # simulation; token-level decoding
    {"report", "aggregate"},       # figures and the catalogue, from stage outputs only
    {"jobs", "cli", "__main__", "gpu"},   # the workflow's job sizes; the command line; the offline GPU node's bundle and check
]

# replay's subpackages, lowest first: within replay each imports only from its own subpackage or those before it,
# and no module lies flat beside them (only replay's __init__ and its ``python -m`` entry, __main__).
REPLAY_LAYERS = ["schedules", "simulator", "profiles", "artifact", "traces", "grid", "load", "validation"]
REPLAY_FLAT = {"heterospec.replay", "heterospec.replay.__main__"}

# Violations excused while another change removes them (empty: none). A "cycle within" entry excuses any cycle whose
# modules all lie in that group; any other entry excuses exactly that line.
_KNOWN_ELSEWHERE: set[str] = set()


def excused(line: str, known: set[str] = _KNOWN_ELSEWHERE) -> bool:
    if line in known:
        return True
    cycle = set(line.removeprefix("import cycle: ").split(" -> ")) if line.startswith("import cycle: ") else None
    return cycle is not None and any(k.startswith("cycle within: ") and cycle <= set(k.split()[2:]) for k in known)


def modules(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under ``src``."""
    out = {}
    for p in sorted((src / "heterospec").rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (a ``from pkg import sub`` counts both)."""
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:       # a name imported from a module: the module itself
                    t = t.rpartition(".")[0]
                if t and t != name:
                    found.add(t)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each module that lies on one, each as a path starting at its smallest module;
    duplicates removed."""
    found = set()
    for start in sorted(graph):
        prev, frontier = {start: None}, [start]
        hit = None
        while frontier and hit is None:          # breadth first: the shortest way back to start
            nxt = []
            for m in frontier:
                for t in sorted(graph[m]):
                    if t == start:
                        hit = m
                        break
                    if t not in prev:
                        prev[t] = m
                        nxt.append(t)
                if hit:
                    break
            frontier = nxt
        if hit is None:
            continue
        path = [hit]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        path.reverse()
        i = path.index(min(path))
        found.add(tuple(path[i:] + path[:i]))
    return [list(c) for c in sorted(found)]


def layer_of(module: str) -> tuple[str, int]:
    unit = module.split(".")[1] if "." in module else module
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return unit, i
    raise AssertionError(f"{module}: its part '{unit}' is in no layer of test_layering.LAYERS; add it to one")


def replay_part(module: str) -> str | None:
    """The replay subpackage ``module`` lies in (None outside replay, or for replay itself and its entry)."""
    parts = module.split(".")
    if parts[:2] != ["heterospec", "replay"] or module in REPLAY_FLAT:
        return None
    if parts[2] not in REPLAY_LAYERS:
        raise AssertionError(f"{module}: '{parts[2]}' is no subpackage of test_layering.REPLAY_LAYERS")
    return parts[2]


def violations(src: Path = SRC) -> list[str]:
    mods = modules(src)
    graph = imports(mods)
    lines = [f"import cycle: {' -> '.join(c + [c[0]])}" for c in cycles(graph)]
    for m in sorted(graph):
        if m.startswith("heterospec.replay.") and m not in REPLAY_FLAT and mods[m].parent.name == "replay":
            lines.append(f"flat: {m} lies beside replay's subpackages; move it into one of {REPLAY_LAYERS}")
            continue
        unit, level = layer_of(m)
        part = replay_part(m)
        for t in sorted(graph[m]):
            tunit, tlevel = layer_of(t)
            if tlevel > level:
                lines.append(f"layering: {m} ({unit}) imports {t} ({tunit}, a higher layer)")
            elif part and mods[t].parent.name != "replay" and (tpart := replay_part(t)) \
                    and REPLAY_LAYERS.index(tpart) > REPLAY_LAYERS.index(part):
                lines.append(f"layering: {m} (replay.{part}) imports {t} (replay.{tpart}, a higher subpackage)")
    return lines


def test_no_import_cycles_and_each_layer_imports_only_downwards():
    new = [v for v in violations() if not excused(v)]
    assert not new, "\n" + "\n".join(new)


def test_the_scan_sees_function_level_cycles_and_upward_imports(tmp_path):
    pkg = tmp_path / "heterospec"
    (pkg / "replay").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "replay" / "__init__.py").write_text("")
    (pkg / "replay" / "a.py").write_text("from heterospec.replay.b import f\n")
    (pkg / "replay" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "models.py").write_text("def g():\n    import heterospec.replay.a\n")
    for part in ("simulator", "load"):
        (pkg / "replay" / part).mkdir()
        (pkg / "replay" / part / "__init__.py").write_text("")
    (pkg / "replay" / "simulator" / "des.py").write_text("def h():\n    from heterospec.replay.load import x\n")
    (pkg / "replay" / "load" / "x.py").write_text("from heterospec.replay.simulator import des\n")
    assert violations(tmp_path) == [
        "import cycle: heterospec.replay.a -> heterospec.replay.b -> heterospec.replay.a",
        "import cycle: heterospec.replay.load.x -> heterospec.replay.simulator.des -> heterospec.replay.load.x",
        "layering: heterospec.models (models) imports heterospec.replay.a (replay, a higher layer)",
        "flat: heterospec.replay.a lies beside replay's subpackages; move it into one of " + str(REPLAY_LAYERS),
        "flat: heterospec.replay.b lies beside replay's subpackages; move it into one of " + str(REPLAY_LAYERS),
        "layering: heterospec.replay.simulator.des (replay.simulator) imports heterospec.replay.load (replay.load, "
        "a higher subpackage)",
        "layering: heterospec.replay.simulator.des (replay.simulator) imports heterospec.replay.load.x (replay.load, "
        "a higher subpackage)"]
    known = {"cycle within: heterospec.hls.buys heterospec.hls.stage"}
    assert excused("import cycle: heterospec.hls.buys -> heterospec.hls.stage -> heterospec.hls.buys", known)
    assert not excused("import cycle: heterospec.hls.buys -> heterospec.replay.grid.stage -> heterospec.hls.buys", known)


def test_the_report_reads_stage_outputs_and_runs_no_simulation():
    """The report and the catalogue draw from what the stages wrote: no module of theirs imports the replay (whose
    simulations a figure shows are the replay stage's outputs, e.g. ``python -m heterospec.replay ours``)."""
    graph = imports(modules())
    found = [f"{m} imports {t}" for m in sorted(graph) if m.split(".")[1:2] in (["report"], ["aggregate"])
             for t in sorted(graph[m]) if t.startswith("heterospec.replay")]
    assert not found, "\n" + "\n".join(found)
