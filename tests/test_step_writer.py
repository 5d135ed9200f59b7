"""The draft/target StepWriter's own records against what its model really did: the tokens each call reports fed
equal what went through the model, and the KVMU logs a re-initialisation when the tokens it drops leave a shared
prefix."""
from __future__ import annotations

from heterospec.reasoning.kvcache import ACCEPT, INIT, ROLLBACK, SPECULATION
from heterospec.reasoning.roles import StepWriter


def _fed(w: StepWriter, *args) -> tuple[int, int]:
    """(tokens the write's calls report fed, tokens its model really fed)."""
    before = w.processed
    step = w.write(*args)
    return sum(c.tokens_in for c in step.calls), w.processed - before


def test_calls_report_every_token_fed_for_cut_and_complete_steps(tiny):
    model, tok = tiny
    prompt = tok("q?")["input_ids"]
    cut = StepWriter.plain(model, tok, delimiter="<never>")           # every step is cut at max_tokens
    cut.reset(0)
    s1 = cut.write(prompt, len(prompt), 4)
    assert not s1.complete and [c.tokens_in for c in s1.calls] == [len(prompt), 4]
    assert _fed(cut, prompt + s1.tokens, len(prompt) + 4, 5) == (1 + 5, 1 + 5)  # the context's end re-fed, 5 new
    # a step that ends at its delimiter keeps its last sampled token for the next call
    whole = StepWriter.plain(model, tok, delimiter=tok.decode(s1.tokens[1:3], skip_special_tokens=True))
    whole.reset(0)
    s2 = whole.write(prompt, len(prompt), 8)
    assert s2.complete and s2.tokens == s1.tokens[:3] and [c.tokens_in for c in s2.calls] == [len(prompt), 2]
    reported, real = _fed(whole, prompt + s2.tokens, len(prompt) + 3, 3)
    assert reported == real >= 1 + 2                            # s2's last token comes in now


def test_a_step_drafted_ahead_then_rejected_with_a_shared_prefix_logs_its_reinitialisation(tiny):
    """s1 verified while s2 is drafted ahead; s1 accepted, s2 (ending reasoning, so nothing drafted after it)
    rejected; the target's rewrite shares s2's first token. The cache drops s2's other tokens: one INIT that keeps
    the shared token and writes the rewrite's second (a re-initialisation: the KVMU's ROLLBACK lands on valid only)."""
    model, tok = tiny
    w = StepWriter.plain(model, tok, delimiter="<never>", kvmu=True)
    w.reset(0)
    prompt = tok("q?")["input_ids"]
    P = len(prompt)
    s1 = w.write(prompt, P, 4).tokens
    s2 = w.write(prompt + s1, P, 4).tokens                       # ahead of s1's verdict
    t2 = [s2[0], (s2[1] + 1) % len(tok)]
    w.write(prompt + s1 + t2, P + 6, 4)
    rows = [(m, v, c, s, why) for _, m, v, c, s, why in w.kvmu.log]
    assert rows[2] == (SPECULATION, P, P + 4, P + 7, "step_ahead")   # s2's last token held back
    assert rows[3:] == [
        (INIT, P + 6, P + 6, P + 6, "reject"),                   # s2's last 3 tokens go, the shared one stays
        (SPECULATION, P + 6, P + 10, P + 10, "draft")]
    assert ROLLBACK not in {r[0] for r in rows} and ACCEPT not in {r[0] for r in rows}
