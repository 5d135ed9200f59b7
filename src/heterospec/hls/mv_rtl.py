"""The draft kernel's matrix-vector engine as RTL: one layer matrix's weight stream and MAC array, batch B.

The engine of ``draft_batch.cpp`` (``mv_compute_batch``) in Amaranth, to measure what the HLS models estimate:
cycles per matrix by cycle simulation (Amaranth's simulator) and LUT / FF / DSP / BRAM by synthesis (the KVMU's
Yosys flow, :mod:`heterospec.hls.rtl`).

An ``o x k`` int8 matrix is computed in row blocks of ``rows`` outputs. Its weights arrive on a stream, one beat a
cycle when the memory delivers, each beat ``rows_per_beat`` rows' ``cols`` consecutive inputs (``rows_per_beat x
cols`` bytes: the weight ports' width); a block's beats fill one of two banks of ``rows`` block memories (``cols``
bytes x ``2 k / cols`` words each), so the next block streams in while the MAC array works on this one. The array
multiplies ``rows x cols`` int8 pairs a cycle: for each of the ``batch`` sequences in turn it reads the sequence's
activations chunk by chunk (``cols`` at a time from the activation memory, ``batch x k`` bytes) against the block,
and after the block's last chunk emits the sequence's ``rows`` int32 accumulators. Three register stages: memory
read, products summed per row, accumulate.

Two ways to sum a row's ``cols`` products (``sums``): ``tree``, an adder tree in the fabric per row in one
register stage; ``chain``, a systolic chain of multiply-adds along the columns, column c adding its product to
column c - 1's registered sum (what a DSP's post-adder and cascade do, so synthesis can place every sum in the
DSPs), each column's memories read c cycles after the first (their addresses through a delay line shared by the
rows), so the row's sum leaves the chain ``cols`` cycles after the read. A chain engine holds a bank from the loader until
no column can still read what the loader writes there (``cols - k / cols`` cycles after its last issue, since the
loader refills a bank chunk by chunk as the array read it), and its latency is ``cols + 2`` cycles.

So a block costs ``max(stream beats, batch x k / cols)`` cycles in steady state -- the performance model's
``max(bytes / port bytes per cycle, MACs x batch / MACs per cycle)`` -- plus one block's fill at the start and the
pipeline's latency at the end, which the measurement shows.

Ports (``KC = k / cols``, ``NB = o / rows``):

==============  ==================  ===  ==============================================================
port            width               dir  meaning
==============  ==================  ===  ==============================================================
x_we            1                   in   write one activation chunk (before ``start``)
x_addr          log2(batch x KC)    in   sequence x KC + chunk
x_data          8 x cols            in   ``cols`` int8 activations, input j at bits [8j, 8j + 8)
start           1                   in   begin the matrix (activations loaded)
w_valid         1                   in   a weight beat on ``w_data``
w_data          8 x P x cols        in   rows (block row group g, g P .. g P + P - 1) at one chunk, row p at
                                         bits [8 cols p, ...); beats in block order, row group major
w_ready         1                   out  the engine takes the beat this cycle
out_valid       1                   out  ``out_data`` holds one sequence's accumulators of one block
out_data        32 x rows           out  int32 accumulator of block row r at bits [32 r, 32 r + 32)
out_seq         log2(batch)         out  which sequence
out_block       log2(NB)            out  which row block
done            1                   out  every block of every sequence emitted
==============  ==================  ===  ==============================================================
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from heterospec.errors import UserError

LATENCY = 3        # cycles from a chunk's read to its accumulate (memory read, row sums, accumulate): sums="tree"
SUMS = ("tree", "chain")
PACK_SHIFT = 18    # INT8 packing on a DSP48E2 (27 x 18 multiplier): the second weight 18 bits below the first


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


@dataclass(frozen=True)
class EngineShape:
    """One matrix on one engine: ``o x k`` int8 weights, ``rows x cols`` MACs, ``batch`` sequences, weight beats of
    ``rows_per_beat`` rows' chunks; ``packed``: two rows' products per multiplier (INT8 packing, AMD WP486), as the
    resource model's ``macs_per_dsp_dsp48e2`` = 2 assumes; ``sums``: a row's products summed by an adder tree or a
    multiply-add chain (module docstring)."""
    rows: int
    cols: int
    k: int
    o: int
    batch: int = 1
    rows_per_beat: int = 1
    packed: bool = False
    sums: str = "tree"

    def __post_init__(self):
        for name in ("rows", "cols", "k", "o", "batch", "rows_per_beat"):
            if getattr(self, name) < 1:
                raise UserError(f"mv engine: {name}={getattr(self, name)}: expected at least 1")
        if self.k % self.cols or self.o % self.rows or self.rows % self.rows_per_beat:
            raise UserError(f"mv engine: cols={self.cols} must divide k={self.k}, rows={self.rows} o={self.o}, "
                            f"rows_per_beat={self.rows_per_beat} rows")
        if self.packed and self.rows % 2:
            raise UserError(f"mv engine: packed pairs rows; rows={self.rows} is odd")
        if self.sums not in SUMS:
            raise UserError(f"mv engine: sums={self.sums!r}: expected one of {', '.join(SUMS)}")
        if self.packed and self.sums == "chain":
            raise UserError("mv engine: sums='chain' sums one product a column; packed=True is for sums='tree'")

    @property
    def chunks(self) -> int:
        return self.k // self.cols

    @property
    def blocks(self) -> int:
        return self.o // self.rows

    @property
    def beats_per_block(self) -> int:
        return self.rows // self.rows_per_beat * self.chunks

    @property
    def bank_hold(self) -> int:
        """Cycles a chain engine keeps a bank after the array's last issue from it (module docstring)."""
        return max(0, self.cols - self.chunks) if self.sums == "chain" else 0

    @property
    def latency(self) -> int:
        """Cycles from a chunk's issue to its accumulate: memory read, sums, accumulate."""
        return LATENCY if self.sums == "tree" else self.cols + 2


