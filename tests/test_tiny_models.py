"""The tiny trio end to end at toy size: tokenizer, training, saving, reloading, decoding, PRM scoring."""
import json

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from heterospec.config.schema import DatasetConfig, GeneratorConfig, ModelsConfig
from heterospec.errors import UserError
from heterospec.grading import grade
from heterospec.models.generate import greedy_generate, greedy_generate_batch
from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
from heterospec.models.quality import auroc, evaluate_quality
from heterospec.models.rollouts import StepSample, every_position, sample_steps
from heterospec.models.tokenizer import STEP, build_tokenizer
from heterospec.models.train import IGNORE, batches, train_role
from heterospec.tasks.synthetic import format_prompt, generate_problems, held_out_problems

TOY_ARCH = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "intermediate_size": 64, "max_position_embeddings": 256}
TOY_TRAIN = {"steps": 30, "batch_size": 8, "warmup": 5, "log_every": 10, "threads": 1}


def _cfgs():
    models = OmegaConf.merge(OmegaConf.structured(ModelsConfig), {
        "name": "toy", **{r: {"arch": TOY_ARCH, "train": TOY_TRAIN} for r in ("draft", "prm", "target")}})
    dataset = OmegaConf.structured(DatasetConfig(name="synthetic", kind="synthetic", limit=10,
                                                 generator=GeneratorConfig()))
    return models, dataset


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    base = tmp_path_factory.mktemp("trio")
    models, dataset = _cfgs()
    metrics = {r: train_role(models, dataset, r, base / r, log=lambda s: None) for r in ("draft", "prm", "target")}
    return base, metrics


def test_tokenizer_round_trips_and_has_single_step_token(tmp_path):
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    for t in (tok, AutoTokenizer.from_pretrained(tmp_path)):
        text = "a=3,b=5,c=a+b. Find c.\n\nc=a+b=3+5=8\n\n\\boxed{8}  (x*y/z)"
        ids = t(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text) and t.decode(ids) == text
        sep = t(STEP, add_special_tokens=False)["input_ids"]
        assert sep == [t.convert_tokens_to_ids(STEP)]
        assert t(text)["input_ids"][0] == t.bos_token_id == t.eos_token_id


def test_training_saves_loadable_checkpoints(trio):
    base, metrics = trio
    for role, m in metrics.items():
        assert m["steps"] == 30 and m["params"] > 0 and m["final_loss"] == m["final_loss"]  # not NaN
        assert (base / role / "config.json").exists() and (base / role / "tokenizer.json").exists()
        assert not any(p.name.startswith(".") for p in base.iterdir())   # no temp dirs left behind
    assert json.loads((base / "prm" / "config.json").read_text())["architectures"] == ["Qwen2ForTokenClassification"]
    # the same tokenizer comes back through AutoTokenizer next to a qwen2 config.json
    tok = load_tokenizer(base / "target")
    assert tok.decode(tok("c=a+b\n\n", add_special_tokens=False)["input_ids"]) == "c=a+b\n\n"


def test_training_is_deterministic(trio, tmp_path):
    base, metrics = trio
    models, dataset = _cfgs()
    again = train_role(models, dataset, "draft", tmp_path / "draft", log=lambda s: None)
    assert again["final_loss"] == metrics["draft"]["final_loss"]


def test_greedy_generation_single_and_batched_agree(trio):
    base, _ = trio
    model, tok = load_causal_lm(base / "draft"), load_tokenizer(base / "draft")
    prompts = [format_prompt(p.question) for p in generate_problems(GeneratorConfig(), 3, seed=0)]
    singles = [greedy_generate(model, tok, p, max_new_tokens=20) for p in prompts]
    assert all(isinstance(t, str) and 1 <= n <= 20 for t, n in singles)
    assert greedy_generate_batch(model, tok, prompts, max_new_tokens=20) == singles


def test_prm_scores_each_step(trio):
    base, _ = trio
    prm = load_prm(base / "prm")
    p = generate_problems(GeneratorConfig(), 1, seed=0)[0]
    rewards = prm.score_steps(p.question, p.steps)
    assert len(rewards) == len(p.steps) and all(0.0 <= r <= 1.0 for r in rewards)
    # causal: a step's reward does not depend on the steps after it
    assert prm.score_steps(p.question, p.steps[:2]) == pytest.approx(rewards[:2], abs=1e-5)


