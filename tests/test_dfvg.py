"""DFVG on real (ci-sized) pairs trained in-process: the lean draft decoder and the one-pass tree verification
match Hugging Face's own forward, greedy speculative decoding reproduces the target's greedy tokens for every
strategy on two different pairs, KV compaction leaves each cache exactly as a fresh prefill would, trees respect
the lanes, the stage writes queryable traces and a replay, and bad input stops with one line.

Method (as in vLLM's spec-decode tests): the reference is plain greedy decoding with the target through Hugging
Face's forward; lossless means token-for-token equality on every prompt, not a close match."""
from __future__ import annotations


import pytest
import torch
from scipy.stats import chisquare

from conftest import heterospec
from heterospec.config import compose_config
from heterospec.speculative.drafter import Plan
from heterospec.dfvg.baselines import target_greedy
from heterospec.speculative.decoder import SpeculativeDecoder, check_tokenizers, load_pair
from heterospec.speculative.lean_decoder import LeanDecoder
from heterospec.dfvg.methods import prompts, strategy
from heterospec.dfvg.stage import collect, replay_run
from heterospec.speculative.strategies import STRATEGIES, Feedback, HfHeuristic, Tree
from heterospec.dfvg.schemas import DFVG_GENERATIONS_SCHEMA, DFVG_REPLAY_SCHEMA, DFVG_ROUNDS_SCHEMA
from heterospec.speculative.tree import DraftTree
from heterospec.speculative.verify import Verifier
from heterospec.errors import UserError
from heterospec.models.role_manifest import read_manifest
from heterospec.paths import RunPaths
from heterospec.store import read_parquet
from heterospec.store.catalog import build, query
from test_workflow import plan, plan_call

CI = ["experiment=dfvg", "dfvg.prompts=6", "dfvg.max_new_tokens=64",
      "models.draft.arch={hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, intermediate_size: 64}",
      "models.draft.train={steps: 300, batch_size: 16, log_every: 100}",
      "models.target.arch={hidden_size: 48, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, intermediate_size: 96}",
      "models.target.train={steps: 300, batch_size: 16, log_every: 100}"]
# a second pair: other sizes (two target layers, no GQA in the draft), other seeds, shorter training
OTHER = CI[:3] + [
    "models.draft.arch={hidden_size: 24, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 2, intermediate_size: 48}",
    "models.draft.train={steps: 150, batch_size: 16, log_every: 100, seed: 7}",
    "models.target.arch={hidden_size: 48, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, intermediate_size: 96}",
    "models.target.train={steps: 250, batch_size: 16, log_every: 100, seed: 3}"]

DRY_RUNS = [plan_call("ci")]                  # (conftest starts it in the background)


def _pair(trained_models, overrides):
    cfg, paths = trained_models.run(overrides, roles=("draft", "target"))
    ck = {r: read_manifest(paths.model_manifest(r))["path"] for r in ("draft", "target")}
    return cfg, paths, load_pair(ck["draft"], ck["target"])


@pytest.fixture(scope="module")
def ci(trained_models):
    """The ci experiment's draft and target (the same settings, so the session's models)."""
    return _pair(trained_models, CI)


@pytest.fixture(scope="module")
def other(trained_models):
    return _pair(trained_models, OTHER)


@pytest.fixture(params=["ci", "other"])
def pair_run(request):
    return request.getfixturevalue(request.param)


def test_lean_decoder_matches_hugging_face(ci):
    _, _, pair = ci
    ids = torch.tensor(pair.tokenizer("a=3,b=5,c=a+b,d=c-a. Find d.\n\nc=a+b=3+5=8")["input_ids"])
    ref = pair.draft(input_ids=ids[None]).logits[0]
    dec = LeanDecoder(pair.draft)
    a = dec.forward(ids[:11], torch.arange(11), None)                 # a chunk, then the rest on top of its cache
    b = dec.forward(ids[11:], torch.arange(11, len(ids)), None)
    assert torch.allclose(torch.cat([a, b]), ref, atol=1e-4)


