"""Swapping the PRM is one models-group entry: a second PRM that speaks the Qwen2.5-Math-PRM interface
(a token-classification model, `<extra_0>` after each step, reward = P(correct) there) is picked up by the
models stage, the collect role and the quality report with no code change."""
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForTokenClassification

from heterospec.config import compose_config
from heterospec.config.schema import DatasetConfig, GeneratorConfig, ModelsConfig
from heterospec.models.loading import load_prm, load_tokenizer
from heterospec.models.role_manifest import read_manifest
from heterospec.models.quality import prm_auroc
from heterospec.models.stage import prepare_role
from heterospec.models.train import train_role
from heterospec.paths import RunPaths
from heterospec.reasoning.workers import LocalRole, RoleSpec
from heterospec.tasks.synthetic import held_out_problems

QUESTION = "a=3,b=5,c=a+b,d=c-a. Find d."
STEPS = ["c=a+b=3+5=8\n\n", "d=c-a=8-3=5\n\n", "\\boxed{5}"]


def _second_prm(out):
    """A PRM of another shape than the tiny one, trained for a few steps (its scores only need to be its own)."""
    arch = {"hidden_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "intermediate_size": 96, "max_position_embeddings": 256}
    models = OmegaConf.merge(OmegaConf.structured(ModelsConfig), {
        "name": "other", "prm": {"arch": arch, "train": {"steps": 10, "batch_size": 8, "warmup": 2, "seed": 3}}})
    dataset = OmegaConf.structured(DatasetConfig(name="synthetic", kind="synthetic", generator=GeneratorConfig()))
    train_role(models, dataset, "prm", out, log=lambda s: None)
    return out


def _direct_rewards(path):
    """The interface computed by hand: one forward over the text, P(correct) at each separator."""
    model, tok = AutoModelForTokenClassification.from_pretrained(path).eval(), load_tokenizer(path)
    text = QUESTION + "\n\n" + "".join(s.strip() + "<extra_0>" for s in STEPS)
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[0], -1)[:, 1]
    return probs[ids[0] == tok.convert_tokens_to_ids("<extra_0>")].tolist()


def test_one_models_entry_swaps_the_prm(tmp_path):
    other = _second_prm(tmp_path / "other_prm")
    conf = tmp_path / "conf" / "models"
    conf.mkdir(parents=True)
    (conf / "tiny_other_prm.yaml").write_text(
        f"defaults:\n  - tiny\n  - _self_\nname: tiny_other_prm\nprm:\n  source: hub\n  path: {other}\n")
    cfg = compose_config([f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "models=tiny_other_prm"])

    # the models stage resolves it instead of training a PRM
    paths = RunPaths(tmp_path / "run")
    manifest = prepare_role(cfg, paths, "prm", [], paths.model_manifest("prm"))
    assert manifest["source"] == "hub" and read_manifest(paths.model_manifest("prm"))["path"] == str(other)

    # the collect role built from the config scores with the second PRM, step after step
    m = cfg.models
    role = LocalRole(RoleSpec(role="prm", path=manifest["path"], device="cpu", dtype=m.prm.dtype, prompt=m.prompt,
                              delimiter=m.step_separator, step_token=m.prm_step_token))
    want = _direct_rewards(other)
    got = [role.call("score", QUESTION, STEPS[:k])[0] for k in range(1, len(STEPS) + 1)]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5

    # and the quality report reads it through the same protocol
    prm = load_prm(manifest["path"], dtype=m.prm.dtype, prompt=m.prompt, step_token=m.prm_step_token)
    assert max(abs(a - b) for a, b in zip(prm.score_steps(QUESTION, STEPS), want)) < 1e-5
    q = prm_auroc(prm, held_out_problems(cfg.dataset.generator, 5))
    assert q["n_neg"] == 5 and 0 <= q["auroc"] <= 1
