"""The torch int8 reference of the quantised draft: what the FPGA kernel computes, bit for bit.

``load_quantized_draft(path, device)`` returns a :class:`W8A8Draft`, a ``torch.nn.Module`` with the
call interface of a Hugging Face causal LM as the workflow uses it (``model(input_ids=..., attention_mask=...,
position_ids=..., past_key_values=..., use_cache=True, logits_to_keep=1)`` returning ``.logits`` and
``.past_key_values``, plus :meth:`W8A8Draft.generate` for greedy decoding), so
:func:`heterospec.models.generate.greedy_generate` and the collect stage run it as the draft unchanged.
Every formula follows :mod:`heterospec.quantize.intmath` (which parts are integer, which float32).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from heterospec.quantize.intmath import (ACT_MAX, SOFTMAX_ONE, exp_det, f32, int_matmul, norm_scale,
                                         quantize_rows, quantize_static, silu)
from heterospec.quantize.w8a8 import accumulator_bound, load_export

_F32 = torch.float32


@dataclass
class Int8Cache:
    """The draft's KV cache as the FPGA holds it in HBM: int8 K with a per-token scale, int8 V (static scale)."""
    k: list[torch.Tensor] = field(default_factory=list)        # per layer [B, kv, S, d] int8
    k_scale: list[torch.Tensor] = field(default_factory=list)  # per layer [B, kv, S] float32
    v: list[torch.Tensor] = field(default_factory=list)        # per layer [B, kv, S, d] int8

    def __len__(self) -> int:
        return 0 if not self.k else int(self.k[0].shape[2])

    def get_seq_length(self, layer: int = 0) -> int:
        return len(self)

    def crop(self, length: int) -> None:
        """Drop entries past ``length`` (a rollback)."""
        for lst in (self.k, self.k_scale, self.v):
            for i, t in enumerate(lst):
                lst[i] = t[:, :, :length]


@dataclass
class Int8Output:
    logits: torch.Tensor
    past_key_values: Optional[Int8Cache] = None


