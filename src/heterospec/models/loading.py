"""One loader for the tiny trio and real Qwen checkpoints: ``from_pretrained`` on a directory or hub id.

The PRM head is chosen by the checkpoint's declared architecture: our tiny PRM is a
``Qwen2ForTokenClassification``; Qwen2.5-Math-PRM declares ``Qwen2ForProcessRewardModel``, whose
code ships with the checkpoint (``trust_remote_code``). Both return per-token logits of shape
[batch, seq, 2] as their first output.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from heterospec.errors import UserError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(dtype: str) -> torch.dtype:
    if dtype not in _DTYPES:
        raise UserError(f"dtype {dtype!r} is not supported; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def _looks_like_hub_id(path: str) -> bool:
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and not Path(path).exists()


def _resolve(path: str | Path, role: str) -> str:
    """A local directory that exists, or a hub id (served from the local Hugging Face cache when offline)."""
    p = str(path)
    if not p:
        raise UserError(f"models.{role}.path is empty: set it to a model directory or a Hugging Face id")
    if Path(p).expanduser().is_dir():
        return str(Path(p).expanduser())
    if _looks_like_hub_id(p):
        return p
    raise UserError(f"{role} model not found at {p}: train it (snakemake models) or set models.{role}.path "
                    f"to an existing checkpoint directory")


def _load(fn, path: str, role: str, **kw):
    from safetensors import SafetensorError

    try:
        return fn(path, **kw)
    except OSError as e:  # hub id not in the local cache, or a directory without weights
        raise UserError(f"{role} model {path} could not be loaded ({str(e).splitlines()[0]}); "
                        f"check models.{role}.path or download the checkpoint first") from e
    except SafetensorError as e:  # a truncated or damaged weights file that no manifest listed
        raise UserError(f"{role} model {path}: its weights file is damaged ({str(e).splitlines()[0]}); "
                        f"restore or rebuild the checkpoint") from e


def load_tokenizer(path: str | Path, role: str = "model"):
    from transformers import AutoTokenizer

    return _load(AutoTokenizer.from_pretrained, _resolve(path, role), role)


def load_causal_lm(path: str | Path, device: str = "cpu", dtype: str = "float32", role: str = "model"):
    """A causal LM in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM

    model = _load(AutoModelForCausalLM.from_pretrained, _resolve(path, role), role, dtype=_dtype(dtype))
    return model.to(device).eval()


def _architectures(path: str) -> list[str]:
    from transformers import AutoConfig

    local = Path(path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text()).get("architectures") or []
    cfg = _load(AutoConfig.from_pretrained, path, "prm", trust_remote_code=True)
    return list(getattr(cfg, "architectures", None) or [])


def load_prm(path: str | Path, device: str = "cpu", dtype: str = "float32", prompt: str = "plain",
             step_token: str = "<extra_0>"):
    """The PRM on ``device``, read through the protocol of ``models.prompt`` (:class:`heterospec.models.prm.PRM`)."""
    from transformers import AutoModel, AutoModelForTokenClassification

    from heterospec.models.prm import PRM, protocol_for

    p = _resolve(path, "prm")
    if "Qwen2ForProcessRewardModel" in _architectures(p):
        model = _load(AutoModel.from_pretrained, p, "prm", dtype=_dtype(dtype), trust_remote_code=True)
    else:
        model = _load(AutoModelForTokenClassification.from_pretrained, p, "prm", dtype=_dtype(dtype))
    return PRM(model.to(device).eval(), protocol_for(prompt, load_tokenizer(p, "prm"), step_token))
