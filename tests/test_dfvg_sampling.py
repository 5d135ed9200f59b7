"""The rules themselves, on toy tables (no models): speculative sampling over a tree returns tokens distributed
exactly as the target's sampling, greedy acceptance takes the longest agreeing path, trees are built
breadth-first with ancestor-closed pruning, and the replay's overlap hides the draft when its guesses hit."""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from heterospec.speculative.tree import DraftTree
from heterospec.speculative.verify import greedy_walk, sample_walk
from heterospec.replay.simulator.engines import FastEngine
from heterospec.replay.schedules.dfvg import Costs, Round, dfvg

V = 5


def _toy():
    """A depth-2 tree over a 5-token vocabulary and a target distribution at the root and at every node."""
    tree = DraftTree()
    a, b, _ = tree.add(0, -1, 0.0), tree.add(3, -1, 0.0), tree.add(1, -1, 0.0)   # three guesses for token 1
    tree.add(2, a, 0.0)
    tree.add(4, a, 0.0)
    tree.add(0, b, 0.0)
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(1 + len(tree), V, generator=g) * 1.5, -1)
    return tree, probs


def test_tree_sampling_preserves_the_target_distribution():
    """Joint law of the first two output tokens, given a drafted first token, vs p(x1) p(x2 | x1) (chi-square)."""
    tree, probs = _toy()
    row_of = {tree.tokens[i]: i + 1 for i in range(len(tree)) if tree.parents[i] < 0}   # first token -> its row
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(V, V)
    for _ in range(30000):
        path, nxt = sample_walk(tree, probs, gen)
        out = [tree.tokens[i] for i in path] + [nxt]
        if len(out) >= 2:                       # a drafted first token was accepted: it has a second
            counts[out[0], out[1]] += 1
    drafted = sorted(row_of)
    expected = torch.stack([probs[0, x] * probs[row_of[x]] for x in drafted])   # [drafted, V]
    obs = counts[drafted].flatten()
    exp = expected.flatten() / expected.sum() * obs.sum()
    assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3


def test_first_token_marginal_over_the_whole_vocabulary():
    tree, probs = _toy()
    gen = torch.Generator().manual_seed(2)
    counts = torch.zeros(V)
    n = 30000
    for _ in range(n):
        path, nxt = sample_walk(tree, probs, gen)
        counts[tree.tokens[path[0]] if path else nxt] += 1
    assert chisquare(counts.numpy(), (probs[0] * n).numpy()).pvalue > 1e-3


def test_greedy_walk_takes_the_longest_agreeing_path():
    tree, _ = _toy()
    # target argmax: root -> 3 (node 1), node 1 -> 0 (node 5), node 5 -> 4 (bonus)
    pred = [3, 9, 0, 9, 9, 9, 4]
    assert greedy_walk(tree, pred) == ([1, 5], 4)
    assert greedy_walk(tree, [2] + [0] * 6) == ([], 2)


def test_ancestor_mask_and_main_path():
    tree, _ = _toy()
    m = tree.ancestor_mask()
    assert m[3].tolist() == [True, False, False, True, False, False]
    assert m[5].tolist() == [False, True, False, False, False, True]
    assert tree.main_path() == [0, 3]
    chain = DraftTree()
    for i in range(4):
        chain.add(i, i - 1, 0.0)
    assert chain.is_chain() and torch.equal(chain.ancestor_mask(), torch.ones(4, 4, dtype=torch.bool).tril())


class _Flat:
    """A profile where every call costs a fixed time: draft pass 1 ms, target pass 3 ms."""
    devices = None

    def __init__(self):
        self.devices = {"target": self}

    def target_prefill(self, n): return 3.0
    def draft_prefill(self, kv, n): return 1.0 if n else 0.0
    def draft_decode(self, kv, n): return 1.0 * n
    def target_decode(self, kv, n): return 3.0 * n
    def forward(self, kv, n): return 3.0


@pytest.mark.parametrize("hit, expect", [(True, "hidden"), (False, "exposed")])
def test_overlap_hides_the_draft_when_its_guess_hits(hit, expect):
    rounds = [Round(nodes=8, width=1, accepted=5, draft_passes=2, catch_up=1, guess_hit=hit, kv_target=10 + 6 * i,
                    kv_draft=10 + 6 * i) for i in range(10)]
    link = lambda nbytes: 0.0
    lat, extra = {}, {}
    for design in ("fpga_gpu", "gpu_only"):
        eng = FastEngine()
        extra[design] = dfvg(10, rounds, Costs(_Flat()), link, eng, design)
        lat[design] = eng.tally.latency
    extra = extra["fpga_gpu"]
    # gpu_only: init 3 (target) + 1 (draft, same GPU) then 10 x (2 ms draft + 3 ms verify) = 54 ms
    assert lat["gpu_only"] == pytest.approx(54.0)
    if expect == "hidden":   # the first tree is exposed, the other nine are drafted during the previous verification
        assert lat["fpga_gpu"] == pytest.approx(3.0 + 2.0 + 10 * 3.0)
        assert extra["discarded_draft_ms"] == 0 and extra["guess_hits"] == 9
    else:                    # each speculative tree is discarded at the alignment and redrafted
        assert lat["fpga_gpu"] == pytest.approx(3.0 + 10 * (2.0 + 3.0))
        assert extra["discarded_draft_ms"] == pytest.approx(9 * 2.0)
