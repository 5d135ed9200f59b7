"""W8A8 quantisation of the draft (SmoothQuant-style) and its integer torch reference.

``load_quantized_draft(path, device)`` loads an export written by ``python -m heterospec.quantize`` as a module
with the Hugging Face causal-LM call interface; see :mod:`heterospec.quantize.model`.
"""
from heterospec.quantize.model import W8A8Draft, load_quantized_draft

__all__ = ["W8A8Draft", "load_quantized_draft"]
