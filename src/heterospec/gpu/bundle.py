"""``heterospec gpu bundle``: one archive of what an offline GPU node needs to run the check, built where a package
index is reachable.

It holds wheels for the node's Python and platform (only what the node lacks: :mod:`heterospec.gpu.node`), the
checkout's source (``src/``, ``conf/``, pyproject.toml: the code reads its Hydra configs from the checkout's
``conf/``, which a wheel does not carry), the trained trio of a finished run (``results/_models``, each role's
manifest listing its files' sha256), ``check.py`` (the node's one command) and ``bundle.json`` (every file with its
size and sha256). Pure-Python packages published only as source are built into wheels here.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from heterospec.errors import UserError
from heterospec.gpu.node import (TYPICAL_NODE, canonical, check_provided, node_packages, project_requirements,
                                 to_carry)
from heterospec.manifests import digest_files
from heterospec.paths import ROLES

TARGET_MIB = 64
PROJECT_PARTS = ("src", "conf", "pyproject.toml")
_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}


def platform_tags(platform: str) -> list[str]:
    """The node's platform and every older manylinux tag it also runs (pip matches a --platform tag exactly):
    ``manylinux_2_28_x86_64`` -> ``manylinux_2_28_x86_64``, ``manylinux_2_27_x86_64``, ... ``manylinux1_x86_64``."""
    for legacy, minor in _LEGACY.items():
        if platform.startswith(legacy + "_"):
            glibc, arch = minor, platform[len(legacy) + 1:]
            break
    else:
        parts = platform.split("_", 3)
        if len(parts) != 4 or parts[0] != "manylinux" or parts[1] != "2" or not parts[2].isdigit():
            if platform.startswith(("linux_", "macosx_", "win", "musllinux_")):
                return [platform]
            raise UserError(f"--platform {platform}: expected a wheel platform tag such as manylinux2014_x86_64 or "
                            f"manylinux_2_28_x86_64")
        glibc, arch = int(parts[2]), parts[3]
    tags = [f"manylinux_2_{m}_{arch}" for m in range(glibc, 4, -1)]
    return tags + [f"{legacy}_{arch}" for legacy, m in _LEGACY.items() if m <= glibc]


def _pip(args: list[str], what: str) -> None:
    """Run pip here; its last error line as one line when it fails."""
    r = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if r.returncode:
        errors = [ln.removeprefix("ERROR: ") for ln in (r.stderr + r.stdout).splitlines() if ln.startswith("ERROR")]
        raise UserError(f"{what}: pip says: {(errors or (r.stderr or r.stdout).splitlines() or ['?'])[-1]}")


def source_only(requirements: list[str], work: Path) -> list[tuple[str, str]]:
    """(name, version) of the packages in the requirements' closure that the index holds only as source, as pip
    resolves them for this interpreter."""
    report = work / "resolution.json"
    _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *requirements],
         "resolving the bundle's requirements")
    found = []
    for item in json.loads(report.read_text())["install"]:
        url = item["download_info"]["url"]
        if not url.endswith(".whl"):
            found.append((item["metadata"]["name"], item["metadata"]["version"]))
    return found


def build_pure_wheels(packages: list[tuple[str, str]], dest: Path) -> None:
    """Build each source-only package into a wheel; one that is not pure Python cannot serve another Python."""
    for name, version in packages:
        before = set(dest.glob("*.whl"))
        _pip(["wheel", "--no-deps", "--quiet", "-w", str(dest), f"{name}=={version}"], f"building {name} {version}")
        for wheel in set(dest.glob("*.whl")) - before:
            if not wheel.name.endswith(("-py3-none-any.whl", "-py2.py3-none-any.whl")):
                raise UserError(f"{name} {version} is published only as source and is not pure Python "
                                f"({wheel.name}): the bundle cannot carry it for another Python")


def download_wheels(requirements: list[str], python: str, platform: str, dest: Path, work: Path) -> None:
    """Wheels of the requirements' closure for the node's Python and platform into ``dest``."""
    built = work / "built"
    built.mkdir(parents=True, exist_ok=True)
    build_pure_wheels(source_only(requirements, work), built)
    args = ["download", "--quiet", "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--find-links", str(built), "-d", str(dest)]
    for tag in platform_tags(platform):
        args += ["--platform", tag]
    _pip(args + requirements, f"no wheels for Python {python} on {platform}")


def wheel_name(path: Path) -> str:
    return canonical(path.name.split("-")[0])


def drop_node_packages(wheels: Path, node: dict) -> list[str]:
    """Delete the wheels of packages the node has (the node's own copy is used); their names."""
    dropped = []
    for w in sorted(wheels.glob("*.whl")):
        if wheel_name(w) in node:
            dropped.append(w.name)
            w.unlink()
    return dropped


def copy_models(root: Path, run: str, dest: Path) -> dict[str, str]:
    """The run's trained trio (manifests checked) into ``dest/_models/<role>/<key>/``: role -> key."""
    from heterospec.config import compose_config
    from heterospec.models.role_manifest import read_manifest
    from heterospec.paths import RunPaths

    overrides = [f"experiment={run}"]
    paths = RunPaths.for_run(compose_config(overrides), overrides)
    keys = {}
    for role in ROLES:
        manifest = root / paths.model_manifest(role)
        if not manifest.exists():
            raise UserError(f"{manifest}: the {run} run's {role} is not trained here; train it first "
                            f"(snakemake --cores all --config experiment={run}, or python -m heterospec.models train "
                            f"--role {role} experiment={run})")
        data = read_manifest(manifest)           # every listed file against its sha256
        if data.get("source") != "train":
            raise UserError(f"{manifest}: the {role} is a checkpoint given by path, not one trained here: the bundle "
                            f"carries only trained tiny models")
        target = dest / "_models" / role / paths.model_keys[role]
        shutil.copytree(manifest.parent, target, ignore=shutil.ignore_patterns(".*"))
        keys[role] = paths.model_keys[role]
    return keys


def copy_project(root: Path, dest: Path) -> None:
    """The checkout's tracked files of src/, conf/ and pyproject.toml, as they are on disk."""
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *PROJECT_PARTS], capture_output=True, text=True)
    if r.returncode:
        raise UserError(f"{root}: not a git checkout ({r.stderr.strip()}); the bundle carries the checkout's source")
    for rel in filter(None, r.stdout.split("\0")):
        if (root / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dest / rel)


