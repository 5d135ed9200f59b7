"""Character-level Hugging Face tokenizer for the tiny trio.

One token per character (printable ASCII plus newline and tab), so decoding reproduces the
text exactly, plus the special tokens the workflow relies on: ``<|pad|>``, ``<|endoftext|>``
(bos and eos, like Qwen's) and the PRM step separator ``<extra_0>`` as a single token.

It is a byte-level BPE with *no merges*, i.e. Qwen2's own tokenizer design reduced to single
characters. That matters: next to a ``config.json`` of model_type qwen2, transformers 5's
``AutoTokenizer`` rebuilds the pipeline as ``Qwen2Tokenizer`` (its regex + byte-level
pre-tokenizer) whatever ``tokenizer.json`` says; with no merges, both pipelines give the same
ids, so the tiny checkpoints load through the same ``from_pretrained`` call as real Qwen ones.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK, STEP = "<|pad|>", "<|endoftext|>", "<|unk|>", "<extra_0>"
SPECIALS = [PAD, EOS, UNK, STEP]
CHARS = ["\n", "\t"] + [chr(c) for c in range(32, 127)]


def _byte_symbol(b: int) -> str:
    """GPT-2 byte-level alphabet: printable bytes stand for themselves, the others map to 256 + their rank."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    if b in printable:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in printable].index(b))


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer; ``tokenizer(text)`` prepends ``<|endoftext|>`` as bos."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + [_byte_symbol(ord(c)) for c in CHARS])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOS} $A", pair=f"{EOS} $A $B", special_tokens=[(EOS, vocab[EOS])])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        additional_special_tokens=[STEP], padding_side="right", clean_up_tokenization_spaces=False)
    return fast


def save_tokenizer(out_dir: str | Path) -> PreTrainedTokenizerFast:
    tok = build_tokenizer()
    tok.save_pretrained(str(out_dir))
    return tok


def char_encoder(tokenizer) -> Callable[[str], list[int]]:
    """A fast ``text -> ids`` (no bos) for training batches, equal to ``tokenizer(text, add_special_tokens=False)``.

    A dict lookup per character instead of the full tokenizer pipeline: data preparation was
    ~10 % of a tiny model's training step.
    """
    table = {c: tokenizer.convert_tokens_to_ids(_byte_symbol(ord(c))) for c in CHARS}
    step_id = tokenizer.convert_tokens_to_ids(STEP)

    def encode(text: str) -> list[int]:
        ids: list[int] = []
        for i, piece in enumerate(text.split(STEP)):
            if i:
                ids.append(step_id)
            ids.extend(table[c] for c in piece)
        return ids

    probe = "a=1,b=2. Find c.\n\nc=a+b=1+2=3" + STEP + "\\boxed{3} (x*y/z)\t"
    assert encode(probe) == tokenizer(probe, add_special_tokens=False)["input_ids"], "tokenizer is not character-level"
    return encode
