"""The models stage: a tiny trio trained by the stage's own function (the session's ci trio), and real checkpoints
resolved from a local path or the Hugging Face cache, with one line when they are missing."""
from __future__ import annotations

import json
import sys

from conftest import run_cmd
from heterospec.config import compose_config
from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
from heterospec.models.role_manifest import read_manifest
from heterospec.models.stage import prepare_role
from heterospec.paths import ROLES


def _models_cmd(tmp_path, *overrides, role="draft"):
    return run_cmd([sys.executable, "-m", "heterospec.models", "train", "--role", role, *overrides],
                   cwd=tmp_path, env={"HF_HOME": str(tmp_path / "hf")})


def test_ci_trio_trains_and_loads_like_a_real_checkpoint(trained_models, tmp_path):
    _, paths = trained_models.run(["experiment=ci"])     # the session's trio, trained by prepare_role
    manifests = {r: read_manifest(paths.model_manifest(r)) for r in ROLES}
    assert all(m["source"] == "train" and m["train"]["steps"] > 0 for m in manifests.values())
    target = manifests["target"]["path"]
    # keyed by its settings under results/_models/, where every run with those settings finds it
    assert target == str((trained_models.results / "_models/target" / paths.model_keys["target"] / "checkpoint").resolve())
    assert (paths.model_checkpoint("target") / "config.json").exists()
    model, tok = load_causal_lm(target), load_tokenizer(target)
    assert model.config.model_type == "qwen2" and tok.convert_tokens_to_ids("<extra_0>") != tok.unk_token_id
    assert load_prm(manifests["prm"]["path"]) is not None

    # the same trained checkpoint, named as a real model's local path, resolves without training
    hub_cfg = compose_config(["models=config1", f"models.draft.path={manifests['draft']['path']}"])
    m = prepare_role(hub_cfg, paths, "draft", [], tmp_path / "hub_draft.json")
    assert m["source"] == "hub" and m["path"] == manifests["draft"]["path"]


def test_missing_hub_model_is_one_line(tmp_path):
    r = _models_cmd(tmp_path, "models=config1", role="target")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Qwen/Qwen2.5-7B-Instruct" in lines[0] and "models.target.path=" in lines[0]
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("manifest.json"))


def test_missing_local_path_is_one_line(tmp_path):
    r = _models_cmd(tmp_path, "models=config1", f"models.draft.path={tmp_path}/no/such/model")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such directory" in r.stderr


def test_manifest_pointing_nowhere_is_one_line(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"path": str(tmp_path / "gone")}))
    try:
        read_manifest(tmp_path / "manifest.json")
    except Exception as e:
        assert "does not exist" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("expected an error")


def test_the_prm_is_retrained_when_what_it_learns_from_changes():
    """The PRM's model key holds the draft's settings when it learns from the draft's steps, the target's when it
    starts from the target's weights, and neither otherwise."""
    from heterospec.config import dataset_config
    from heterospec.paths import model_key

    def key(*overrides):
        cfg = compose_config(list(overrides))
        return model_key(cfg, "prm", dataset_config(cfg, "synthetic", list(overrides)))

    assert key() != key("models.draft.train.steps=5") and key() == key("models.target.train.steps=5")
    alone = ("models.prm.train.prm_draft_samples=0", "models.prm.train.prm_init_from=scratch")
    assert key(*alone) == key(*alone, "models.draft.train.steps=5")
    from_draft = ("models.prm.train.prm_draft_samples=0", "models.prm.train.prm_init_from=draft")
    assert key(*from_draft) != key(*from_draft, "models.draft.train.steps=5")
    init = "models.prm.train.prm_init_from=target"
    assert key(init) != key(init, "models.target.train.steps=5")


def test_a_setting_only_the_other_kind_of_role_reads_keeps_a_model():
    """An LM's key leaves out the PRM-only training settings (and a PRM's the LM-only ones), so adding or changing
    one retrains nothing it does not shape; a setting the role reads still changes its key."""
    from heterospec.config import dataset_config
    from heterospec.paths import model_key

    def key(role, *overrides):
        cfg = compose_config(list(overrides))
        return model_key(cfg, role, dataset_config(cfg, "synthetic", list(overrides)))

    for lm in ("draft", "target"):
        assert key(lm) == key(lm, f"models.{lm}.train.prm_extra_layers=1", f"models.{lm}.train.prm_neg_frac=0.3",
                              f"models.{lm}.train.stop_at_auroc=0.9")
        assert key(lm) != key(lm, f"models.{lm}.train.validate_again_below=0.05")
    assert key("prm") == key("prm", "models.prm.train.validate_again_below=0.05")
    assert key("prm") != key("prm", "models.prm.train.prm_extra_layers=1")
    # the PRM's key holds the draft's settings it learns from, trimmed the same way
    assert key("prm") == key("prm", "models.draft.train.prm_neg_frac=0.3")
    assert key("prm") != key("prm", "models.draft.train.validate_again_below=0.05")


def test_the_default_and_ci_model_keys_stay_put():
    """The trained trios live under results/_models/<role>/<model key>: a key that moves retrains that role for
    everyone (the default trio takes the best part of an hour) and orphans the models already trained. A change
    here must therefore be deliberate: a change in what a model is trained from, not a refactor of the config (a
    renamed, moved or newly declared key, a range added to the schema) or of the training code."""
    from heterospec.paths import RunPaths

    def keys(*overrides):
        return dict(RunPaths.for_run(compose_config(list(overrides)), list(overrides)).model_keys)

    assert keys() == {"draft": "147ec8ed6e17", "prm": "c1d6b58ed16e", "target": "c109d3e02a4b"}
    assert keys("experiment=ci") == {"draft": "01f5f8ba80c5", "prm": "2d4efc9f3d01", "target": "0e772fe4dfb5"}
