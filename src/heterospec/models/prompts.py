"""Prompt formats: the synthetic task's own, and the Qwen2.5-Math chain-of-thought chat prompt."""
from __future__ import annotations

from heterospec.errors import UserError

QWEN_MATH_COT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
PROMPTS = ("plain", "qwen_math_cot")


def format_prompt(style: str, question: str, tokenizer=None) -> str:
    """The text a causal LM is conditioned on before it writes the first step."""
    if style == "plain":
        from heterospec.tasks.synthetic import format_prompt as plain
        return plain(question)
    if style == "qwen_math_cot":
        messages = [{"role": "system", "content": QWEN_MATH_COT_SYSTEM}, {"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    raise UserError(f"models.prompt={style}: expected one of {list(PROMPTS)}")
