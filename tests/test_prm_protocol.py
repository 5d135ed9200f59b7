"""The one PRM protocol: input layout of both variants, where rewards are read, and the collect role reusing it."""
import pytest
import torch
from tokenizers import processors
from transformers import Qwen2Config, Qwen2ForTokenClassification

from heterospec.errors import UserError
from heterospec.models.prm import PRM, PrmProtocol, QwenMathProtocol, StepScorer, protocol_for
from heterospec.models.tokenizer import STEP, build_tokenizer
from heterospec.models.prefix_cache import PrefixCache
from heterospec.reasoning.roles import Call

QUESTION = "a=3,b=5,c=a+b,d=c-a. Find d."
STEPS = ["c=a+b=3+5=8\n\n", "d=c-a=8-3=5\n\n", "\\boxed{5}"]
# Qwen2.5's ChatML layout, written here so the test needs no hub download
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _chat_tokenizer():
    """The character tokenizer dressed as Qwen's: ChatML specials and template, no bos added."""
    tok = build_tokenizer()
    tok.backend_tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens({"additional_special_tokens": [STEP, "<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML
    return tok


def _tiny_prm(tok, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256, num_labels=2,
                      pad_token_id=tok.pad_token_id)
    return Qwen2ForTokenClassification(cfg).eval()


def test_plain_layout_is_prompt_then_stripped_steps_each_closed_by_the_separator():
    tok = build_tokenizer()
    p = protocol_for("plain", tok)
    text = tok.decode(p.ids(QUESTION, STEPS))
    assert text == f"<|endoftext|>{QUESTION}\n\nc=a+b=3+5=8{STEP}d=c-a=8-3=5{STEP}\\boxed{{5}}{STEP}"
    assert p.ids(QUESTION, STEPS[:2]) == p.ids(QUESTION, STEPS)[: len(p.ids(QUESTION, STEPS[:2]))]


def test_qwen_math_layout_is_the_prm_chat():
    tok = _chat_tokenizer()
    p = protocol_for("qwen_math_cot", tok)
    assert isinstance(p, QwenMathProtocol)
    text = tok.decode(p.ids(QUESTION, STEPS))
    assert text == ("<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}."
                    f"<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
                    f"c=a+b=3+5=8{STEP}d=c-a=8-3=5{STEP}\\boxed{{5}}{STEP}")
    # a shorter path is a prefix of a longer one: the collect role's KV cache stays valid step after step
    short, full = p.ids(QUESTION, STEPS[:1]), p.ids(QUESTION, STEPS)
    assert full[: len(short)] == short and p.prefix(QUESTION) == short[: len(p.prefix(QUESTION))]


def test_rewards_are_p_correct_at_each_separator():
    tok = build_tokenizer()
    p = PrmProtocol(tok)
    ids = p.ids(QUESTION, STEPS)
    logits = torch.zeros(len(ids), 2)
    seps = [i for i, t in enumerate(ids) if t == p.sep]
    logits[seps[0]] = torch.tensor([0.0, 2.0])
    logits[seps[1]] = torch.tensor([1.0, -1.0])
    logits[seps[1] - 1] = torch.tensor([-9.0, 9.0])    # not a separator: never read
    r = p.rewards(ids, logits)
    assert r == pytest.approx([torch.sigmoid(torch.tensor(2.0)).item(), torch.sigmoid(torch.tensor(-2.0)).item(), 0.5])


@pytest.mark.parametrize("prompt,make_tok", [("plain", build_tokenizer), ("qwen_math_cot", _chat_tokenizer)])
def test_collect_role_scores_as_the_batch_scorer_and_reuses_its_cache(prompt, make_tok):
    tok = make_tok()
    protocol = protocol_for(prompt, tok)
    model = _tiny_prm(tok)
    batch = PRM(model, protocol).score_steps(QUESTION, STEPS)
    scorer = StepScorer(protocol, PrefixCache(model), Call)
    rewards, fed = [], []
    for k in range(1, len(STEPS) + 1):
        r, calls = scorer.score(QUESTION, STEPS[:k])
        rewards.append(r)
        fed.append(calls[0].tokens_in)
    assert rewards == pytest.approx(batch, abs=1e-5)
    assert fed[1] == len(protocol.ids(QUESTION, STEPS[:2])) - len(protocol.ids(QUESTION, STEPS[:1]))


def test_unknown_prompt_or_missing_separator_is_one_line():
    with pytest.raises(UserError, match="models.prompt=chatty"):
        protocol_for("chatty", build_tokenizer())
    with pytest.raises(UserError, match="no step separator token '<extra_9>'"):
        PrmProtocol(build_tokenizer(), "<extra_9>")