class _Linear(nn.Module):
    """An int8 weight with per-row scales (and an optional float bias)."""

    def __init__(self, w: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("weight", w)
        self.scale = nn.Parameter(scale, requires_grad=False)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None
        self.bound = accumulator_bound(w.shape[1])

    def acc(self, xq: torch.Tensor) -> torch.Tensor:
        """int32 accumulators (as exact float64) of int8 rows ``xq`` [..., K] -> [..., O]."""
        return int_matmul(xq, self.weight, self.bound)

    def dequant(self, acc: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """(float(acc) * a) * w_scale (+ bias), per token scale ``a`` [...]."""
        y = (acc.to(_F32) * a.unsqueeze(-1)) * self.scale
        return y + self.bias if self.bias is not None else y


class W8A8Draft(nn.Module):
    """Integer reference model of a W8A8 Qwen2 draft (see module docstring)."""

    def __init__(self, tensors: dict[str, torch.Tensor], info: dict, config=None):
        super().__init__()
        a = self.arch = info["arch"]
        self.info, self.config = info, config
        self.heads, self.kv, self.d = a["heads"], a["kv_heads"], a["head_dim"]
        self.eps = a["rms_norm_eps"]
        self.inv_sqrt_d = f32(1.0 / math.sqrt(self.d))
        self.register_buffer("embed", tensors["embed.weight"])
        self.embed_scale = nn.Parameter(tensors["embed.scale"], requires_grad=False)
        head = "embed" if a["tied"] else "lm_head"
        self.lm_head = _Linear(tensors[f"{head}.weight"], tensors[f"{head}.scale"])
        self.norm = nn.Parameter(tensors["norm.weight"], requires_grad=False)
        self.register_buffer("rope_cos", tensors["rope.cos"])
        self.register_buffer("rope_sin", tensors["rope.sin"])
        self.layers = nn.ModuleList()
        for i in range(a["layers"]):
            p = f"layers.{i}."
            m = nn.Module()
            m.attn_norm = nn.Parameter(tensors[p + "attn_norm"], requires_grad=False)
            m.mlp_norm = nn.Parameter(tensors[p + "mlp_norm"], requires_grad=False)
            m.v_scale = nn.Parameter(tensors[p + "v_scale"], requires_grad=False)
            m.qkv = _Linear(tensors[p + "qkv.weight"], tensors[p + "qkv.scale"], tensors[p + "qkv.bias"])
            m.o = _Linear(tensors[p + "o.weight"], tensors[p + "o.scale"])
            m.gate_up = _Linear(tensors[p + "gate_up.weight"], tensors[p + "gate_up.scale"])
            m.down = _Linear(tensors[p + "down.weight"], tensors[p + "down.scale"])
            self.layers.append(m)

    @property
    def device(self) -> torch.device:
        return self.norm.device

    # ------------------------------------------------------------------ blocks
    def _norm_quant(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RMSNorm folded into the int8 quantisation of its output: (int8 rows, per-token dequant scale)."""
        r = norm_scale(x, self.eps)
        uq, su = quantize_rows(x * w)
        return uq, su * r

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x * cos + rotate_half(x) * sin; x [B, h, T, d], cos/sin [B, 1, T, d]."""
        h = self.d // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * cos + rot * sin

    def _attention(self, layer, q, k, v, cache: Int8Cache | None, li: int, key_ok: torch.Tensor, taps):
        """Integer attention over the int8 KV cache; q [B, heads, T, d], k/v [B, kv, T, d] -> [B, T, heads*d]."""
        B, _, T, d = q.shape
        qq, sq = quantize_rows(q)                                   # [B, h, T, d], [B, h, T]
        kq, sk = quantize_rows(k)
        vq = quantize_static(v, layer.v_scale.view(1, -1, 1, 1))
        kq, vq = kq.to(torch.int8), vq.to(torch.int8)
        if cache is not None:
            if len(cache.k) > li:
                kq = torch.cat([cache.k[li], kq], 2)
                sk = torch.cat([cache.k_scale[li], sk], 2)
                vq = torch.cat([cache.v[li], vq], 2)
                cache.k[li], cache.k_scale[li], cache.v[li] = kq, sk, vq
            else:
                cache.k.append(kq), cache.k_scale.append(sk), cache.v.append(vq)
        S, g = kq.shape[2], self.heads // self.kv
        qg = qq.view(B, self.kv, g, T, d)
        acc = int_matmul(qg, kq[:, :, None].to(_F32), accumulator_bound(d))         # [B, kv, g, T, S]
        score = ((acc.to(_F32) * sq.view(B, self.kv, g, T, 1)) * sk[:, :, None, None, :]) * self.inv_sqrt_d
        valid = key_ok[:, None, None]                                                # [B, 1, 1, T, S]
        m = score.masked_fill(~valid, float("-inf")).amax(dim=-1, keepdim=True)
        e = torch.round(exp_det(score - m) * torch.tensor(SOFTMAX_ONE, dtype=_F32)).masked_fill(~valid, 0.0)
        total = e.to(torch.int64).sum(dim=-1)                                        # [B, kv, g, T]
        pv = int_matmul(e, vq[:, :, None].to(_F32).transpose(-1, -2), S * SOFTMAX_ONE * ACT_MAX + 1)
        out = (pv.to(_F32) / total.to(_F32).unsqueeze(-1)) * layer.v_scale.view(1, -1, 1, 1, 1)
        if taps is not None:
            taps[f"{li}.score"] = acc.masked_fill(~valid, 0)
            taps[f"{li}.pv"] = pv
        return out.reshape(B, self.heads, T, d).transpose(1, 2).reshape(B, T, self.heads * d)

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def empty_cache(self) -> Int8Cache:
        """A fresh int8 KV cache (what callers that manage caches themselves start from)."""
        return Int8Cache()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: Int8Cache | None = None,
                use_cache: bool = True, logits_to_keep: int = 0, taps: dict | None = None, **_) -> Int8Output:
        """Logits [B, T or logits_to_keep, vocab] for ``input_ids`` [B, T] after ``past_key_values``."""
        B, T = input_ids.shape
        dev = input_ids.device
        past = len(past_key_values) if past_key_values is not None else 0
        cache = past_key_values if past_key_values is not None else (Int8Cache() if use_cache else None)
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=dev).expand(B, T)
        if int(position_ids.max()) >= self.rope_cos.shape[0]:
            from heterospec.errors import UserError
            raise UserError(f"position {int(position_ids.max())} is past the export's RoPE table "
                            f"({self.rope_cos.shape[0]} positions; raise quantize.rope_positions)")
        S = past + T
        keys = torch.arange(S, device=dev)
        key_ok = keys[None, None, :] <= (past + torch.arange(T, device=dev))[None, :, None]   # causal [1, T, S]
        key_ok = key_ok.expand(B, T, S)
        if attention_mask is not None:    # padding: a key is visible if unmasked; a query always sees itself
            diag = keys[None, None, :] == (past + torch.arange(T, device=dev))[None, :, None]
            key_ok = key_ok & (attention_mask[:, None, :S].bool() | diag)
        cos = self.rope_cos[position_ids].unsqueeze(1)
        sin = self.rope_sin[position_ids].unsqueeze(1)
        x = self.embed[input_ids].to(_F32) * self.embed_scale[input_ids].unsqueeze(-1)
        hd, kd = self.heads * self.d, self.kv * self.d
        for li, layer in enumerate(self.layers):
            uq, a = self._norm_quant(x, layer.attn_norm)
            acc = layer.qkv.acc(uq)
            qkv = layer.qkv.dequant(acc, a)
            q = qkv[..., :hd].view(B, T, self.heads, self.d).transpose(1, 2)
            k = qkv[..., hd:hd + kd].view(B, T, self.kv, self.d).transpose(1, 2)
            v = qkv[..., hd + kd:].view(B, T, self.kv, self.d).transpose(1, 2)
            att = self._attention(layer, self._rope(q, cos, sin), self._rope(k, cos, sin), v, cache, li, key_ok, taps)
            aq, sa = quantize_rows(att)
            acc_o = layer.o.acc(aq)
            x = x + layer.o.dequant(acc_o, sa)
            uq, a = self._norm_quant(x, layer.mlp_norm)
            acc_gu = layer.gate_up.acc(uq)
            gu = layer.gate_up.dequant(acc_gu, a)
            inter = gu.shape[-1] // 2
            h = silu(gu[..., :inter]) * gu[..., inter:]
            hq, sh = quantize_rows(h)
            acc_d = layer.down.acc(hq)
            x = x + layer.down.dequant(acc_d, sh)
            if taps is not None:
                taps.update({f"{li}.qkv": acc, f"{li}.o": acc_o, f"{li}.gate_up": acc_gu, f"{li}.down": acc_d})
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        uq, a = self._norm_quant(x, self.norm)
        acc = self.lm_head.acc(uq)
        if taps is not None:
            taps["lm_head"] = acc
        return Int8Output(logits=self.lm_head.dequant(acc, a), past_key_values=cache if use_cache else None)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 32, eos_token_id: int | None = None,
                 **_) -> torch.Tensor:
        """Greedy decoding of one batch without padding: returns input_ids with the new tokens appended."""
        out = self(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        ids, cache = input_ids, out.past_key_values
        for _ in range(max_new_tokens):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            if eos_token_id is not None and bool((nxt == eos_token_id).all()):
                break
            out = self(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
        return ids


def load_quantized_draft(path: str | Path, device: str = "cpu") -> W8A8Draft:
    """The W8A8 export at ``path`` (written by the quantize stage) as an int8 reference model on ``device``."""
    tensors, info = load_export(path)
    config = None
    if (Path(path) / "config.json").is_file():
        from transformers import AutoConfig
        config = AutoConfig.from_pretrained(str(path))
    return W8A8Draft(tensors, info, config).to(device).eval()
