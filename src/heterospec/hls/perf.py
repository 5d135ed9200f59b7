"""Performance model of a streaming decoder accelerator on an FPGA with HBM or DDR (one token per pass).

A design is a :class:`Design`: precision per tensor class, ports, engine sizes, stage overlap. Per layer the
activations follow one dependency chain

    RMSNorm -> QKV engine -> RoPE + quantise + KV write -> scores (q.k over the KV cache) -> softmax -> p.v
    -> quantise -> O engine (+ residual) -> RMSNorm -> gate/up (or up) engine -> SiLU * up (or GELU), quantise
    -> down engine (+ residual)

then the final RMSNorm, the LM head and the greedy sampler. A norm or a quantiser needs its whole input vector,
so the chain never overlaps with itself. What a ``dataflow`` design overlaps is the weight stream: weights do
not depend on activations, so the memory ports keep streaming the next engine's weights into per-port prefetch
FIFOs while the chain runs its vector, attention and fill stages. A layer then costs
``max(weight stream + stall, engine compute + chain)`` where the stall is the time the FIFOs are full. A
``serial`` design (``dataflow: false``) adds every stage in series, each engine at
``min(engine MACs, port bytes)`` per cycle. Neither is ever below the roofline: every weight and KV byte of the
token read once at the board's full memory bandwidth.

A pass may carry ``batch`` sequences (a batch-B design point, for the load replay): the weights stream once for
all of them, while each sequence brings its own KV cache, engine MACs, attention and vector work; the chain runs the
sequences' vectors one after another through the same units. ``batch`` 1 is the one-token pass above, unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from heterospec.config.hardware import Device
from heterospec.errors import UserError
from heterospec.precision import KV_BITS, KV_ELEMENT_BYTES, kv_bytes_per_token
from heterospec.shapes import PUBLISHED, published_shape


@dataclass(frozen=True)
class Arch:
    """A decoder's shape (published config numbers suffice; no weights). ``mlp``: swiglu | gelu."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True
    mlp: str = "swiglu"

    @classmethod
    def of(cls, d: dict) -> "Arch":
        a = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        if a.mlp not in ("swiglu", "gelu"):
            raise UserError(f"model shape: mlp={a.mlp!r}; expected swiglu or gelu")
        return a

    @classmethod
    def published(cls, name: str) -> "Arch":
        """A published model's shape (:mod:`heterospec.shapes`) by its Hugging Face id; one line if unknown."""
        s = published_shape(name)
        if s is None:
            raise UserError(f"hls.reference_models: '{name}' has no published shape; known: {sorted(PUBLISHED)}")
        return cls(hidden=s.hidden, layers=s.layers, heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
                   intermediate=s.intermediate, vocab=s.vocab, tied=s.tied)

    def engines(self) -> dict[str, tuple[int, int]]:
        """Matrix-vector engines: name -> (outputs, inputs)."""
        h, kv, d, inter = self.heads, self.kv_heads, self.head_dim, self.intermediate
        up = ("gate_up", 2 * inter) if self.mlp == "swiglu" else ("up", inter)
        return {"qkv": ((h + 2 * kv) * d, self.hidden), "o": (self.hidden, h * d),
                up[0]: (up[1], self.hidden), "down": (self.hidden, inter), "lm_head": (self.vocab, self.hidden)}

    def weight_bytes(self, prec: "Design | None" = None) -> int:
        """Weights plus their scales read per token (embedding row excluded); int8 per-row fp32 by default."""
        p = prec or Design()
        eng = self.engines()
        per_layer = sum(p.matrix_bytes(o, k) for n, (o, k) in eng.items() if n != "lm_head")
        return int(self.layers * per_layer + p.matrix_bytes(*eng["lm_head"]))

    def kv_bytes_per_token(self, prec: "Design | None" = None) -> int:
        """K and V per token of context, all layers, at the design's ``kv_bits`` (:mod:`heterospec.precision`)."""
        p = prec or Design()
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, KV_BITS[p.kv_bits])