def test_one_tree_pass_equals_each_path_on_its_own(ci):
    """The 4D tree mask + per-node positions give every node the logits of its own root-to-node sequence."""
    _, _, pair = ci
    ctx = pair.tokenizer("a=2,b=4,c=b-a. Find c.\n\nc=")["input_ids"]
    tree = DraftTree()
    r0, r1 = tree.add(20, -1, 0.0), tree.add(30, -1, 0.0)            # two roots' children, then deeper branches
    a = tree.add(40, r0, 0.0)
    tree.add(50, r1, 0.0)
    tree.add(60, a, 0.0)
    tree.add(61, a, 0.0)
    v = Verifier(pair.target)
    v.start(ctx)
    ids = torch.tensor([[ctx[-1], *tree.tokens]])
    pos = torch.tensor([[len(ctx) - 1, *[len(ctx) - 1 + d for d in tree.depths]]])
    mask = torch.ones((1 + len(tree), len(ctx) + len(tree)), dtype=torch.bool)
    mask[:, len(ctx):] = False
    mask[1:, len(ctx):] = tree.ancestor_mask()
    with torch.no_grad():
        out = pair.target(input_ids=ids, position_ids=pos, attention_mask={"full_attention": mask[None, None]},
                          cache=v.cache, use_cache=True).logits[0]
        for node in range(len(tree)):
            seq = ctx + [tree.tokens[n] for n in tree.path_to(node)]
            ref = pair.target(input_ids=torch.tensor([seq])).logits[0, -1]
            assert torch.allclose(out[node + 1], ref, atol=1e-4), node


@pytest.mark.parametrize("method", STRATEGIES)
def test_greedy_is_lossless_for_every_strategy(pair_run, method):
    cfg, _, pair = pair_run
    dec = SpeculativeDecoder(pair)
    for pid, ids in prompts(cfg, pair.tokenizer):
        new, rounds = dec.generate(ids, strategy(cfg, method), cfg.dfvg.max_new_tokens)
        assert new == target_greedy(pair, ids, cfg.dfvg.max_new_tokens), (method, pid)
        assert sum(r.accepted + 1 for r in rounds) >= len(new)
        # both caches hold exactly the committed context after every round (target: all but the pending token)
        assert all(r.kv_target_after == r.kv_target + r.accepted + 1 for r in rounds)


def test_compacted_caches_equal_a_fresh_prefill(ci):
    """After a round that accepted a path other than the first nodes, both caches give the logits a fresh
    prefill of the committed context gives."""
    cfg, _, pair = ci
    dec = SpeculativeDecoder(pair)
    plan = Plan(depth=4, width=4, nodes=12, top_k=3)
    for _, ids in prompts(cfg, pair.tokenizer):
        ctx = list(ids)
        dec.drafter.reset()
        dec.verifier.start(ctx)
        for _ in range(6):
            tree = dec.drafter.build(ctx, plan)
            path, nxt = dec.verifier.verify(ctx, tree)
            dec.drafter.accept(len(ctx), tree, path)
            ctx += [tree.tokens[i] for i in path] + [nxt]
        with torch.no_grad():
            fresh = pair.target(input_ids=torch.tensor([ctx])).logits[0, -1]
            cached = pair.target(input_ids=torch.tensor([[ctx[-1]]]), cache=dec.verifier.cache,
                                 use_cache=True).logits[0, -1]
        assert torch.allclose(cached, fresh, atol=1e-4)
        kept = len(dec.drafter.ids)
        assert dec.drafter.ids == ctx[:kept] and dec.drafter.dec.length == kept
        lean = dec.drafter.dec.forward(torch.tensor(ctx[kept:]), torch.arange(kept, len(ctx)), None)[-1]
        assert torch.allclose(lean, pair.draft(input_ids=torch.tensor([ctx])).logits[0, -1], atol=1e-4)