def test_quality_report_matches_a_recount(trio):
    """Accuracy recounted one problem at a time (single-prompt greedy, graded here); the PRM counts by hand."""
    base, _ = trio
    models, dataset = _cfgs()
    res = evaluate_quality(models, dataset, {r: base / r for r in ("draft", "prm", "target")}, n=10, log=lambda s: None)
    problems = held_out_problems(dataset.generator, 10)
    for role in ("draft", "target"):
        model, tok = load_causal_lm(base / role), load_tokenizer(base / role)
        outs = [greedy_generate(model, tok, format_prompt(p.question), 96) for p in problems]
        assert res[f"{role}_accuracy"] == sum(grade(t, p.answer) for (t, _), p in zip(outs, problems)) / 10
        assert res[f"{role}_mean_tokens"] == sum(n for _, n in outs) / 10
    assert res["gap"] == res["target_accuracy"] - res["draft_accuracy"] and res["n"] == 10
    # every step of every problem is a positive; one corrupted step per problem is the negative
    assert res["prm_n_pos"] == sum(len(p.steps) for p in problems) and res["prm_n_neg"] == 10
    assert 0 <= res["prm_auroc"] <= 1
    # on the draft's own steps: every step position of every problem, split by the checker
    assert res["prm_draft_n_correct"] + res["prm_draft_n_wrong"] == sum(len(p.steps) for p in problems)


def test_draft_samples_are_its_greedy_steps_labelled_by_the_checker(trio):
    base, _ = trio
    model, tok = load_causal_lm(base / "draft"), load_tokenizer(base / "draft")
    problems = held_out_problems(GeneratorConfig(), 4)
    samples = sample_steps(model, tok, every_position(problems))
    assert [(s.problem.id, s.k) for s in samples] == [(p.id, k) for p in problems for k in range(len(p.steps))]
    for s in samples:
        # the generator's own step is the only right one; the draft's step is what it writes after the prefix
        assert s.correct == (s.step == s.problem.steps[s.k])
        text, _ = greedy_generate(model, tok, format_prompt(s.problem.question)
                                  + "".join(x + "\n\n" for x in s.problem.steps[: s.k]), 24)
        assert s.step == text.split("\n\n")[0].strip()
    hot = sample_steps(model, tok, every_position(problems), temperature=1.0, seed=5)
    assert hot == sample_steps(model, tok, every_position(problems), temperature=1.0, seed=5)


def test_a_sample_is_labelled_by_the_checker_at_its_own_position():
    p = held_out_problems(GeneratorConfig(), 1)[0]
    right = StepSample.of(p, 1, p.steps[1] + "\n\n" + p.steps[2])
    assert right.step == p.steps[1] and right.correct and right.steps == p.steps[:2]
    assert not StepSample.of(p, 1, p.steps[2]).correct          # the right step at the wrong place
    assert not StepSample.of(p, 1, p.steps[1][:-1] + "x").correct
    assert StepSample.of(p, len(p.steps) - 1, p.steps[-1]).correct  # the boxed answer


def test_prm_batches_end_draft_steps_with_the_checkers_label(trio):
    """Every sequence drawn from the draft's samples is the correct prefix, then the sample, labelled at its separator."""
    models, dataset = _cfgs()
    train = OmegaConf.merge(models.prm.train, {"prm_draft_share": 1.0, "batch_size": 6})
    p = held_out_problems(dataset.generator, 1)[0]
    wrong = p.steps[1][:-1] + str((int(p.steps[1][-1]) + 1) % 10)
    samples = [StepSample(p, 1, wrong, False), StepSample(p, 2, p.steps[2], True)]
    tok = build_tokenizer()
    b = next(batches(tok, dataset.generator, "prm", train, samples))
    sep = tok.convert_tokens_to_ids(STEP)
    for ids, lab in zip(b["input_ids"], b["labels"]):
        seps = (ids == sep).nonzero()[:, 0].tolist()
        text = tok.decode(ids[: seps[-1] + 1].tolist())
        sample = samples[0] if text.endswith(wrong + STEP) else samples[1]
        assert text == tok.decode(tok(format_prompt(p.question))["input_ids"]) + "".join(s + STEP for s in sample.steps)
        assert [int(lab[i]) for i in seps] == [1] * sample.k + [int(sample.correct)]
        assert lab[seps[-1] - 1] == int(sample.correct) and lab[0] == IGNORE   # dense: the wrong digit is 0


def test_length_buckets_regroup_the_same_examples_with_less_padding():
    """length_buckets=4: the first four batches hold exactly the rows of four plain batches, with fewer pad tokens."""
    models, dataset = _cfgs()
    tok = build_tokenizer()

    def rows(n_buckets):
        train = OmegaConf.merge(models.prm.train, {"length_buckets": n_buckets, "batch_size": 8})
        it = batches(tok, dataset.generator, "prm", train)
        bs = [next(it) for _ in range(4)]
        out = sorted((tuple(ids[m.bool()].tolist()), tuple(lab[m.bool()].tolist()))
                     for b in bs for ids, lab, m in zip(b["input_ids"], b["labels"], b["attention_mask"]))
        return out, sum(b["input_ids"].numel() for b in bs)

    (plain, padded_plain), (grouped, padded_grouped) = rows(1), rows(4)
    assert grouped == plain
    assert padded_grouped < 0.95 * padded_plain


