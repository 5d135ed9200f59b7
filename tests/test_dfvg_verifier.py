"""The DFVG Verifier on a tiny real target, against references that use no tree, no mask and no cache: one full
forward of the context plus each node's root path. At temperature > 0 the tokens it emits are checked by
chi-square against the target's own sampling distribution; at temperature 0 it must give the target's greedy
continuation; after each round its compacted cache must give the same logits as a fresh prefill."""
from __future__ import annotations

import copy

import pytest
import torch
from scipy.stats import chisquare
from transformers import Qwen2Config, Qwen2ForCausalLM

import heterospec.speculative.verify as verify_mod
from heterospec.speculative.tree import DraftTree
from heterospec.speculative.verify import Verifier
from heterospec.errors import UserError

V = 6                      # a tiny vocabulary keeps the chi-square cells well filled
PROMPT = [1, 4, 2, 5, 3]


def tiny_target(attn: str = "sdpa"):
    torch.manual_seed(3)
    cfg = Qwen2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64)
    cfg._attn_implementation = attn
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():                        # sharpen the random logits so that the distributions differ
        model.lm_head.weight.mul_(8.0)
    return model


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def target(request):
    return tiny_target(request.param)


def full_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


def toy_tree() -> DraftTree:
    """Root guesses 0, 3, 1; node 0 has children 2, 4; node 1 has child 0 (node indices 0..5)."""
    t = DraftTree()
    a, b, _ = t.add(0, -1, 0.0), t.add(3, -1, 0.0), t.add(1, -1, 0.0)
    t.add(2, a, 0.0)
    t.add(4, a, 0.0)
    t.add(0, b, 0.0)
    return t


def node_context(tree: DraftTree, ctx: list[int], node: int) -> list[int]:
    return ctx + [tree.tokens[i] for i in tree.path_to(node)]


def test_tree_pass_gives_each_node_the_distribution_of_its_own_path(target, monkeypatch):
    """The probabilities the sampling walk receives, row by row, equal a plain forward of that node's path."""
    seen = []
    real = verify_mod.sample_walk
    monkeypatch.setattr(verify_mod, "sample_walk", lambda tree, probs, gen: seen.append(probs) or real(tree, probs, gen))
    tree, tau = toy_tree(), 0.7
    v = Verifier(target, temperature=tau, seed=0)
    v.start(PROMPT)
    path, nxt = v.verify(PROMPT, tree)
    probs = seen[0]
    assert probs.shape == (1 + len(tree), V)
    want = [full_logits(target, PROMPT)] + [full_logits(target, node_context(tree, PROMPT, i)) for i in range(len(tree))]
    assert torch.allclose(probs, torch.softmax(torch.stack(want) / tau, -1), atol=1e-5)
    # and the cache now holds exactly the context and the accepted nodes: the next round sees what a prefill would
    ctx = PROMPT + [tree.tokens[i] for i in path] + [nxt]
    assert v.cached == len(ctx) - 1
    v.verify(ctx, toy_tree())
    assert torch.allclose(seen[1][0], torch.softmax(full_logits(target, ctx) / tau, -1), atol=1e-5)


def _greedy(model, ctx: list[int], n: int) -> list[int]:
    out = list(ctx)
    for _ in range(n):
        out.append(int(full_logits(model, out).argmax()))
    return out[len(ctx):]


def test_greedy_verification_follows_the_target_through_a_branching_tree(target):
    """Hide the target's greedy tokens behind wrong siblings, off the first branch: the walk must find them,
    and the rejected nodes must leave the cache (an index-select, not a crop: the path is not a node prefix)."""
    follow_branching_trees(target, Verifier(target, temperature=0.0))


def follow_branching_trees(target, v: Verifier) -> None:
    """Three rounds of :func:`test_greedy_verification_follows_the_target_through_a_branching_tree` on ``v``."""
    ctx = list(PROMPT)
    v.start(ctx)
    for _ in range(3):
        g = _greedy(target, ctx, 3)
        t = DraftTree()
        t.add((g[0] + 1) % V, -1, 0.0)                   # wrong first guess
        n1 = t.add(g[0], -1, 0.0)
        t.add((g[1] + 1) % V, n1, 0.0)
        n3 = t.add(g[1], n1, 0.0)
        t.add((g[2] + 2) % V, n3, 0.0)                    # wrong at depth 3: the bonus token is the target's g[2]
        path, nxt = v.verify(ctx, t)
        assert (path, nxt) == ([n1, n3], g[2])
        ctx += g
        assert v.cached == len(ctx) - 1 and v.cache.get_seq_length() == len(ctx) - 1
        assert torch.allclose(cached_logits(target, v, ctx), full_logits(target, ctx), atol=1e-5)


class _Forward:
    """The tiny target behind a forward that takes the KV cache under one keyword only, as the transformers
    versions before (``past_key_values``) and after (``cache``) its renaming do: another keyword is a TypeError."""

    def __init__(self, model):
        self.model, self.config, self.dtype = model, model.config, model.dtype

    def parameters(self):
        return self.model.parameters()

    def __call__(self, **kwargs):
        return self.forward(**kwargs)


class _OldForward(_Forward):
    def forward(self, input_ids, position_ids=None, attention_mask=None, past_key_values=None, use_cache=None,
                logits_to_keep=0):
        return self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                          cache=past_key_values, use_cache=use_cache, logits_to_keep=logits_to_keep)


class _NewForward(_Forward):
    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None, use_cache=None, logits_to_keep=0):
        return self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                          cache=cache, use_cache=use_cache, logits_to_keep=logits_to_keep)


@pytest.mark.parametrize("forward", [_OldForward, _NewForward])
def test_either_name_of_the_cache_argument(target, forward):
    follow_branching_trees(target, Verifier(forward(target)))


