"""Performance and resource models of the streaming W8A8 draft decoder on an HBM FPGA.

One decoded token is one pass through the pipeline (see :mod:`heterospec.hls.codegen` for the tasks). Per layer:

    RMSNorm -> QKV engine -> RoPE + quantise + KV write -> scores (q.k over the HBM KV cache) -> softmax
    -> p.v -> quantise -> O engine (+ residual) -> RMSNorm -> gate/up engine -> SiLU * up, quantise
    -> down engine (+ residual)

then the final RMSNorm, the LM head engine and the greedy sampler, whose token goes back through the KVMU's
input multiplexer. Each arrow is a dependency the next task waits on (a norm or a quantiser needs its whole
input vector first), so a layer costs the sum of its stages, each one ``stage_latency`` cycles of fill plus
its streaming time. A matrix-vector engine streams ``rows * cols`` int8 weights per cycle at most, and never
faster than its HBM ports deliver them: ``weight_ports`` AXI masters of ``port_bits`` each, each capped by
its pseudo-channel's bandwidth at the kernel clock. The result is never below the board's HBM roofline
(every weight and KV byte of the token read once at the full HBM bandwidth).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from heterospec.errors import UserError


@dataclass(frozen=True)
class Arch:
    """A Qwen2 decoder's shape (published config numbers suffice; no weights)."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True

    @classmethod
    def of(cls, d: dict) -> "Arch":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def engines(self) -> dict[str, tuple[int, int]]:
        """Matrix-vector engines: name -> (outputs, inputs)."""
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        return {"qkv": ((h + 2 * kv) * d, self.hidden), "o": (self.hidden, h * d),
                "gate_up": (2 * self.intermediate, self.hidden), "down": (self.hidden, self.intermediate),
                "lm_head": (self.vocab, self.hidden)}

    def weight_bytes(self) -> int:
        """int8 weights plus float32 per-row scales read per token (embedding row excluded)."""
        eng = self.engines()
        per_layer = sum(o * k + 4 * o for n, (o, k) in eng.items() if n != "lm_head")
        o, k = eng["lm_head"]
        return self.layers * per_layer + o * k + 4 * o

    def kv_bytes_per_token(self) -> int:
        """int8 K and V plus K's float32 scale, per token of context, all layers."""
        return self.layers * self.kv_heads * (2 * self.head_dim + 4)


def check_parallelism(arch: Arch, rows: int, cols: int, where: str) -> None:
    """Every engine's outputs must split into ``rows`` and its inputs into ``cols``; one line if not."""
    if rows < 1 or cols < 1:
        raise UserError(f"{where}: rows={rows} and cols={cols} must be positive")
    for name, (o, k) in arch.engines().items():
        if k % cols:
            raise UserError(f"{where}: cols={cols} does not divide the {name} engine's input size {k}")
        if o % rows:
            raise UserError(f"{where}: rows={rows} does not divide the {name} engine's output size {o}")


def hbm(board: Any) -> tuple[int, float]:
    """(pseudo-channels, GB/s each) of a board config; one line when it has none."""
    fpga = dict(board.get("fpga") or {})
    if not fpga.get("hbm_channels") or not fpga.get("channel_gbs"):
        raise UserError(f"hardware config '{board.get('name')}' has no HBM figures (fpga.hbm_channels, "
                        f"fpga.channel_gbs); the HLS models need them")
    return int(fpga["hbm_channels"]), float(fpga["channel_gbs"])


def token_cycles(arch: Arch, rows: int, cols: int, board: Any, clock_mhz: float, pipe: dict,
                 context: int, lm_head: bool = True) -> dict[str, float]:
    """Cycles of one decoded token at ``context`` tokens already cached, by component."""
    channels, ch_gbs = hbm(board)
    wp, kp = int(pipe["weight_ports"]), int(pipe["kv_ports"])
    if wp < 1 or kp < 1:
        raise UserError(f"hls.pipeline: weight_ports={wp} and kv_ports={kp} must both be at least 1")
    if wp + kp > channels:
        raise UserError(f"hls.pipeline: weight_ports + kv_ports = {wp + kp} exceeds the board's {channels} HBM channels")
    f = clock_mhz * 1e6
    port = min(pipe["port_bits"] / 8, ch_gbs * 1e9 * pipe["hbm_efficiency"] / f)   # bytes/cycle per port
    w_rate, kv_rate = min(rows * cols, wp * port), kp * port
    lanes, lat = pipe["vector_lanes"], pipe["stage_latency"]
    h, kv, d, H, I = arch.heads, arch.kv_heads, arch.head_dim, arch.hidden, arch.intermediate
    L = context + 1
    c = dict.fromkeys(("weights", "stage_latency", "vector", "attention", "token_overhead"), 0.0)
    for name, (o, k) in arch.engines().items():
        n = 1 if name == "lm_head" else arch.layers
        if name == "lm_head" and not lm_head:
            continue
        c["weights"] += n * (o * k + 4 * o) / w_rate
        c["stage_latency"] += n * lat
    vec_per_layer = 2 * H + (h + 2 * kv) * d + h * d + 2 * H + 2 * I      # norm, rope+quant, quant, norm, silu+quant
    c["vector"] = arch.layers * vec_per_layer / lanes + 2 * H / lanes
    c["stage_latency"] += arch.layers * 6 * lat + lat                      # the six vector / attention stages, final norm
    macs = h * L * d
    kv_read = L * kv * (d + 4), L * kv * d                                 # K (+ its scale), V bytes per layer
    per_layer = (max(macs / pipe["attention_macs"], kv_read[0] / kv_rate) + 2 * h * L / pipe["softmax_lanes"]
                 + max(macs / pipe["attention_macs"], kv_read[1] / kv_rate))
    c["attention"] = arch.layers * per_layer
    c["token_overhead"] = pipe["token_overhead"]
    return c


