"""The KV-cache management unit (KVMU) as RTL: three pointers, four modes, and the draft's input multiplexer.

Pointers into the draft's KV cache (slots, one per token), with ``valid <= current <= ahead <= 2^W - 1``:

* ``valid``   -- slots [0, valid) are committed (prompt, accepted steps, tokens the host wrote);
* ``current`` -- slots [valid, current) hold the step under verification (the PRM is scoring it);
* ``ahead``   -- the next slot to write; [current, ahead) hold the step-ahead speculation.

Modes, one command per cycle when ``cmd_valid`` is high (the pointers change at the clock edge):

* ``INIT`` (0)     -- initialisation: the host's token (prompt, target rewrite) is written at ``ahead`` and
                      committed: valid = current = ahead = ahead + 1. With ``reinit`` the unit first truncates to
                      ``base`` (a re-initialisation after a backtrack; ``base`` must not exceed ``valid``).
* ``SPEC`` (1)     -- speculation: the local sampler's token is written at ``ahead``; ahead += 1. With ``mark``
                      the token closes a step: current = ahead + 1 (the step goes to the PRM).
* ``ACCEPT`` (2)   -- the step under verification is accepted: valid = current.
* ``ROLLBACK`` (3) -- it is rejected: current = ahead = valid (step and step-ahead tokens discarded).

Port list (W = ``pointer_bits``, T = ``token_bits``); every output is combinational from the inputs and the
registers except the three pointers, which are the registers themselves:

=================  =====  ===  =====================================================================
port               width  dir  meaning
=================  =====  ===  =====================================================================
cmd_valid          1      in   a command this cycle
mode               2      in   INIT / SPEC / ACCEPT / ROLLBACK
mark               1      in   SPEC: this token ends a step
reinit             1      in   INIT: truncate to ``base`` before writing
base               W      in   INIT+reinit: the slot to restart from (<= valid)
host_token         T      in   token from the host (INIT)
sampler_token      T      in   token from the draft's own greedy sampler (SPEC)
token              T      out  the input multiplexer's output: host_token in INIT, sampler_token otherwise
sel_host           1      out  the multiplexer's select (1 = host)
wr_en              1      out  the token is written to the KV cache this cycle (a legal INIT or SPEC)
wr_addr            W      out  the KV slot it is written to
attn_len           W+1    out  KV entries its attention reads (wr_addr + 1)
error              1      out  the command is illegal and ignored (cache full, or base > valid)
valid/current/ahead W     out  the pointer registers
=================  =====  ===  =====================================================================

:class:`KvmuModel` is the same unit in Python, the golden model of the RTL tests and of the C model's KVMU.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

INIT, SPEC, ACCEPT, ROLLBACK = 0, 1, 2, 3
MODES = {"init": INIT, "spec": SPEC, "accept": ACCEPT, "rollback": ROLLBACK}


class Kvmu(wiring.Component):
    """The KVMU (module docstring); ``pointer_bits`` sets the cache capacity (2^W - 1 slots)."""

    def __init__(self, pointer_bits: int = 16, token_bits: int = 18):
        self.pointer_bits, self.token_bits = pointer_bits, token_bits
        W, T = pointer_bits, token_bits
        super().__init__({
            "cmd_valid": In(1), "mode": In(2), "mark": In(1), "reinit": In(1), "base": In(W),
            "host_token": In(T), "sampler_token": In(T),
            "token": Out(T), "sel_host": Out(1), "wr_en": Out(1), "wr_addr": Out(W), "attn_len": Out(W + 1),
            "error": Out(1), "valid": Out(W), "current": Out(W), "ahead": Out(W),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.pointer_bits
        cap = (1 << W) - 1
        valid, current, ahead = Signal(W), Signal(W), Signal(W)
        m.d.comb += [self.valid.eq(valid), self.current.eq(current), self.ahead.eq(ahead)]

        is_init = self.mode == INIT
        is_spec = self.mode == SPEC
        start = Mux(is_init & self.reinit, self.base, ahead)       # where this command's token goes
        bad_base = is_init & self.reinit & (self.base > valid)
        full = start == cap
        writes = self.cmd_valid & (is_init | is_spec)
        illegal = self.cmd_valid & (bad_base | ((is_init | is_spec) & full))
        nxt = Signal(W)
        m.d.comb += [
            nxt.eq(start + 1),
            self.sel_host.eq(is_init),
            self.token.eq(Mux(is_init, self.host_token, self.sampler_token)),
            self.wr_addr.eq(start),
            self.attn_len.eq(start + 1),
            self.wr_en.eq(writes & ~illegal),
            self.error.eq(illegal),
        ]
        with m.If(self.cmd_valid & ~illegal):
            with m.Switch(self.mode):
                with m.Case(INIT):
                    m.d.sync += [valid.eq(nxt), current.eq(nxt), ahead.eq(nxt)]
                with m.Case(SPEC):
                    m.d.sync += ahead.eq(nxt)
                    with m.If(self.mark):
                        m.d.sync += current.eq(nxt)
                with m.Case(ACCEPT):
                    m.d.sync += valid.eq(current)
                with m.Case(ROLLBACK):
                    m.d.sync += [current.eq(valid), ahead.eq(valid)]
        return m


@dataclass
class KvmuModel:
    """The KVMU in Python: ``step`` returns the outputs of one command and updates the pointers."""
    pointer_bits: int = 16
    valid: int = 0
    current: int = 0
    ahead: int = 0

    def step(self, mode: int, host_token: int = 0, sampler_token: int = 0, mark: bool = False,
             reinit: bool = False, base: int = 0) -> dict:
        cap = (1 << self.pointer_bits) - 1
        start = base if (mode == INIT and reinit) else self.ahead
        writes = mode in (INIT, SPEC)
        illegal = (mode == INIT and reinit and base > self.valid) or (writes and start == cap)
        out = {"token": host_token if mode == INIT else sampler_token, "sel_host": int(mode == INIT),
               "wr_en": int(writes and not illegal), "wr_addr": start, "attn_len": start + 1, "error": int(illegal)}
        if not illegal:
            if mode == INIT:
                self.valid = self.current = self.ahead = start + 1
            elif mode == SPEC:
                self.ahead = start + 1
                if mark:
                    self.current = start + 1
            elif mode == ACCEPT:
                self.valid = self.current
            elif mode == ROLLBACK:
                self.current = self.ahead = self.valid
        return out


def to_verilog(pointer_bits: int = 16, token_bits: int = 18, name: str = "kvmu") -> str:
    """The KVMU as Verilog (via Amaranth's RTLIL backend and Yosys)."""
    from amaranth.back import verilog

    top = Kvmu(pointer_bits, token_bits)
    return verilog.convert(top, name=name)