def test_a_target_configured_without_a_cache_verifies_the_same():
    """A checkpoint whose config says ``use_cache: false``: the verifier's own cache is filled all the same."""
    target = tiny_target()
    target.config.use_cache = False
    follow_branching_trees(target, Verifier(target))


def test_the_prefill_computes_one_row_of_logits(target):
    """The prefill's logits are never read: a long prompt must not pay for a [prompt, vocabulary] table of them."""
    rows = []
    hook = target.lm_head.register_forward_hook(lambda module, args, out: rows.append(out.shape[:-1]))
    try:
        Verifier(target).start(PROMPT * 4)
    finally:
        hook.remove()
    assert rows == [(1, 1)]


def cached_logits(model, v: Verifier, ctx: list[int]) -> torch.Tensor:
    """Logits at ``ctx``'s last token fed after (a copy of) the verifier's cache."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ctx[-1:]]), past_key_values=copy.deepcopy(v.cache),
                     use_cache=True).logits[0, -1].float()


@pytest.mark.parametrize("wrong_at, accepted", [(2, [0, 1]), (3, [0, 1, 2]), (None, [0, 1, 2, 3])])
def test_chain_is_cropped_to_the_accepted_prefix(target, wrong_at, accepted):
    ctx = list(PROMPT)
    g = _greedy(target, ctx, 5)
    t = DraftTree()
    for i in range(4):
        t.add((g[i] + 1) % V if i == wrong_at else g[i], i - 1, 0.0)
    v = Verifier(target)
    v.start(ctx)
    assert v.verify(ctx, t) == (accepted, g[len(accepted)])
    ctx += g[:len(accepted) + 1]
    assert v.cache.get_seq_length() == v.cached == len(ctx) - 1
    assert torch.allclose(cached_logits(target, v, ctx), full_logits(target, ctx), atol=1e-5)


def test_an_empty_tree_and_short_prompts(target):
    v = Verifier(target)
    assert v.cached == 0 and v.max_positions == 64
    first = int(full_logits(target, [2]).argmax())
    assert v.verify([2], DraftTree()) == ([], first)                   # fresh: ready for a one-token context
    assert v.verify([2, first], DraftTree()) == ([], int(full_logits(target, [2, first]).argmax()))
    assert v.cache.get_seq_length() == v.cached == 2
    v.start([2])
    assert v.cached == 0
    assert v.verify([2], DraftTree()) == ([], int(full_logits(target, [2]).argmax()))
    assert v.cached == 1
    v.start([2, 4])                                        # a two-token prompt: one token prefilled
    assert v.cached == 1 and v.cache.get_seq_length() == 1
    assert v.verify([2, 4], DraftTree()) == ([], int(full_logits(target, [2, 4]).argmax()))


def test_brute_force_sampling_emits_tokens_distributed_as_the_target_samples():
    """1500 rounds at temperature 2 from one prefilled cache: the first emitted token against p(x1), and the
    first two (after a drafted first token) against p(x1) p(x2 | x1), by chi-square."""
    target = tiny_target()
    tree, tau, n = toy_tree(), 2.0, 1500
    p1 = torch.softmax(full_logits(target, PROMPT) / tau, -1).double()
    p2 = torch.stack([torch.softmax(full_logits(target, PROMPT + [x]) / tau, -1) for x in range(V)]).double()
    first, joint = torch.zeros(V, dtype=torch.float64), torch.zeros(V, V, dtype=torch.float64)
    v = Verifier(target, temperature=tau, seed=11)
    v.start(PROMPT)
    prefilled = copy.deepcopy(v.cache)
    for _ in range(n):
        v.cache, v.cached = copy.deepcopy(prefilled), len(PROMPT) - 1
        path, nxt = v.verify(PROMPT, tree)
        out = [tree.tokens[i] for i in path] + [nxt]
        first[out[0]] += 1
        if len(out) >= 2:
            joint[out[0], out[1]] += 1
    assert chisquare(*_filled(first, p1)).pvalue > 1e-3
    drafted = [0, 3, 1]                                  # only a drafted first token can be followed in one round
    assert chisquare(*_filled(joint[drafted].flatten(), (p1[drafted, None] * p2[drafted]).flatten())).pvalue > 1e-3


def _filled(obs: torch.Tensor, p: torch.Tensor):
    """Observed and expected counts with cells expected below 5 pooled into one (chi-square needs filled cells)."""
    exp = p / p.sum() * obs.sum()
    small = exp < 5
    o = torch.cat([obs[~small], obs[small].sum()[None]]) if small.any() else obs
    e = torch.cat([exp[~small], exp[small].sum()[None]]) if small.any() else exp
    return o.numpy(), e.numpy()


def test_sampling_is_seeded():
    target = tiny_target()
    runs = []
    for seed in (5, 5, 6, 0, None):
        v = Verifier(target, temperature=1.0, seed=seed) if seed is not None else Verifier(target, 1.0)
        out = []
        for _ in range(12):
            v.start(PROMPT)
            out.append(v.verify(PROMPT, toy_tree()))
        runs.append(out)
    assert runs[0] == runs[1] and runs[0] != runs[2] and runs[3] == runs[4]      # the default seed is 0


def test_an_unset_attention_is_taken_as_sdpa():
    model = tiny_target()
    model.config._attn_implementation = None
    assert Verifier(model).additive_mask is False
    assert Verifier(tiny_target("eager")).additive_mask is True


def test_other_attention_is_one_line():
    model = tiny_target()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(UserError, match="tree verification needs the sdpa or eager attention; the target uses "
                                        "'flash_attention_2'"):
        Verifier(model)