@dataclass(frozen=True)
class Design:
    """One accelerator design (``hls.pipeline``): precisions, ports, engines, overlap. Defaults: the serial int8
    design of the paper's measured point."""
    weight_bits: int = 8              # 8 (per-output-row scales) or 4 (group scales)
    group_size: int = 0               # int4: inputs per scale group
    scale_bytes: int = 4              # fp32 (4) or fp16 (2) scales
    kv_bits: int = 8                  # 8 (K scale per token and head) or 16 (fp16, no scales)
    memory: str = "auto"              # hbm | ddr | auto (the board's HBM, else its DDR): the memory the ports use
    weight_ports: int = 16
    kv_ports: int = 4
    ports: str = "dedicated"          # dedicated: weights and KV on their own ports; shared: both on all ports
    port_bits: int = 256
    memory_efficiency: float = 0.9    # achievable fraction of a channel's peak with long bursts
    engines: str = "dedicated"        # dedicated: one matrix-vector engine per matrix; shared: one for all
    dataflow: bool = False            # weight stream overlaps the activation chain (prefetch FIFOs)
    prefetch_words: int = 0           # dataflow: FIFO depth per weight port, in port words
    vector_lanes: int = 16
    attention_macs: int = 64
    softmax_lanes: int = 8
    stage_latency: int = 200          # cycles of fill per dependent stage (HBM latency, pipeline fill, drain)
    token_overhead: int = 1000        # sampler -> input mux -> embedding fetch -> first stage
    crossing_cycles: int = 0          # latency of one SLR crossing (registered both sides), per crossing stream hop
    slr_mv: int = 0                   # placement (multi-SLR boards): the matrix-vector engine(s) and their FIFOs
    slr_attention: int = 1            # attention engine and softmax
    slr_vector: int = 1               # float32 lanes, norms, quantisers, activation buffers
    slr_control: int = 1              # task FSMs, KVMU, sampler, host interface

    @classmethod
    def of(cls, pipe: dict, where: str = "hls.pipeline") -> "Design":
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(pipe) - set(known))
        if unknown:
            raise UserError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
        d = cls(**{k: (bool(v) if k == "dataflow" else v if k in ("memory", "ports", "engines")
                       else float(v) if k == "memory_efficiency" else int(v)) for k, v in pipe.items()})
        d.check(where)
        return d

    def check(self, where: str) -> None:
        choices = {"weight_bits": (8, 4), "kv_bits": (8, 16), "memory": ("hbm", "ddr", "auto"), "scale_bytes": (2, 4),
                   "ports": ("dedicated", "shared"), "engines": ("dedicated", "shared")}
        for k, ok in choices.items():
            if getattr(self, k) not in ok:
                raise UserError(f"{where}: {k}={getattr(self, k)!r}; expected one of {list(ok)}")
        if self.weight_bits == 4 and self.group_size < 1:
            raise UserError(f"{where}: weight_bits=4 needs group_size (inputs per scale group) >= 1")
        if self.weight_ports < 1 or self.kv_ports < (0 if self.ports == "shared" else 1):
            raise UserError(f"{where}: weight_ports={self.weight_ports} and kv_ports={self.kv_ports}: need at least one "
                            f"weight port, and a KV port unless ports: shared")
        if self.dataflow and self.prefetch_words < 1:
            raise UserError(f"{where}: dataflow: true needs prefetch_words (FIFO depth per weight port) >= 1")

    def matrix_bytes(self, o: int, k: int) -> float:
        """Bytes of one o x k weight matrix with its scales."""
        if self.weight_bits == 8:
            return o * k + self.scale_bytes * o
        return o * k / 2 + self.scale_bytes * o * math.ceil(k / self.group_size)