def test_an_lm_stops_at_its_validation_step_error(tmp_path):
    """stop_at_step_error: the draft stops at the first check whose step error is at or below it, else runs on."""
    models, dataset = _cfgs()
    stop = {"validate_every": 10, "validation_problems": 5}
    models.draft.train = OmegaConf.merge(models.draft.train, stop, {"stop_at_step_error": 1.0})
    lines = []
    m = train_role(models, dataset, "draft", tmp_path / "d1", log=lines.append)
    assert (m["steps"], m["stopped_at"]) == (10, 10) and 0 <= m["validation_step_error"] <= 1
    assert any("stopping at step 10 of 30" in line for line in lines)
    models.draft.train.stop_at_step_error = 1e-9   # a 30-step toy draft never gets every step right
    m = train_role(models, dataset, "draft", tmp_path / "d2", log=lambda s: None)
    assert (m["steps"], m["stopped_at"]) == (30, None)
    models.prm.train = OmegaConf.merge(models.prm.train, stop, {"stop_at_step_error": 0.1})
    with pytest.raises(UserError, match="only the draft and the target"):
        train_role(models, dataset, "prm", tmp_path / "p", log=lambda s: None)


def _checks(lines: list[str]) -> list[int]:
    """The steps at which a training log says a validation check ran."""
    return [int(line.split("step ")[1].split(":")[0]) for line in lines if "(stops at" in line]


def _scripted_stop(monkeypatch, values: list[float], every: int, every_near: int):
    """Make the draft's validation read ``values``, one per check, against a bar of 0.15 (lower is better)."""
    import heterospec.models.train as train_mod

    it = iter(values)
    monkeypatch.setattr(train_mod, "_validator", lambda *a: train_mod.Validation(
        "scripted error", "validation_step_error", 0.15, lambda model: next(it), lambda v: v <= 0.15, every,
        every_near, again_below=0.10))


def _weights(path):
    return load_causal_lm(path).state_dict()


@pytest.mark.parametrize("values, kept", [([0.5, 0.05, 0.4, 0.15], 16),    # the replay's third check reaches the bar
                                          ([0.5, 0.05, 0.16, 0.10], 13)])  # ...its second; the one before is nearer
def test_a_stop_between_two_checks_is_found_again_densely(tmp_path, monkeypatch, values, kept):
    """validate_every_near: a check that reaches the bar sends training back to the previous check; the same batches
    are trained again with denser checks (the same weights come back: a run stopped at that step without any replay
    is the oracle), and the weights of whichever of the last two checks is nearer the bar are kept."""
    models, dataset = _cfgs()
    _scripted_stop(monkeypatch, [0.1], every=kept, every_near=0)   # a straight run to `kept`: its first check stops
    straight = train_role(models, dataset, "draft", tmp_path / "straight", log=lambda s: None)
    assert straight["stopped_at"] == kept
    _scripted_stop(monkeypatch, values, every=10, every_near=3)
    lines = []
    m = train_role(models, dataset, "draft", tmp_path / "replayed", log=lines.append)
    assert _checks(lines) == [10, 20, 13, 16] and any("back to step 10" in line for line in lines)
    assert (m["stopped_at"], m["steps_trained_twice"]) == (kept, 10)
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "replayed")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_stop_inside_the_window_is_kept(tmp_path, monkeypatch):
    """A check that reaches the bar without falling below validate_again_below ends training there: no replay."""
    models, dataset = _cfgs()
    _scripted_stop(monkeypatch, [0.5, 0.12], every=10, every_near=3)
    lines = []
    m = train_role(models, dataset, "draft", tmp_path / "d", log=lines.append)
    assert _checks(lines) == [10, 20] and (m["stopped_at"], m["steps_trained_twice"]) == (20, 0)


