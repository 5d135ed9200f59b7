"""The offline node's bundle without a network: which requirements travel (the project's ranges against a node's
packages), the platform tags asked of pip, the wheels the node has left out, the size report, and the bundle's own
check.py refusing a damaged bundle or another Python with one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from heterospec.errors import UserError
from heterospec.gpu.bundle import TARGET_MIB, copy_models, drop_node_packages, platform_tags, report_size, sizes
from heterospec.gpu.node import TYPICAL_NODE, check_provided, node_packages, project_requirements, to_carry

REQUIREMENTS = project_requirements(ROOT / "pyproject.toml")


def test_the_project_ranges_admit_the_typical_nodes_torch_and_transformers():
    node = node_packages(TYPICAL_NODE.read_text(), "typical_node.txt")
    assert str(node["torch"]) == "2.11.0" and str(node["transformers"]) == "5.17.0"
    assert set(check_provided(REQUIREMENTS, node)) == {"torch", "transformers"}
    # what the issue says such a node lacks, less the workflow engine (the check runs no Snakemake)
    assert sorted(r.name for r in to_carry(REQUIREMENTS, node)) == ["duckdb", "hydra-core", "math-verify", "omegaconf",
                                                                    "simpy"]


def test_a_node_outside_the_ranges_or_without_torch_is_one_line():
    with pytest.raises(UserError, match=r"the node's torch 2.15.0 is outside the project's range torch<2.15,>=2.4"):
        check_provided(REQUIREMENTS, node_packages("torch==2.15.0\ntransformers==5.17.0\n", "node.txt"))
    with pytest.raises(UserError, match="the node has no transformers"):
        check_provided(REQUIREMENTS, node_packages("torch==2.11.0\n", "node.txt"))
    with pytest.raises(UserError, match=r"node.txt:2: 'torch>=2' is not a freeze line"):
        node_packages("numpy\ntorch>=2\n", "node.txt")


def test_a_package_the_node_holds_too_old_travels():
    node = node_packages("torch==2.11\ntransformers==5.17\nDuckDB==0.9.2\nsimpy\nPyYAML==6.0.2\n-e git+x#egg=y\n", "n")
    carried = sorted(r.name for r in to_carry(REQUIREMENTS, node))
    assert "duckdb" in carried            # 0.9.2 is below the project's duckdb>=1.0
    assert "simpy" not in carried and "pyyaml" not in carried and "PyYAML" not in carried
    assert "snakemake" not in carried and "torch" not in carried


def test_platform_tags_take_every_older_manylinux():
    tags = platform_tags("manylinux2014_x86_64")
    assert tags[0] == "manylinux_2_17_x86_64" and tags[-3:] == ["manylinux1_x86_64", "manylinux2010_x86_64",
                                                                "manylinux2014_x86_64"]
    assert len(tags) == 13 + 3 and "manylinux_2_18_x86_64" not in tags and "manylinux_2_5_x86_64" in tags
    tags = platform_tags("manylinux_2_28_aarch64")
    assert tags[:2] == ["manylinux_2_28_aarch64", "manylinux_2_27_aarch64"] and "manylinux2014_aarch64" in tags
    with pytest.raises(UserError, match="--platform manylinux_x: expected a wheel platform tag"):
        platform_tags("manylinux_x")


def test_wheels_the_node_has_are_left_out(tmp_path):
    names = ["duckdb-1.4.2-cp312-cp312-manylinux_2_27_x86_64.whl", "PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.whl",
             "antlr4_python3_runtime-4.9.3-py3-none-any.whl", "typing_extensions-4.12.2-py3-none-any.whl"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    dropped = drop_node_packages(tmp_path, node_packages("pyyaml==6.0.2\ntyping-extensions\n", "n"))
    assert dropped == [names[1], names[3]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[0], names[2]])


def test_the_size_report_adds_up_and_says_when_it_is_over(tmp_path):
    manifest = {"files": {"wheels/a.whl": {"bytes": 3 * 2**20}, "wheels/b.whl": {"bytes": 2**20},
                          "models/_models/draft/k/manifest.json": {"bytes": 100}, "check.py": {"bytes": 10}}}
    assert sizes(manifest) == {"wheels": 4 * 2**20, "models": 100, "other": 10}
    lines = []
    small, big = tmp_path / "small.tar.gz", tmp_path / "big.tar.gz"
    small.write_bytes(b"x" * 1000)
    with open(big, "wb") as f:
        f.truncate(TARGET_MIB * 2**20)             # exactly the target: not under it
    assert report_size(manifest, small, lines.append) == 1000
    report_size(manifest, big, lines.append)
    assert "within the 64 MiB target" in lines[0] and "wheels 4.0 MiB" in lines[0]
    assert "64.0 MiB, OVER the 64 MiB target" in lines[1]


def test_a_run_without_its_trained_models_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"results/_models/draft/\w+/manifest.json: the ci run's draft is not trained"):
        copy_models(tmp_path, "ci", tmp_path / "models")


def _entry(bundle: Path, *args: str):
    return subprocess.run([sys.executable, str(bundle / "check.py"), *args], capture_output=True, text=True,
                          timeout=60)


def test_the_bundles_check_py_refuses_another_python_and_damaged_files(tmp_path):
    from heterospec.manifests import digest_files
    bundle = tmp_path / "heterospec-gpu"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "check.py").write_text((ROOT / "src/heterospec/gpu/entry.py").read_text())
    (bundle / "wheels" / "simpy-4.1.1-py3-none-any.whl").write_bytes(b"wheel bytes")
    files = digest_files(bundle)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    (bundle / "bundle.json").write_text(json.dumps(dict(python="3.1", files=files, requirements=[], run="ci")))
    r = _entry(bundle)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"check.py: this bundle holds wheels for Python 3.1; {sys.executable} is Python {here} (run check.py with "
        f"the node's Python 3.1, or build a bundle for {here})"]
    (bundle / "bundle.json").write_text(json.dumps(dict(python=here, files=files, requirements=[], run="ci")))
    (bundle / "wheels" / "simpy-4.1.1-py3-none-any.whl").write_bytes(b"wheel bytez")
    r = _entry(bundle)
    assert r.returncode == 2 and "wheels/simpy-4.1.1-py3-none-any.whl: differs from bundle.json" in r.stderr
    assert "Traceback" not in r.stderr