class MvEngine(wiring.Component):
    """The engine (module docstring) for one :class:`EngineShape`."""

    def __init__(self, shape: EngineShape):
        self.shape = s = shape
        super().__init__({
            "x_we": In(1), "x_addr": In(_bits(s.batch * s.chunks)), "x_data": In(8 * s.cols), "start": In(1),
            "w_valid": In(1), "w_data": In(8 * s.rows_per_beat * s.cols), "w_ready": Out(1),
            "out_valid": Out(1), "out_data": Out(32 * s.rows), "out_seq": Out(_bits(s.batch)),
            "out_block": Out(_bits(s.blocks)), "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.shape
        R, C, KC, NB, P, B = s.rows, s.cols, s.chunks, s.blocks, s.rows_per_beat, s.batch
        groups = R // P
        chain = s.sums == "chain"

        # memories: activations (batch x KC chunks) and two banks of a block's weights per row; a chain engine
        # holds them a column (one byte wide) apiece, each column read on its own cycle
        def memory(name, depth, width):
            mem = Memory(shape=unsigned(width), depth=depth, init=[])
            m.submodules[name] = mem
            return mem.write_port(), mem.read_port()
        if chain:
            xports = [memory(f"xmem_c{c}", B * KC, 8) for c in range(C)]
            wports = [[memory(f"wmem{r}_c{c}", 2 * KC, 8) for c in range(C)] for r in range(R)]
        else:
            xports = [memory("xmem", B * KC, 8 * C)]
            wports = [[memory(f"wmem{r}", 2 * KC, 8 * C)] for r in range(R)]
        lane = 8 * C // len(xports)                        # bits a memory holds of a chunk: all of it, or a byte
        for c, (xw, _) in enumerate(xports):
            m.d.comb += [xw.en.eq(self.x_we), xw.addr.eq(self.x_addr), xw.data.eq(self.x_data[lane * c:lane * (c + 1)])]

        running = Signal()
        full = Signal(2)                                   # bank b holds a block the array has not finished
        # loader: block, beat within it (row group major, then chunk)
        ld_block, ld_group, ld_chunk = Signal(_bits(NB + 1)), Signal(_bits(groups)), Signal(_bits(KC))
        ld_bank = ld_block[0]
        held = Signal(2)                                   # bank b read by the array's lagging columns (chain)
        m.d.comb += self.w_ready.eq(running & (ld_block < NB) & ~(full | held).bit_select(ld_bank, 1))
        take = self.w_valid & self.w_ready
        for r, row in enumerate(wports):
            g, p = divmod(r, P)
            for c, (wp, _) in enumerate(row):
                base = 8 * C * p + lane * c
                m.d.comb += [wp.en.eq(take & (ld_group == g)), wp.addr.eq(ld_bank * KC + ld_chunk),
                             wp.data.eq(self.w_data[base:base + lane])]
        set_full = Signal(2)
        clear_full = Signal(2)
        with m.If(take), _carry(m, ld_chunk, KC, ld_group, groups):         # a block loaded
            m.d.sync += ld_block.eq(ld_block + 1)
            m.d.comb += set_full.eq(Mux(ld_bank, 2, 1))

        # array: block, sequence, chunk
        c_block, c_seq, c_chunk = Signal(_bits(NB + 1)), Signal(_bits(B)), Signal(_bits(KC))
        c_bank = c_block[0]
        issue = running & (c_block < NB) & full.bit_select(c_bank, 1)
        w_addr = Signal(_bits(2 * KC))
        x_addr = Signal(_bits(B * KC))
        m.d.comb += [w_addr.eq(c_bank * KC + c_chunk), x_addr.eq(c_seq * KC + c_chunk)]
        for c in range(len(xports)):                       # column c reads c cycles after the issue (chain)
            wa, xa = _delay_line(m, w_addr, c, f"w_addr_c{c}")[-1], _delay_line(m, x_addr, c, f"x_addr_c{c}")[-1]
            m.d.comb += xports[c][1].addr.eq(xa)
            for row in wports:
                m.d.comb += row[c][1].addr.eq(wa)
        with m.If(issue), _carry(m, c_chunk, KC, c_seq, B):                # a block done for every sequence
            m.d.sync += c_block.eq(c_block + 1)
            m.d.comb += clear_full.eq(Mux(c_bank, 2, 1))
        m.d.sync += full.eq((full | set_full) & ~clear_full)
        # a chain engine's bank is held from the loader until no column will read a chunk the loader writes: the
        # loader refills a bank chunk by chunk in the order the array read it, so for the last column's lag beyond
        # the block's chunks
        release = _delay_line(m, clear_full, s.bank_hold, "release")[-1]
        m.d.sync += held.eq((held | clear_full) & ~release)

        # the chunk's control to where its sums are accumulated
        # (stage i of the line: the chunk issued i cycles ago; bit 0 its valid)
        ctl_line = _delay_line(m, Cat(issue, c_chunk == 0, c_chunk == KC - 1, c_seq, c_block), s.latency - 1, "ctl")
        ctl_acc = ctl_line[-1]
        in_flight = Cat(*(stage[0] for stage in ctl_line[1:])).any()
        if chain:
            x = [xports[c][1].data.as_signed() for c in range(C)]
            w = [[row[c][1].data.as_signed() for c in range(C)] for row in wports]
            sums = []
            for r in range(R):                             # column c adds its product to column c - 1's sum
                prev = 0
                for c in range(C):
                    acc_c = Signal(signed(32), name=f"chain{r}_{c}", reset_less=True)
                    m.d.sync += acc_c.eq(prev + x[c] * w[r][c])
                    prev = acc_c
                sums.append(prev)
        else:
            # stage 1: memories read (data valid the cycle after the address); stage 2: per row, the sum of cols
            # int8 products
            sums = [Signal(signed(32), name=f"dot{r}") for r in range(R)]
            x = [xports[0][1].data[8 * c:8 * c + 8].as_signed() for c in range(C)]
            w = [[row[0][1].data[8 * c:8 * c + 8].as_signed() for c in range(C)] for row in wports]
            if not s.packed:
                for r in range(R):
                    m.d.sync += sums[r].eq(sum(x[c] * w[r][c] for c in range(C)))
            else:            # two rows' weights in one multiplier: (w_a 2^18 + w_b) x = w_a x 2^18 + w_b x
                for r in range(0, R, 2):
                    hi, lo = [], []
                    for c in range(C):
                        prod = Signal(signed(34), name=f"pair{r}_{c}")
                        m.d.comb += prod.eq((w[r][c] * (1 << PACK_SHIFT) + w[r + 1][c]) * x[c])
                        low = prod[:PACK_SHIFT].as_signed()      # |w_b x| <= 2^14: exact in 18 signed bits
                        lo.append(low)
                        hi.append((prod - low) >> PACK_SHIFT)
                    m.d.sync += [sums[r].eq(sum(hi)), sums[r + 1].eq(sum(lo))]
        # accumulate; a block's last chunk emits the sequence's accumulators
        v_acc, first_acc, last_acc = ctl_acc[0], ctl_acc[1], ctl_acc[2]
        seq_acc = ctl_acc[3:3 + len(c_seq)]
        blk_acc = ctl_acc[3 + len(c_seq):]
        accs = [Signal(signed(32), name=f"acc{r}") for r in range(R)]
        out_v = Signal()
        m.d.sync += out_v.eq(v_acc & last_acc)
        with m.If(v_acc):
            for r in range(R):
                m.d.sync += accs[r].eq(sums[r] + Mux(first_acc, 0, accs[r]))
        m.d.sync += [self.out_seq.eq(seq_acc), self.out_block.eq(blk_acc)]
        m.d.comb += [self.out_valid.eq(out_v), self.out_data.eq(Cat(*accs))]

        drained = Signal()
        m.d.comb += drained.eq((c_block == NB) & ~in_flight & ~out_v)
        with m.If(self.start):
            m.d.sync += [running.eq(1), ld_block.eq(0), ld_group.eq(0), ld_chunk.eq(0), c_block.eq(0), c_seq.eq(0),
                         c_chunk.eq(0), full.eq(0)]
        m.d.comb += self.done.eq(running & drained)
        return m


def _delay_line(m: Module, sig, n: int, name: str) -> list[Signal]:
    """A register line of ``n`` stages: stage i is ``sig`` i cycles late (stage 0: ``sig`` itself)."""
    line = [Signal(len(sig), name=f"{name}_d0")]
    m.d.comb += line[0].eq(sig)
    for i in range(1, n + 1):
        line.append(Signal(len(sig), name=f"{name}_d{i}"))
        m.d.sync += line[i].eq(line[i - 1])
    return line


@contextmanager
def _carry(m: Module, inner: Signal, n_inner: int, outer: Signal, n_outer: int):
    """Advance the two-digit counter (``outer``, ``inner``) by one; the body runs (in the domain of the caller's
    statements) when it wraps, i.e. in the cycle the last (outer, inner) pair is taken."""
    with m.If(inner == n_inner - 1):
        m.d.sync += inner.eq(0)
        with m.If(outer == n_outer - 1):
            m.d.sync += outer.eq(0)
            yield
        with m.Else():
            m.d.sync += outer.eq(outer + 1)
    with m.Else():
        m.d.sync += inner.eq(inner + 1)


def weight_beats(w: np.ndarray, shape: EngineShape) -> list[int]:
    """The stream of an ``o x k`` int8 matrix in the engine's beat order, each beat as an integer (row p of the beat
    at bits [8 cols p, ...), input j of a row at bits [8 j, 8 j + 8))."""
    s = shape
    beats = []
    for b in range(s.blocks):
        for g in range(s.rows // s.rows_per_beat):
            for kc in range(s.chunks):
                rows = w[b * s.rows + g * s.rows_per_beat: b * s.rows + (g + 1) * s.rows_per_beat,
                         kc * s.cols:(kc + 1) * s.cols]
                beats.append(_pack(rows.reshape(-1)))
    return beats


def _pack(values: np.ndarray) -> int:
    out = 0
    for i, v in enumerate(values.tolist()):
        out |= (int(v) & 0xFF) << (8 * i)
    return out


def _unpack32(word: int, n: int) -> list[int]:
    out = []
    for i in range(n):
        v = (word >> (32 * i)) & 0xFFFFFFFF
        out.append(v - (1 << 32) if v & 0x80000000 else v)
    return out


def simulate(shape: EngineShape, w: np.ndarray, x: np.ndarray, stall_every: int = 0, max_cycles: int = 1_000_000):
    """Run one matrix through the RTL: activations ``x`` [batch, k] loaded, then weights ``w`` [o, k] streamed (a
    beat every cycle the engine is ready; with ``stall_every`` n the memory delivers nothing every n-th cycle).
    Returns (cycles from start to done, accumulators [batch, o] as the engine emitted them)."""
    from amaranth.sim import Simulator

    s = shape
    dut = MvEngine(s)
    beats = weight_beats(w, s)
    out = np.zeros((s.batch, s.o), dtype=np.int64)
    result = {}

    async def bench(ctx):
        for q in range(s.batch):
            for kc in range(s.chunks):
                ctx.set(dut.x_we, 1)
                ctx.set(dut.x_addr, q * s.chunks + kc)
                ctx.set(dut.x_data, _pack(x[q, kc * s.cols:(kc + 1) * s.cols]))
                await ctx.tick()
        ctx.set(dut.x_we, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        i, cycle = 0, 0
        while cycle < max_cycles:
            deliver = i < len(beats) and not (stall_every and cycle % stall_every == stall_every - 1)
            ctx.set(dut.w_valid, int(deliver))
            ctx.set(dut.w_data, beats[i] if deliver else 0)
            if deliver and ctx.get(dut.w_ready):
                i += 1
            if ctx.get(dut.out_valid):
                q, b = ctx.get(dut.out_seq), ctx.get(dut.out_block)
                out[q, b * s.rows:(b + 1) * s.rows] = _unpack32(ctx.get(dut.out_data), s.rows)
            if ctx.get(dut.done):
                break
            await ctx.tick()
            cycle += 1
        result["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    if result.get("cycles", max_cycles) >= max_cycles:
        raise UserError(f"mv engine {s}: not done after {max_cycles} cycles")
    return result["cycles"], out


def to_verilog(shape: EngineShape, name: str = "mv_engine") -> str:
    """The engine as Verilog (Amaranth's backend through Yosys)."""
    from amaranth.back import verilog
    return verilog.convert(MvEngine(shape), name=name)
