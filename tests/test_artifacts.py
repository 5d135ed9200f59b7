"""Artifacts that check themselves and a results tree that can move, on the session's ci models, W8A8 export and a
kernel generated from it: a truncated or changed checkpoint, tokenizer, export or kernel file stops its loader with
one line naming it, ``heterospec check`` lists it, and Snakemake's plan stops on it; a finished tree copied into
another folder (the first deleted) plans nothing under ``snakemake -n`` and loads its own files."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import heterospec, run_cmd, snakemake
from heterospec.manifests import damage, digest_files, portable, problems, resolve
from heterospec.errors import UserError
from heterospec.models.role_manifest import read_manifest
from heterospec.paths import ROLES, RunPaths


def _tree(trained_models, ci_quantized, results):
    """A results tree holding the ci run's trio (keyed as Snakemake keys it), its W8A8 export and quality table,
    and the u280 kernel generated from that export; modification times kept, as ``cp -a`` keeps them."""
    from heterospec.config import compose_config
    from heterospec.hls import stage as hls

    _, session = trained_models.run(["experiment=ci"])
    cfg = compose_config(["experiment=ci"])
    paths = RunPaths(results / "ci", session.model_keys)
    for role in ROLES:
        shutil.copytree(session.model_root(role), paths.model_root(role))
    _, quantized, _ = ci_quantized
    shutil.copytree(quantized.quantized_draft.parent, paths.quantized_draft.parent)
    shutil.copy2(quantized.quantize_quality, paths.quantize_quality)
    hls.codegen(cfg, paths, "u280", paths.quantized_draft, paths.hls_codegen("u280"))
    return cfg, paths


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _one_line(call) -> str:
    with pytest.raises(UserError) as e:
        call()
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.fixture
def tree(trained_models, ci_quantized, tmp_path):
    return _tree(trained_models, ci_quantized, tmp_path / "results")


def test_each_manifest_lists_its_files_relative_and_hashed(tree):
    cfg, paths = tree
    for role in ROLES:
        m = json.loads(paths.model_manifest(role).read_text())
        assert m["path"] == "checkpoint" and m["files"] == digest_files(paths.model_checkpoint(role))
        assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(m["files"])
    export = json.loads(paths.quantized_draft.read_text())
    assert export["source"] == f"../../../_models/draft/{paths.model_keys['draft']}/checkpoint"
    assert export["files"] == digest_files(paths.quantized_draft.parent, skip=("quantized.json",))
    kernel = json.loads(paths.hls_codegen("u280").read_text())
    assert kernel["export"] == "../../../quantize/draft" and "weights_i8.bin" in kernel["files"]
    # no file of the tree records where the tree lies
    root = str(paths.root.parent.resolve())
    written = [p for p in paths.root.parent.rglob("*") if p.is_file() and p.suffix in (".json", ".h", ".v", ".tcl")]
    assert written and not [p for p in written if root in p.read_text()]
    assert damage(paths.hls_codegen("u280")) == (len(kernel["files"]), [])


def test_truncated_or_changed_files_are_one_line_and_check_lists_them(tree, tmp_path):
    from heterospec.hls.stage import kernel_manifest
    from heterospec.quantize import load_quantized_draft

    cfg, paths = tree
    results = paths.root.parent
    ok = heterospec("check", "--results", str(results))
    assert ok.returncode == 0 and ok.stdout == "" and "all intact" in ok.stderr, ok.stderr
    weights = paths.model_checkpoint("draft") / "model.safetensors"
    tokenizer = paths.model_checkpoint("target") / "tokenizer.json"
    export = paths.quantized_draft.parent / "weights.safetensors"
    kernel = paths.hls_codegen("u280").parent / "weights_i8.bin"
    for f in (weights, tokenizer, export):
        _truncate(f)
    blob = bytearray(kernel.read_bytes())      # same size, one byte changed: only the sha256 can tell
    blob[len(blob) // 2] ^= 1
    kernel.write_bytes(bytes(blob))

    assert _one_line(lambda: read_manifest(paths.model_manifest("draft"))).startswith(f"{weights}: truncated")
    assert _one_line(lambda: read_manifest(paths.model_manifest("target"))).startswith(f"{tokenizer}: truncated")
    line = _one_line(lambda: load_quantized_draft(export.parent))
    assert line.startswith(f"{export}: truncated") and "python -m heterospec.quantize" in line
    line = _one_line(lambda: kernel_manifest(paths.hls_codegen("u280")))
    assert line.startswith(f"{kernel}: sha256 differs") and "heterospec.hls codegen --board u280" in line

    # the evaluate stage, as a user runs it: one line naming the file and how to rebuild it, no traceback
    r = run_cmd([sys.executable, "-m", "heterospec.evaluate", "--dataset", "synthetic", "--method", "draft_only",
                 "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"heterospec: {weights}: truncated, "), r.stderr
    manifest = paths.model_manifest("draft").relative_to(tmp_path)
    assert f"rebuild it: rm -r {manifest.parent} && snakemake --cores all --forcerun {manifest} (or " in lines[0]

    bad = heterospec("check", "--results", str(results))
    assert bad.returncode == 1
    assert sorted(ln.split(": ")[0] for ln in bad.stdout.splitlines()) == sorted(map(str, (weights, tokenizer,
                                                                                           export, kernel)))
    assert "4 damaged or missing" in bad.stderr
    one = heterospec("check", "ci", "--results", str(results))     # one run: its files and the shared models
    assert one.returncode == 1 and one.stdout == bad.stdout


def test_a_moved_tree_plans_nothing_and_loads_its_own_files(trained_models, ci_quantized, tmp_path):
    from heterospec.hls.stage import kernel_manifest
    from heterospec.quantize import load_quantized_draft

    first, second = tmp_path / "first", tmp_path / "second"
    _, made = _tree(trained_models, ci_quantized, first / "results")
    shutil.copytree(first / "results", second / "results")    # copy2: modification times kept, as cp -a keeps them
    shutil.rmtree(first)
    paths = RunPaths(second / "results" / "ci", made.model_keys)
    targets = [str(paths.model_manifest(r).relative_to(second)) for r in ROLES]
    targets += [str(p.relative_to(second)) for p in (paths.quantized_draft, paths.hls_codegen("u280"))]
    plan = snakemake("-n", *targets, "--directory", str(second), "--config", "experiment=ci")
    assert plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr, plan.stderr[-2000:]

    # every stage's reader resolves the copy's own files (the first tree is gone)
    assert read_manifest(paths.model_manifest("draft"))["path"] == str(paths.model_checkpoint("draft").resolve())
    assert load_quantized_draft(paths.quantized_draft.parent) is not None
    man, src = kernel_manifest(paths.hls_codegen("u280"))
    assert resolve(man["export"], src) == paths.quantized_draft.parent.resolve()
    source = json.loads(paths.quantized_draft.read_text())["source"]
    assert resolve(source, paths.quantized_draft.parent) == paths.model_checkpoint("draft").resolve()

    # truncating the copy's checkpoint is seen by its loader and by Snakemake's plan, in one line each
    weights = paths.model_checkpoint("draft") / "model.safetensors"
    _truncate(weights)
    assert _one_line(lambda: read_manifest(paths.model_manifest("draft"))).startswith(f"{weights}: truncated")
    plan = snakemake("-n", *targets, "--directory", str(second), "--config", "experiment=ci")
    lines = [ln for ln in plan.stderr.splitlines() if ln.startswith("heterospec:") and "truncated" in ln]
    assert plan.returncode != 0 and len(lines) == 1 and "Traceback" not in plan.stderr, plan.stderr[-2000:]
    manifest = paths.model_manifest("draft").relative_to(second)
    assert lines[0].startswith(f"heterospec: {weights}: truncated")
    assert lines[0].endswith(f"; rebuild it: rm -r {manifest.parent} && snakemake --cores all --forcerun {manifest}")
    # what it says rebuilds the model and reruns what read it, and the plan no longer stops
    shutil.rmtree(second / manifest.parent)
    plan = snakemake("-n", *targets, "--directory", str(second), "--config", "experiment=ci", "--forcerun",
                     str(manifest))
    assert plan.returncode == 0 and "truncated" not in plan.stderr, plan.stderr[-2000:]
    jobs = [ln.split()[1].rstrip(":") for ln in plan.stdout.splitlines() if ln.startswith("rule ")]
    assert sorted(jobs) == ["hls_codegen", "quantize", "train_model", "train_model"], plan.stdout[-3000:]


def test_a_manifest_written_with_absolute_paths_still_loads_and_prefers_the_copy_beside_it(tmp_path):
    old = tmp_path / "old" / "checkpoint"
    old.mkdir(parents=True)
    (old / "config.json").write_text("{}")
    moved = tmp_path / "moved"
    shutil.copytree(old.parent, moved)
    for folder in (old.parent, moved):      # what the models stage wrote before: an absolute path, no listing
        (folder / "manifest.json").write_text(json.dumps({"source": "train", "role": "draft", "path": str(old)}))
    assert read_manifest(old.parent / "manifest.json")["path"] == str(old)
    assert read_manifest(moved / "manifest.json")["path"] == str(moved / "checkpoint")
    # a checkpoint given by path outside the tree is recorded as given; inside, relative to the recording file
    assert portable(old, moved, moved) == str(old)
    assert portable(moved / "checkpoint", moved, tmp_path) == "checkpoint"
    assert problems(moved, {"checkpoint/config.json": {"bytes": 2}}) == []
    assert problems(moved, {"gone.bin": {"bytes": 2}}) == [f"{moved / 'gone.bin'}: missing"]


def test_a_damaged_checkpoint_no_manifest_lists_is_still_one_line(trained_models, tmp_path):
    """A checkpoint given by path (or an export written before listings) is loaded without a sha256 to compare:
    safetensors' own error on a truncated file becomes one line naming it."""
    from heterospec.models.loading import load_causal_lm

    _, session = trained_models.run(["experiment=ci"])
    ckpt = shutil.copytree(session.model_checkpoint("draft"), tmp_path / "draft")
    _truncate(ckpt / "model.safetensors")
    line = _one_line(lambda: load_causal_lm(ckpt, role="draft"))
    assert line.startswith(f"draft model {ckpt}: its weights file is damaged (")