def roofline_ms(arch: Arch, board: Any, context: int) -> float:
    """Every weight and KV byte of one token read once at the board's full HBM bandwidth."""
    channels, ch_gbs = hbm(board)
    return (arch.weight_bytes() + (context + 1) * arch.kv_bytes_per_token()) / (channels * ch_gbs * 1e9) * 1e3


def token_ms(arch: Arch, rows: int, cols: int, board: Any, clock_mhz: float, pipe: dict, context: int,
             lm_head: bool = True) -> tuple[float, dict[str, float]]:
    """(ms per token, cycles by component), never below the roofline."""
    c = token_cycles(arch, rows, cols, board, clock_mhz, pipe, context, lm_head)
    ms = sum(c.values()) / (clock_mhz * 1e3)
    return max(ms, roofline_ms(arch, board, context)), c


def migration_ms(arch: Arch, tokens: int, link_gbs: float, link_latency_us: float = 1.0) -> dict[str, float]:
    """Moving ``tokens`` of draft state over the host link: token ids (then prefill-by-decode on the FPGA) vs
    the int8 KV cache itself (e.g. after a GPU prefill)."""
    return {"token_ids_ms": link_latency_us / 1e3 + tokens * 4 / (link_gbs * 1e9) * 1e3,
            "kv_state_ms": link_latency_us / 1e3 + tokens * arch.kv_bytes_per_token() / (link_gbs * 1e9) * 1e3}


# ----------------------------------------------------------------------------- resources
RESOURCES = ("dsp", "lut", "ff", "bram36", "uram")


def resources(arch: Arch, rows: int, cols: int, pipe: dict, unit: dict, dsp_kind: str, max_context: int) -> dict:
    """DSP / LUT / FF / BRAM36 / URAM of the design: five matrix-vector engines, the attention engine, the
    float32 vector lanes and exp units, the HBM ports, buffers and control."""
    engines = len(arch.engines())
    macs = engines * rows * cols + pipe["attention_macs"]
    per_dsp = unit["macs_per_dsp_dsp58"] if dsp_kind == "dsp58" else unit["macs_per_dsp_dsp48e2"]
    ports = pipe["weight_ports"] + pipe["kv_ports"]
    lanes, exps = pipe["vector_lanes"], pipe["softmax_lanes"] + pipe["vector_lanes"]    # softmax + SiLU exps
    dsp = math.ceil(macs / per_dsp) + lanes * unit["dsp_per_lane"] + exps * unit["dsp_per_exp"]
    lut = macs * unit["lut_per_mac"] + ports * unit["lut_per_port"] + lanes * unit["lut_per_lane"] \
        + exps * unit["lut_per_exp"] + unit["control_lut"]
    ff = macs * unit["ff_per_mac"] + ports * unit["ff_per_port"] + lanes * unit["ff_per_lane"] \
        + exps * unit["ff_per_exp"] + unit["control_ff"]
    h, kv, d = arch.heads, arch.kv_heads, arch.head_dim
    act_bytes = 2 * 4 * (2 * arch.hidden + (h + 2 * kv) * d + 2 * arch.intermediate)   # double-buffered float32
    score_bytes = 4 * h * max_context                                                   # softmax's two passes
    bram = ports * unit["bram_per_port"] + unit["stream_bram"] \
        + math.ceil(act_bytes / unit["vector_bytes_per_bram"]) + math.ceil(score_bytes / unit["vector_bytes_per_bram"])
    return {"dsp": int(dsp), "lut": int(lut), "ff": int(ff), "bram36": int(bram), "uram": 0}


def fit(used: dict, board: Any, margin: dict) -> dict[str, Any]:
    """Per resource: available (after the shell's margin), utilisation, and whether the design fits."""
    fpga = dict(board.get("fpga") or {})
    out: dict[str, Any] = {"fits": True, "unchecked": []}
    for r in RESOURCES:
        total = fpga.get(r)
        if total is None:
            out["unchecked"].append(r)
            out[f"{r}_available"] = None
            out[f"{r}_util"] = None
            continue
        avail = float(total) * (1.0 - float(margin.get(r, 0.0)))
        out[f"{r}_available"] = avail
        out[f"{r}_util"] = used[r] / avail if avail else (0.0 if used[r] == 0 else math.inf)
        if used[r] > avail:
            out["fits"] = False
    return out