def check_parallelism(arch: Arch, rows: int, cols: int, where: str) -> None:
    """Every engine's outputs must split into ``rows`` and its inputs into ``cols``; one line if not."""
    if rows < 1 or cols < 1:
        raise UserError(f"{where}: rows={rows} and cols={cols} must be positive")
    for name, (o, k) in arch.engines().items():
        if k % cols:
            raise UserError(f"{where}: cols={cols} does not divide the {name} engine's input size {k}")
        if o % rows:
            raise UserError(f"{where}: rows={rows} does not divide the {name} engine's output size {o}")


def memory_kind(board: Device, kind: str) -> str:
    """``hbm`` or ``ddr``; ``auto``: the board's HBM when it has one, else its DDR."""
    if kind == "auto":
        return "hbm" if board.fabric is not None and "hbm" in board.fabric.banks else "ddr"
    return kind


def memory(board: Device, kind: str = "hbm") -> tuple[int, float]:
    """(channels, GB/s each) of a board's HBM or DDR (``auto``: :func:`memory_kind`); one line when it has none."""
    bank = board.bank(memory_kind(board, kind))
    return bank.channels, bank.channel_gbs


def hbm(board: Device) -> tuple[int, float]:
    """(pseudo-channels, GB/s each) of a board's HBM."""
    return memory(board, "hbm")


def port_rate(design: Design, board: Device, clock_mhz: float) -> float:
    """Bytes per kernel cycle one port delivers: its width, capped by its share of the channels' achievable
    bandwidth (more ports than channels share them through the memory interconnect)."""
    channels, ch_gbs = memory(board, design.memory)
    share = min(1.0, channels / (design.weight_ports + design.kv_ports))
    return min(design.port_bits / 8, share * ch_gbs * 1e9 * design.memory_efficiency / (clock_mhz * 1e6))


def matrix_cycles(o: int, k: int, macs: int, batch: int, weight_bytes: float, w_port: float) -> float:
    """Cycles of one ``o x k`` matrix for ``batch`` sequences on an engine of ``macs`` MACs a cycle fed its
    ``weight_bytes`` at ``w_port`` bytes a cycle: the larger of the MAC array's time and the stream's (the serial
    model's term per matrix; the dataflow model sums each side over a layer). The RTL engine
    (:mod:`heterospec.hls.mv_rtl`) measures it."""
    return max(o * k / macs * batch, weight_bytes / w_port)