def test_the_prm_stops_at_its_validation_auroc(trio, tmp_path, monkeypatch):
    """stop_at_auroc: the PRM is judged on the draft's validation steps every validate_every steps and stops at
    the first check at or above the bar; an undefined AUROC (the toy draft gets every step wrong) never stops it."""
    import heterospec.models.quality as quality

    base, _ = trio
    models, dataset = _cfgs()
    models.prm.train = OmegaConf.merge(models.prm.train, {"validate_every": 10, "validation_problems": 5,
                                                          "stop_at_auroc": 0.9})
    lines = []
    m = train_role(models, dataset, "prm", tmp_path / "p1", log=lines.append, draft_dir=base / "draft")
    assert _checks(lines) == [10, 20, 30] and (m["steps"], m["stopped_at"]) == (30, None)
    seen = []

    def judged(prm, samples, threshold):
        seen.append(len(samples))
        return {"auroc": [0.5, 0.95][len(seen) > 1]}
    monkeypatch.setattr(quality, "prm_on_samples", judged)
    lines = []
    m = train_role(models, dataset, "prm", tmp_path / "p2", log=lines.append, draft_dir=base / "draft")
    assert (m["steps"], m["stopped_at"], m["validation_auroc"]) == (20, 20, 0.95) and seen[0] > 0
    assert any("stopping at step 20 of 30" in line for line in lines)
    models.draft.train.stop_at_auroc = 0.9
    with pytest.raises(UserError, match="only the PRM stops at an AUROC"):
        train_role(models, dataset, "draft", tmp_path / "d", log=lambda s: None)


def test_prm_trains_on_the_drafts_steps_only_after_the_draft(trio, tmp_path):
    base, _ = trio
    models, dataset = _cfgs()
    models.prm.train.prm_draft_samples = 20
    m = train_role(models, dataset, "prm", tmp_path / "prm", log=lambda s: None, draft_dir=base / "draft")
    assert m["draft_steps"] == 20 and 0 <= m["draft_steps_wrong"] <= 20
    with pytest.raises(UserError, match="draft must be trained first"):
        train_role(models, dataset, "prm", tmp_path / "prm2", log=lambda s: None)


def test_prm_can_start_from_the_draft_with_fresh_layers_on_top(trio, tmp_path):
    """prm_init_from=draft, 2 extra layers: at lr 0 the PRM's hidden states are the draft's, layer for layer."""
    base, _ = trio
    models, dataset = _cfgs()
    models.prm.train.merge_with({"prm_init_from": "draft", "prm_extra_layers": 2, "steps": 1, "lr": 0.0, "warmup": 1})
    train_role(models, dataset, "prm", tmp_path / "prm", log=lambda s: None, draft_dir=base / "draft")
    prm, draft = load_prm(tmp_path / "prm").model, load_causal_lm(base / "draft")
    assert prm.config.num_hidden_layers == draft.config.num_hidden_layers + 2
    tok = load_tokenizer(base / "draft")
    ids = torch.tensor([tok(format_prompt("a=3,b=5,c=a+b. Find c."))["input_ids"] + tok("c=a+b=3+5=8")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(prm.model(input_ids=ids).last_hidden_state, draft.model(input_ids=ids).last_hidden_state,
                              atol=1e-6)
    models.prm.train.prm_init_from = "the target's sibling"
    with pytest.raises(UserError, match="expected one of"):
        train_role(models, dataset, "prm", tmp_path / "prm3", log=lambda s: None, draft_dir=base / "draft")


def test_prm_can_start_from_the_targets_weights(trio, tmp_path):
    base, _ = trio
    models, dataset = _cfgs()
    models.prm.train.merge_with({"prm_init_from": "target", "steps": 1, "lr": 0.0, "warmup": 1})
    train_role(models, dataset, "prm", tmp_path / "prm", log=lambda s: None, target_dir=base / "target")
    prm, target = load_prm(tmp_path / "prm").model, load_causal_lm(base / "target")
    assert prm.config.hidden_size == target.config.hidden_size   # the target's shape, whatever models.prm.arch says
    emb, emb0 = prm.model.embed_tokens.weight, target.model.embed_tokens.weight
    sep, newline = prm.config.step_token_id, load_tokenizer(base / "target")("\n", add_special_tokens=False)["input_ids"][0]
    assert torch.equal(emb[sep], emb0[newline])                      # the separator starts as the target's "\n"
    emb0 = emb0.clone()
    emb0[sep] = emb0[newline]
    assert torch.equal(emb, emb0)
    for (name, w), (_, w0) in zip(prm.model.named_parameters(), target.model.named_parameters()):
        if "embed_tokens" not in name:
            assert torch.equal(w, w0), name                          # lr 0: the backbone is the target's
    with pytest.raises(UserError, match="target must be trained first"):
        train_role(models, dataset, "prm", tmp_path / "prm2", log=lambda s: None)


def test_auroc():
    assert auroc([0.9, 0.8, 0.1], [1, 1, 0]) == 1.0
    assert auroc([0.1, 0.9], [1, 0]) == 0.0
    assert auroc([0.5, 0.5], [1, 0]) == 0.5


def test_missing_checkpoint_is_a_user_error(tmp_path):
    for load in (load_causal_lm, load_prm, load_tokenizer):
        with pytest.raises(UserError, match="not found"):
            load(tmp_path / "nope")