def test_sampling_runs_end_to_end_and_is_seeded(ci):
    """Temperature 1 on real models: the same tokens for the same seed, other ones for another seed, and the first
    token distributed as the target's own sampling."""
    cfg, _, pair = ci
    items = prompts(cfg, pair.tokenizer)[:3]
    runs = {}
    for seed in (0, 0, 1):
        dec = SpeculativeDecoder(pair, temperature=1.0, seed=seed)
        runs.setdefault(seed, []).append([dec.generate(ids, strategy(cfg, "tree"), 48)[0] for _, ids in items])
    assert runs[0][0] == runs[0][1] and runs[0][0] != runs[1][0]
    # the first token of 400 generations is distributed as the target samples it at the prompt (chi-square,
    # cells expected below 5 pooled)
    _, ids = items[0]
    dec, n = SpeculativeDecoder(pair, temperature=1.0, seed=3), 400
    counts = torch.zeros(pair.target.config.vocab_size, dtype=torch.float64)
    for _ in range(n):
        counts[dec.generate(ids, strategy(cfg, "tree"), 1)[0][0]] += 1
    with torch.no_grad():
        p = torch.softmax(pair.target(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
    exp = p * n
    small = exp < 5
    obs_cells = torch.cat([counts[~small], counts[small].sum()[None]])
    exp_cells = torch.cat([exp[~small], exp[small].sum()[None]])
    assert chisquare(obs_cells.numpy(), exp_cells.numpy()).pvalue > 1e-3


def test_trees_stay_within_the_lanes_and_adapt(ci):
    cfg, _, pair = ci
    t = cfg.token_speculation.tree
    dec = SpeculativeDecoder(pair)
    rounds = []
    for _, ids in prompts(cfg, pair.tokenizer):
        rounds += dec.generate(ids, strategy(cfg, "tree"), cfg.dfvg.max_new_tokens)[1]
    assert all(r.width <= t.max_width <= 8 and r.nodes <= t.max_nodes and r.depth <= t.max_depth for r in rounds)
    assert len({r.nodes for r in rounds}) > 1 and len({r.depth for r in rounds}) > 1   # shape follows confidence
    assert max(r.width for r in rounds) > 1


def test_length_controllers():
    hf = HfHeuristic(20)
    hf.update(20, 20)
    assert hf.plan().depth == 22
    hf.update(22, 3)
    assert hf.plan().depth == 21
    fb = Feedback(8, 64, 16, 0.6, 0.5, 1.2)
    assert (fb.plan().depth, fb.plan().verify) == (8, 16)
    for _ in range(30):
        fb.update(16, 16)
    assert fb.plan().depth == 64
    fb.update(16, 9)                          # 0.5625 < 0.6: back off
    assert fb.plan().depth == 32
    for _ in range(10):
        fb.update(16, 0)
    assert fb.plan().depth == 8
    assert Tree(8, 8, 32, 4, 0.02).plan().budget == 32


def test_stage_writes_traces_views_and_replay(ci, monkeypatch):
    cfg, paths, _ = ci
    monkeypatch.chdir(paths.root.parents[1])
    rel = RunPaths(paths.root.relative_to(paths.root.parents[1]), paths.model_keys)
    for method in ("target_greedy", "hf_assisted", "chain", "tree"):
        collect(cfg, rel, method, CI)
    gens = read_parquet(rel.dfvg_generations("tree"), DFVG_GENERATIONS_SCHEMA).to_pylist()
    assert len(gens) == cfg.dfvg.prompts and all(g["identical"] for g in gens)
    assert all(g["identical"] for g in read_parquet(rel.dfvg_generations("hf_assisted"), DFVG_GENERATIONS_SCHEMA).to_pylist())
    rounds = read_parquet(rel.dfvg_rounds("tree"), DFVG_ROUNDS_SCHEMA)
    assert rounds.num_rows > 0 and min(rounds.column("nodes").to_pylist()) >= 1
    cfg2 = compose_config(CI + ["dfvg.strategies=[chain,tree]", "dfvg.replay.profiles=[roofline]"])
    replay_run(cfg2, rel)
    rep = read_parquet(rel.dfvg_replay, DFVG_REPLAY_SCHEMA).to_pylist()
    assert {r["design"] for r in rep} == {"fpga_gpu", "gpu_only", "plain"}
    build(rel.root.parent / "heterospec.duckdb", root=rel.root.parents[1])
    _, rows = query(rel.root.parent / "heterospec.duckdb",
                    "SELECT strategy, tau, acceptance_rate, draft_efficiency FROM dfvg_summary ORDER BY strategy")
    assert [r[0] for r in rows] == ["chain", "tree"] and all(r[1] > 1 for r in rows)
    _, rows = query(rel.root.parent / "heterospec.duckdb", "SELECT method, identical_pct FROM dfvg_speed")
    assert {m: pct for m, pct in rows if m != "target_greedy"} == {"hf_assisted": 100.0, "chain": 100.0, "tree": 100.0}
    _, rows = query(rel.root.parent / "heterospec.duckdb",
                    "SELECT strategy, design, speedup_vs_plain FROM dfvg_replay_summary WHERE design <> 'plain'")
    assert rows and all(s > 1 for _, _, s in rows)      # every tree commits more than one token per target pass


def test_bad_input_one_line(ci):
    cfg, _, pair = ci
    from heterospec.models.tokenizer import build_tokenizer
    other = build_tokenizer()
    other.add_tokens(["<extra_1>"])
    with pytest.raises(UserError, match="tokenizers differ") as e:
        check_tokenizers(other, pair.tokenizer)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="does not fit the target's context of 256") as e:
        SpeculativeDecoder(pair).generate(list(range(5, 50)) * 7, strategy(cfg, "tree"), 10)
    assert "\n" not in str(e.value)
    r = heterospec("dfvg", "collect", "--method", "tree", "experiment=dfvg", "token_speculation.tree.max_width=16")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "exceeds the 8 parallel draft lanes of 'u280'" in r.stderr


def test_ci_workflow_does_not_run_dfvg(dry_run):
    r = plan(dry_run, "ci")                          # (test_workflow dry-runs experiment=dfvg itself)
    assert r.returncode == 0, r.stderr
    assert "dfvg" not in r.stdout
