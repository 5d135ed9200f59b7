"""The software KV caches, against independent oracles: :class:`PrefixCache` logits against a fresh forward of
the whole context (a model with no cache), its processed/dropped counts worked by hand, and the draft's KVMU
pointer rows for a scripted accept, reject, step-ahead, backtrack and shadow sync worked out by hand from the
three pointers' meaning (valid: verified; current: held; step_ahead: drafted ahead)."""
from __future__ import annotations

import torch

from heterospec.models.prefix_cache import PrefixCache, common_prefix
from heterospec.reasoning.kvcache import ACCEPT, INIT, KVMU, ROLLBACK, SPECULATION
from heterospec.reasoning.roles import StepWriter


def fresh(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2 and common_prefix([1, 2, 3], [1, 2]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0 and common_prefix([7, 7], [7, 7]) == 2


def test_prefix_cache_feeds_only_new_tokens_and_matches_a_fresh_forward(tiny):
    model, _ = tiny
    c = PrefixCache(model)
    a = [5, 9, 12, 30, 31]
    # (context, dropped, fed): hand-worked from the longest common prefix with what the cache holds
    script = [(a, 0, 5),
              (a + [40, 41], 0, 2),             # continues: only the two new tokens
              (a + [40, 50], 1, 1),             # diverges at the last token: roll back one, feed one
              (a + [40, 50], 1, 1),             # fully cached: the last token is re-fed for its logits
              (a[:2], 6, 1),                    # a prefix: drop back to 1 token, re-feed the 2nd
              (a[:1], 2, 1),                    # a prefix of length 1: an empty cache, feed 1
              ([6, 9], 1, 2)]                   # nothing in common
    processed = 0
    for ctx, dropped, fed in script:
        logits, d, f = c.advance(ctx)
        assert (d, f) == (dropped, fed), ctx
        processed += fed
        assert c.ids == ctx and c.processed == processed
        assert torch.allclose(logits, fresh(model, ctx), atol=1e-5), ctx
    assert c.cache.get_seq_length() == 2


def test_prefix_cache_rollback_counts(tiny):
    model, _ = tiny
    c = PrefixCache(model)
    c.advance([3, 4, 5, 6])
    assert c.rollback(4) == 0 and c.rollback(9) == 0 and c.ids == [3, 4, 5, 6]
    assert c.rollback(2) == 2 and c.ids == [3, 4] and c.cache.get_seq_length() == 2
    assert torch.allclose(c.feed([7]), fresh(model, [3, 4, 7]), atol=1e-5)
    assert c.rollback(0) == 3 and c.ids == [] and c.cache.get_seq_length() == 0


def test_kvmu_pointer_rows_by_hand():
    """The hardware KVMU's modes: INIT commits, ROLLBACK lands on valid, a step drafted ahead holds its last token
    back until the accept that sends it to the PRM writes it with its mark."""
    k = KVMU()
    k.initialise(10, "prompt")
    k.speculate(10, 15, ahead=False)      # step 1: tokens 10..15, unverified
    k.speculate(15, 19, ahead=True, held_back=True)   # step 2 drafted ahead while step 1 is verified; 18 written
    k.accept()                            # step 1 accepted: step 2 (its last token now written) is verified next
    k.speculate(19, 22, ahead=True)       # step 3 drafted ahead, cancelled after three tokens
    k.rollback("reject")                  # step 2 rejected: step 3 goes with it
    k.initialise(20, "shadow_sync")       # the target's step, one token
    k.initialise(12, "backtrack")         # back into step 1: re-initialised there, valid falls back with it
    rows = [(m, v, c, s, why) for _, m, v, c, s, why in k.log]
    assert rows == [(INIT, 10, 10, 10, "prompt"), (SPECULATION, 10, 15, 15, "draft"),
                    (SPECULATION, 10, 15, 18, "step_ahead"), (ACCEPT, 15, 19, 19, "prm"),
                    (SPECULATION, 15, 19, 22, "step_ahead"), (ROLLBACK, 15, 15, 15, "reject"),
                    (INIT, 20, 20, 20, "shadow_sync"), (INIT, 12, 12, 12, "backtrack")]
    assert all(t1 <= t2 for t1, t2 in zip([r[0] for r in k.log], [r[0] for r in k.log][1:]))


def test_draft_kvmu_rows_for_reject_step_ahead_accept_and_backtrack(tiny):
    """The pointer rows the draft's StepWriter logs when the controller's verdicts arrive as contexts."""
    model, tok = tiny
    w = StepWriter.plain(model, tok, delimiter="<never>", kvmu=True)   # steps end at max_tokens only
    w.reset(0)
    prompt = tok("q?")["input_ids"]
    P = len(prompt)
    other = lambda t: (t + 1) % len(tok)
    s1 = w.write(prompt, P, 4).tokens                          # step 1 (position 0)
    assert len(s1) == 4 and tok.eos_token_id not in s1
    t1 = [s1[0], other(s1[1])]                                 # rejected; the target's step shares a token
    s2 = w.write(prompt + t1, P + 2, 4).tokens                 # step 2 (position 1)
    s3 = w.write(prompt + t1 + s2, P + 2, 4).tokens            # step 3 drafted ahead of step 2's verdict
    w.write(prompt + t1 + s2 + s3, P + 6, 4)                   # step 2 accepted; step 4 ahead of step 3's
    b = [other(s2[0])]                                         # step 3 fails, BRSD rewrites position 1
    s5 = w.write(prompt + t1 + b, P + 3, 4).tokens
    d = prompt + t1 + b + [other(s5[0])]                       # step 5 rejected; the target's step shares nothing
    w.write(d, P + 4, 4)
    rows = [(m, v, c, s, why) for _, m, v, c, s, why in w.kvmu.log]
    assert rows == [
        (INIT, P, P, P, "prompt"), (SPECULATION, P, P + 4, P + 4, "draft"),
        # reject: re-initialised after the shared token, the target's 2nd token written and committed with it
        (INIT, P + 2, P + 2, P + 2, "reject"), (SPECULATION, P + 2, P + 6, P + 6, "draft"),
        # step ahead: current stays at the end of the step under verification; its last token is held back
        (SPECULATION, P + 2, P + 6, P + 9, "step_ahead"),
        # accept: step 3 goes to the PRM, its last token written with the mark
        (ACCEPT, P + 6, P + 10, P + 10, "prm"), (SPECULATION, P + 6, P + 10, P + 13, "step_ahead"),
        # backtrack into verified tokens: one re-initialisation, valid falls back to the kept prefix and the rewrite
        (INIT, P + 3, P + 3, P + 3, "backtrack"), (SPECULATION, P + 3, P + 7, P + 7, "draft"),
        # reject sharing nothing: back to valid, then the target's token in
        (ROLLBACK, P + 3, P + 3, P + 3, "reject"), (INIT, P + 4, P + 4, P + 4, "shadow_sync"),
        (SPECULATION, P + 4, P + 8, P + 8, "draft")]
    # host tokens: the prompt, t1's 2nd token, b, d's last
    assert (w.ingested, w.generated) == (P + 3, 24)
    # fed: the prompt and 4 sampled tokens, then per write 1 token in and 4 sampled. A step cut at max_tokens
    # feeds its last token inside the loop, and the next write, finding its context fully cached, re-feeds it
    assert w.processed == P + 4 + 5 * (1 + 4)


def test_a_cancelled_step_drafted_ahead_moves_the_pointers_alike_however_far_it_got(tiny):
    """s1 goes to the PRM, s2 is drafted ahead and cancelled (s1 rejected) after 0 or 3 tokens; the target's
    rewrite is s1 itself, and the draft drafts ahead of its verdict. The KVMU cannot drop the step drafted ahead
    alone, so the cancelled draft is always dropped by a re-init, even when it wrote nothing: the two logs differ
    only in how far the cancelled draft got."""
    model, tok = tiny
    prompt = tok("q?")["input_ids"]
    P = len(prompt)
    logs = []
    for got in (0, 3):
        w = StepWriter.plain(model, tok, delimiter="<never>", kvmu=True)
        w.reset(0)
        s1 = w.write(prompt, P, 4).tokens
        asked = iter(range(10))
        assert len(w.write(prompt + s1, P, 4, cancelled=lambda: next(asked) >= got).tokens) == got
        w.write(prompt + s1, P, 4)
        logs.append([(m, v, c, s, why) for _, m, v, c, s, why in w.kvmu.log])
    assert logs[0][2] == (SPECULATION, P, P + 4, P + 4, "step_ahead")
    assert logs[1][2] == (SPECULATION, P, P + 4, P + 7, "step_ahead")
    assert logs[0][:2] + logs[0][3:] == logs[1][:2] + logs[1][3:] == [
        (INIT, P, P, P, "prompt"), (SPECULATION, P, P + 4, P + 4, "draft"),
        (INIT, P + 4, P + 4, P + 4, "reject"), (SPECULATION, P + 4, P + 4, P + 7, "step_ahead")]


def test_prefix_cache_over_the_int8_draft_rolls_back_its_own_cache(tiny):
    """The W8A8 draft keeps an int8 cache of its own kind; rollback crops it to a length, never to empty."""
    from heterospec.quantize.model import W8A8Draft
    from heterospec.quantize.w8a8 import quantize_model
    model, _ = tiny
    calib = [torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))]
    draft = W8A8Draft(*quantize_model(model, calib, alpha=0.5, rope_positions=64, log=lambda s: None)).eval()
    c = PrefixCache(draft)
    assert type(c.cache) is type(draft.empty_cache()) and c.cache_arg == "past_key_values"
    for ctx, dropped, fed in [([5, 9, 12, 30], 0, 4), ([5, 9, 40], 2, 1), ([5, 9, 40, 41], 0, 1), ([7], 4, 1)]:
        logits, d, f = c.advance(ctx)
        assert (d, f) == (dropped, fed) and c.ids == ctx
        assert torch.equal(logits, fresh(draft, ctx)), ctx          # integer model: bit for bit