def token_cycles(arch: Arch, rows: int, cols: int, board: Device, clock_mhz: float, design: Design | dict,
                 context: int, lm_head: bool = True, batch: int = 1) -> dict[str, float]:
    """Cycles of one decoded token at ``context`` tokens already cached, by component (of one pass advancing
    ``batch`` sequences by a token each, every one at ``context``)."""
    d = design if isinstance(design, Design) else Design.of(dict(design))
    wp, kp = d.weight_ports, d.kv_ports
    port = port_rate(d, board, clock_mhz)
    shared = d.ports == "shared"
    w_port = (wp + kp if shared else wp) * port                 # bytes/cycle of weights
    kv_port = (wp + kp if shared else kp) * port                # bytes/cycle of KV
    macs = rows * cols
    lanes, lat = d.vector_lanes, d.stage_latency
    h, kv, hd, H, inter = arch.heads, arch.kv_heads, arch.head_dim, arch.hidden, arch.intermediate
    L = context + 1
    mats = [(n, o, k) for n, (o, k) in arch.engines().items() if lm_head or n != "lm_head"]
    layer = [(o, k) for n, o, k in mats if n != "lm_head"]
    # the activation chain of one layer: vector stages, attention, fills, SLR crossings (engine in/out)
    mlp_act = 2 * inter                                                        # SiLU * up (or GELU), then quantise
    vec = (2 * H + (h + 2 * kv) * hd + h * hd + 2 * H + mlp_act) / lanes * batch
    kvb = arch.kv_bytes_per_token(d) // (arch.layers * kv)                # per token per KV head
    elem = KV_ELEMENT_BYTES[KV_BITS[d.kv_bits]]
    k_bytes, v_bytes = L * kv * (kvb - hd * elem) * batch, L * kv * hd * elem * batch
    att_macs = h * L * hd * batch
    attention = (max(att_macs / d.attention_macs, k_bytes / kv_port) + 2 * h * L * batch / d.softmax_lanes
                 + max(att_macs / d.attention_macs, v_bytes / kv_port))
    fills = (len(layer) + 6) * lat + 2 * len(layer) * d.crossing_cycles
    final = 2 * H / lanes * batch + lat + (len(mats) - len(layer)) * (lat + 2 * d.crossing_cycles)
    c: dict[str, float] = {}
    if not d.dataflow:
        c["weights"] = sum((1 if n == "lm_head" else arch.layers) *
                           matrix_cycles(o, k, macs, batch, d.matrix_bytes(o, k), w_port) for n, o, k in mats)
        c["stage_latency"] = arch.layers * fills + final - 2 * H / lanes * batch
        c["vector"] = arch.layers * vec + 2 * H / lanes * batch
        c["attention"] = arch.layers * attention
    else:
        # weights (and KV on shared ports) stream continuously; the chain waits on the engine and itself
        kv_stream = (k_bytes + v_bytes) if shared else 0.0
        stream = sum(d.matrix_bytes(o, k) for o, k in layer) + kv_stream
        compute = sum(o * k for o, k in layer) / macs * batch
        chain = vec + attention + fills
        buffered = d.prefetch_words * d.port_bits / 8 * wp / w_port        # cycles of stream the FIFOs absorb
        stall = max(0.0, chain - buffered)
        stream_t = stream / w_port + stall
        c["weights"] = arch.layers * stream / w_port
        c["stall"] = arch.layers * stall
        c["chain"] = arch.layers * max(0.0, compute + chain - stream_t)
        head = [(o, k) for n, o, k in mats if n == "lm_head"]
        for o, k in head:                                                   # LM head after the final norm
            c["weights"] += d.matrix_bytes(o, k) / w_port
            c["chain"] += max(0.0, o * k / macs * batch + final - d.matrix_bytes(o, k) / w_port)
        if not head:
            c["chain"] += final
    c["token_overhead"] = d.token_overhead
    return c


def roofline_ms(arch: Arch, board: Device, context: int, design: Design | None = None, batch: int = 1) -> float:
    """Every weight byte and the KV bytes of ``batch`` sequences' token read once at the board's full memory
    bandwidth."""
    d = design or Design()
    channels, ch_gbs = memory(board, d.memory)
    return (arch.weight_bytes(d) + (context + 1) * arch.kv_bytes_per_token(d) * batch) / (channels * ch_gbs * 1e9) \
        * 1e3


def token_ms(arch: Arch, rows: int, cols: int, board: Device, clock_mhz: float, design: Design | dict, context: int,
             lm_head: bool = True, batch: int = 1) -> tuple[float, dict[str, float]]:
    """(ms per pass, cycles by component), never below the roofline; a pass advances ``batch`` sequences a token."""
    d = design if isinstance(design, Design) else Design.of(dict(design))
    c = token_cycles(arch, rows, cols, board, clock_mhz, d, context, lm_head, batch)
    ms = sum(c.values()) / (clock_mhz * 1e3)
    return max(ms, roofline_ms(arch, board, context, d, batch)), c


def migration_ms(arch: Arch, tokens: int, link_gbs: float, link_latency_us: float = 1.0) -> dict[str, float]:
    """Moving ``tokens`` of draft state over the host link: token ids (then prefill-by-decode on the FPGA) vs
    the int8 KV cache itself (e.g. after a GPU prefill)."""
    return {"token_ids_ms": link_latency_us / 1e3 + tokens * 4 / (link_gbs * 1e9) * 1e3,
            "kv_state_ms": link_latency_us / 1e3 + tokens * arch.kv_bytes_per_token() / (link_gbs * 1e9) * 1e3}