def build(root: Path, python: str, platform: str, run: str, out: Path, node_file: Path | None = None,
          say=print) -> dict:
    """Build the bundle at ``out`` (a .tar.gz); returns its manifest (``bundle.json``)."""
    import heterospec

    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise UserError(f"--python-version {python}: expected major.minor, e.g. 3.12")
    node_path = Path(node_file) if node_file else TYPICAL_NODE
    try:
        node = node_packages(node_path.read_text(), str(node_path))
    except FileNotFoundError:
        raise UserError(f"--node-has {node_path}: not found") from None
    requirements = project_requirements(root / "pyproject.toml")
    provided = check_provided(requirements, node)
    carry = [str(r) for r in to_carry(requirements, node)]
    say(f"[bundle] the node's own: {', '.join(f'{k} {v}' for k, v in provided.items())}")
    say(f"[bundle] carrying for Python {python} on {platform}: {', '.join(carry) or 'nothing'}")
    with tempfile.TemporaryDirectory(prefix="heterospec-bundle-") as tmp:
        stage = Path(tmp) / "heterospec-gpu"
        (stage / "wheels").mkdir(parents=True)
        if carry:
            download_wheels(carry, python, platform, stage / "wheels", Path(tmp))
        dropped = drop_node_packages(stage / "wheels", node)
        say(f"[bundle] {len(list((stage / 'wheels').glob('*.whl')))} wheels"
            + (f" ({len(dropped)} the node has already left out: {', '.join(dropped)})" if dropped else ""))
        models = copy_models(root, run, stage / "models")
        copy_project(root, stage / "project")
        shutil.copy2(Path(__file__).with_name("entry.py"), stage / "check.py")
        (stage / "requirements.txt").write_text("".join(f"{r}\n" for r in carry))
        manifest = dict(made_by=f"heterospec {heterospec.__version__}", python=python, platform=platform,
                        node=str(node_path.name), node_provides=provided, run=run, models=models,
                        requirements=carry, files=digest_files(stage))
        (stage / "bundle.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(stage, arcname=stage.name)
    report_size(manifest, out, say)
    return manifest


def sizes(manifest: dict) -> dict[str, int]:
    """Bytes per part of the bundle: wheels, models, project, the rest."""
    parts: dict[str, int] = {}
    for rel, entry in manifest["files"].items():
        part = rel.split("/", 1)[0] if "/" in rel else "other"
        parts[part] = parts.get(part, 0) + entry["bytes"]
    return parts


def report_size(manifest: dict, out: Path, say=print) -> int:
    """Say the archive's size against the target, part by part; the size in bytes."""
    size = Path(out).stat().st_size
    mib = 2 ** 20
    parts = ", ".join(f"{k} {v / mib:.1f} MiB" for k, v in sorted(sizes(manifest).items()))
    verdict = "within" if size < TARGET_MIB * mib else "OVER"
    say(f"[bundle] {out}: {size / mib:.1f} MiB, {verdict} the {TARGET_MIB} MiB target (unpacked: {parts})")
    return size
