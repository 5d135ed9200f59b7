"""A reasoning step written by token-level speculative decoding, against the same step written by plain greedy
decoding (the oracle: one model, one token per forward, no draft): token for token equal, and stopping where plain
decoding stops (the delimiter, EOS, the token limit), whatever the strategy, when rounds accept many tokens at once
(the draft is the target itself) and when they accept few (another model drafts)."""
from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from heterospec.reasoning.roles import StepWriter
from heterospec.speculative.decoder import Pair, SpeculativeDecoder
from heterospec.speculative.stepwise import SpeculativeDecoding

KNOBS = OmegaConf.create(dict(chain_length=6, hf_start=3,
                              feedback=dict(min_draft=2, max_draft=12, max_verify=4, threshold=0.6, backoff=0.5,
                                            growth=1.2),
                              tree=dict(max_width=3, max_depth=5, max_nodes=10, top_k=2, min_confidence=0.0)))
STRATEGIES = ("chain", "hf_heuristic", "feedback", "tree")


@pytest.fixture(scope="module")
def other_draft(tiny):
    model, tok = tiny
    torch.manual_seed(1)
    return Qwen2ForCausalLM(Qwen2Config(**model.config.to_dict())).eval()


def writers(target, draft, tok, strategy, delimiter):
    plain = StepWriter.plain(target, tok, delimiter)
    spec = StepWriter(SpeculativeDecoding(SpeculativeDecoder(Pair(draft, target, tok)), strategy, KNOBS), tok,
                      delimiter)
    return plain, spec


def walk(writer, tok, prompt, steps, max_tokens):
    """A path of ``steps`` steps, each written after the ones before (the writer keeps its caches across them)."""
    writer.reset(0)
    ctx, out = list(prompt), []
    for _ in range(steps):
        s = writer.write(ctx, len(ctx), max_tokens)
        out.append((s.tokens, s.complete, s.eos))
        ctx += s.tokens
        if s.eos:
            break
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("same", [True, False], ids=["draft_is_target", "other_draft"])
def test_speculative_steps_equal_plain_greedy_steps(tiny, other_draft, strategy, same):
    target, tok = tiny
    draft = target if same else other_draft
    prompt = tok("a=3,b=7. Find b?")["input_ids"]
    free = walk(StepWriter.plain(target, tok, "<never>"), tok, prompt, 1, 40)[0][0]
    # delimiters the target writes early and late, so steps end inside a round's accepted tokens
    for delimiter in {tok.decode(free[i:i + 1]) for i in (2, 5, 11)}:
        plain, spec = writers(target, draft, tok, strategy, delimiter)
        for max_tokens in (1, 7, 40):
            want = walk(plain, tok, prompt, 4, max_tokens)
            assert walk(spec, tok, prompt, 4, max_tokens) == want, (delimiter, max_tokens)


def test_speculative_steps_resume_after_a_backtrack_and_record_their_rounds(tiny, other_draft):
    """Contexts that share only a prefix with the last write (a rejected step dropped, a backtrack to an earlier
    step): the caches keep the shared prefix and the steps still equal plain decoding's."""
    target, tok = tiny
    prompt = tok("q?")["input_ids"]
    free = walk(StepWriter.plain(target, tok, "<never>"), tok, prompt, 1, 30)[0][0]
    plain, spec = writers(target, target, tok, "chain", tok.decode(free[6:7]))
    for w in (plain, spec):
        w.reset(0)
    a = prompt + free[:4]
    b = prompt + free[:2] + [(free[2] + 1) % len(tok)]     # shares two tokens of the step with a, then differs
    for ctx in (a, b, prompt, a):
        want, got = plain.write(ctx, len(ctx), 12), spec.write(ctx, len(ctx), 12)
        assert (got.tokens, got.complete, got.eos) == (want.tokens, want.complete, want.eos), ctx
        rounds = got.calls[-1].rounds
        assert rounds and sum(r.kept for r in rounds) == len(got.tokens)
        assert all(r.kept <= r.accepted + 1 and r.strategy == "chain" for r in rounds)
