"""The draft's decoder: the Qwen2 forward pass written out over a fixed KV buffer, like the FPGA kernel.

Hugging Face's forward costs ~2 ms per call on a tiny model, nearly all of it Python and cache bookkeeping; the
draft makes several calls per round, so that overhead, not arithmetic, would decide the speed. This decoder uses
the checkpoint's own weights (q/k/v and gate/up fused) and a preallocated K/V buffer with explicit slots, so a call
is ~25 tensor operations per layer and tree nodes can be written, masked and compacted by slot. Its logits match
the Hugging Face model's to float32 rounding (tests check it); the draft's numbers only steer which tokens are
proposed, never what the target accepts.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from heterospec.errors import UserError


class LeanDecoder:
    """``forward(tokens, positions, mask)`` appends tokens at the next slots and returns their logits."""

    def __init__(self, model, max_slots: int | None = None):
        cfg = model.config
        if cfg.model_type != "qwen2":
            raise UserError(f"the lean draft decoder runs Qwen2 checkpoints; this draft is '{cfg.model_type}' "
                            f"(token_speculation.draft_decoder=auto or hf runs it)")
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.max_positions = cfg.max_position_embeddings
        self.max_slots = max_slots or self.max_positions + 128
        body = model.model
        with torch.no_grad():
            self.embed = body.embed_tokens.weight.detach()
            self.head = model.lm_head.weight.detach()
            self.norm = body.norm.weight.detach()
            self.layers = []
            for layer in body.layers:
                a, m = layer.self_attn, layer.mlp
                self.layers.append(dict(
                    ln1=layer.input_layernorm.weight.detach(), ln2=layer.post_attention_layernorm.weight.detach(),
                    qkv_w=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
                    qkv_b=torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]).detach(),
                    o_w=a.o_proj.weight.detach(),
                    gu_w=torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(),
                    down_w=m.down_proj.weight.detach()))
            rope = body.rotary_emb
            pos = torch.arange(self.max_slots + self.max_positions, dtype=torch.float32)
            freqs = pos[:, None] * rope.inv_freq.float()[None]
            emb = torch.cat([freqs, freqs], dim=-1)                  # [P, head_dim]
            self.cos = (emb.cos() * rope.attention_scaling).to(self.embed.dtype)
            self.sin = (emb.sin() * rope.attention_scaling).to(self.embed.dtype)
        shape = (len(self.layers), self.kv_heads, self.max_slots, self.head_dim)
        self.k = torch.zeros(shape, dtype=self.embed.dtype)
        self.v = torch.zeros(shape, dtype=self.embed.dtype)
        self.length = 0                                              # slots in use
        self.passes = 0                                              # forward calls so far

    def reset(self) -> None:
        self.length = 0

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                logits_rows: slice | None = None) -> torch.Tensor:
        """tokens, positions: [n]; mask: [n, length + n] bool (True = attend) or None for causal over everything.
        The tokens' K/V land in slots length .. length+n-1. Returns logits [n', vocab] of ``logits_rows``."""
        n = tokens.shape[0]
        s0, s1 = self.length, self.length + n
        if s1 > self.max_slots:
            raise UserError(f"draft context of {s1} tokens exceeds the lean decoder's {self.max_slots} slots")
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        cos, sin = self.cos[positions][None], self.sin[positions][None]     # [1, n, D]
        if mask is None and n > 1:
            mask = torch.ones((n, s1), dtype=torch.bool).tril_(s0)
        attn_mask = None if mask is None else mask[None, None]              # [1, 1, n, s1]
        x = self.embed[tokens]                                               # [n, hidden]
        for li, L in enumerate(self.layers):
            h = F.rms_norm(x, (x.shape[-1],), L["ln1"], self.eps)
            qkv = F.linear(h, L["qkv_w"], L["qkv_b"])                        # [n, (H + 2 KV) D]
            q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
            q = self._rope(q.view(n, H, D).transpose(0, 1), cos, sin)      # [H, n, D]
            k = self._rope(k.view(n, KV, D).transpose(0, 1), cos, sin)     # [KV, n, D]
            self.k[li, :, s0:s1] = k
            self.v[li, :, s0:s1] = v.view(n, KV, D).transpose(0, 1)
            o = F.scaled_dot_product_attention(q[None], self.k[li, :, :s1][None], self.v[li, :, :s1][None],
                                               attn_mask=attn_mask, enable_gqa=H != KV)   # [1, H, n, D]
            x = x + F.linear(o[0].transpose(0, 1).reshape(n, H * D), L["o_w"])
            h = F.rms_norm(x, (x.shape[-1],), L["ln2"], self.eps)
            g, u = F.linear(h, L["gu_w"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, L["down_w"])
        self.length = s1
        self.passes += 1
        if logits_rows is not None:
            x = x[logits_rows]
        return F.linear(F.rms_norm(x, (x.shape[-1],), self.norm, self.eps), self.head)

    def keep(self, n: int, extra_slots: list[int] | None = None) -> None:
        """Keep slots [0, n) and move ``extra_slots`` (ascending) right after them; drop everything else."""
        if extra_slots:
            idx = torch.tensor(extra_slots, dtype=torch.long)
            m = len(extra_slots)
            if extra_slots != list(range(n, n + m)):
                self.k[:, :, n:n + m] = self.k[:, :, idx]
                self.v[:, :, n:n + m] = self.v[:, :, idx]
            n += m
        self.length = n


class HfDecoder:
    """The same interface over the Hugging Face forward and a DynamicCache (any causal LM whose attention takes a
    prepared 4D mask): for drafts the lean decoder does not cover (Llama, OPT, Qwen3). Slower per call."""

    def __init__(self, model):
        from transformers import DynamicCache
        import inspect
        self.model = model
        self.max_positions = int(model.config.max_position_embeddings)
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._new = lambda: DynamicCache(config=model.config)
        self.cache = self._new()
        self.length = 0
        self.passes = 0

    def reset(self) -> None:
        self.cache, self.length = self._new(), 0

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                logits_rows: slice | None = None) -> torch.Tensor:
        n = tokens.shape[0]
        if mask is None:
            mask = torch.ones((n, self.length + n), dtype=torch.bool).tril_(self.length)
        dev = next(self.model.parameters()).device
        out = self.model(input_ids=tokens[None].to(dev), position_ids=positions[None].to(dev),
                         attention_mask={"full_attention": mask[None, None].to(dev)}, use_cache=True,
                         **{self.cache_arg: self.cache})
        self.length += n
        self.passes += 1
        logits = out.logits[0]
        return (logits if logits_rows is None else logits[logits_rows]).float().cpu()

    def keep(self, n: int, extra_slots: list[int] | None = None) -> None:
        idx = list(range(n)) + list(extra_slots or [])
        if idx == list(range(len(idx))):
            if self.length > len(idx):
                self.cache.crop(len(idx) - self.length)
        else:
            sel = torch.tensor(idx, dtype=torch.long)
            for layer in self.cache.layers:
                layer.keys = layer.keys.index_select(-2, sel.to(layer.keys.device))
                layer.values = layer.values.index_select(-2, sel.to(layer.values.device))
        self.length = len(idx)


def draft_decoder(model, kind: str = "auto"):
    """``lean`` (Qwen2 only), ``hf``, or ``auto``: lean for Qwen2 checkpoints, else hf."""
    if kind == "auto":   # the lean decoder keeps its buffers on the CPU
        on_cpu = next(model.parameters()).device.type == "cpu"
        kind = "lean" if model.config.model_type == "qwen2" and on_cpu else "hf"
    if kind == "lean":
        return LeanDecoder(model)
    if kind == "hf":
        return HfDecoder(model)
    raise UserError(f"token_speculation.draft_decoder={kind!r}: expected auto, lean or hf")
