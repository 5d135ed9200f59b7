"""Every third-party module that src/, tests/ or benchmarks/ imports at top level is provided by a dependency
that pyproject.toml declares (or one of its extras), so a fresh install has it. A package that only arrives as
a dependency of a dependency does not count: it can vanish when that one changes."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from conftest import ROOT

SCANNED = ("src", "tests", "benchmarks")


def _dist(requirement: str) -> str:
    """Normalised distribution name of a requirement string (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9_.-]+)", requirement).group(1)).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {_dist(r) for r in reqs}


def top_level_imports(source: str) -> set[str]:
    """Absolute imports' top-level names, wherever they stand in the file (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def local_modules() -> set[str]:
    """The project's own packages and the scripts tests import from each other (conftest, test helpers)."""
    own = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()}
    return own | {p.stem for d in SCANNED[1:] for p in (ROOT / d).rglob("*.py")}


def project_files() -> list:
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))


def undeclared(files) -> list[str]:
    ok, local, provides = declared(), local_modules(), packages_distributions()
    problems = {}
    for path in files:
        for mod in top_level_imports(path.read_text()) - local - set(sys.stdlib_module_names) - {"__future__"}:
            dists = {_dist(d) for d in provides.get(mod, [])}
            if not dists & ok:
                problems.setdefault(mod, f"{mod} (imported in {path.name}) comes from "
                                         f"{', '.join(sorted(dists)) or 'nothing installed'}, not declared")
    return sorted(problems.values())


def test_every_import_is_declared():
    assert undeclared(project_files()) == []


def test_the_check_catches_a_transitive_only_import(tmp_path):
    """PyYAML is installed (Hydra needs it); an import of a module only a dependency's dependency provides fails."""
    assert "markupsafe" not in declared()        # jinja2's dependency, installed but not ours
    assert top_level_imports("import markupsafe.x\nfrom markupsafe import escape\ndef f():\n import h5py\n") == \
        {"markupsafe", "h5py"}
    probe = tmp_path / "probe.py"
    probe.write_text("import markupsafe\nimport torch\nfrom heterospec import stage\nimport os\n")
    assert [f.split(" ")[0] for f in undeclared([probe])] == ["markupsafe"]


def _lock() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {_dist(ln.split("==")[0]): ln.split("==")[1] for ln in lines if ln and not ln.startswith("#")}


def test_lock_pins_every_declared_dependency_within_its_range():
    from packaging.requirements import Requirement
    lock = _lock()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]:
        req = Requirement(text)
        assert _dist(req.name) in lock, f"{req.name} is declared but constraints.txt does not pin it"
        assert req.specifier.contains(lock[_dist(req.name)], prereleases=True), \
            f"constraints.txt pins {req.name}=={lock[_dist(req.name)]}, outside pyproject's {req.specifier}"


def readme_command(label: str) -> str:
    """The newcomer command under ``<!-- newcomer: LABEL -->`` in the README (what .ci/run copies)."""
    text = (ROOT / "README.md").read_text()
    block = text.split(f"<!-- newcomer: {label} -->", 1)[1].split("```", 2)[1]
    lines = [ln for ln in block.splitlines()[1:] if ln.strip()]
    assert len(lines) == 1, f"the {label} block should hold one command"
    return lines[0]


def test_readme_commands_env_and_lock_agree():
    import yaml
    torch = f"torch=={_lock()['torch']}"
    for label, last in (("run", "snakemake --cores all"), ("test", 'pytest -m "slow or not slow"')):
        cmd = readme_command(label)
        installs = [part.strip() for part in cmd.split("&&")[:-1]]
        assert cmd.endswith(last) and installs[0].startswith(f"pip install {torch} ")
        assert all("-c constraints.txt" in part for part in installs), cmd
    pip = next(d["pip"] for d in yaml.safe_load((ROOT / "workflow/envs/heterospec.yaml").read_text())["dependencies"]
               if isinstance(d, dict))
    assert torch in pip and "-c ../../constraints.txt" in pip
    assert (ROOT / "workflow/envs" / "../../constraints.txt").resolve() == (ROOT / "constraints.txt").resolve()
