"""The matrix-vector engine's RTL (:mod:`heterospec.hls.mv_rtl`) measured against the HLS models.

Cycles: the engine cycle-simulated on one matrix (random int8 weights and activations, its accumulators checked
against numpy's product) against :func:`heterospec.hls.perf.matrix_cycles` for the same shape, weight beat and
batch. Resources: the engine synthesised with Yosys (:func:`heterospec.hls.rtl.synthesize`, UltraScale+ cells)
against the resource model's ``mv_engines`` block for its MACs (``hls.resources``: MACs per DSP48E2, LUT and FF per
MAC). ``benchmarks/mv_engine_rtl.py`` prints the table; docs/hls.md holds it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from heterospec.hls.mv_rtl import EngineShape, simulate, to_verilog
from heterospec.hls.perf import matrix_cycles

SYNTH_COUNTS = ("dsp", "lut", "ff", "lutram", "bram36")


def model_cycles(shape: EngineShape) -> float:
    """The performance model's cycles for the engine's matrix: int8 weights only (the RTL streams no scales) at
    one beat a cycle."""
    s = shape
    return matrix_cycles(s.o, s.k, s.rows * s.cols, s.batch, s.o * s.k, s.rows_per_beat * s.cols)


def model_resources(shape: EngineShape, unit: dict) -> dict[str, float]:
    """The resource model's ``mv_engines`` block for ``rows x cols`` MACs (DSP48E2: ``macs_per_dsp_dsp48e2`` with
    packing, else one MAC a DSP); it prices no block memory in the engine (buffers are other blocks)."""
    macs = shape.rows * shape.cols
    per_dsp = unit["macs_per_dsp_dsp48e2"] if shape.packed else 1
    return {"dsp": math.ceil(macs / per_dsp), "lut": macs * unit["lut_per_mac"], "ff": macs * unit["ff_per_mac"],
            "lutram": 0.0, "bram36": 0.0}


def measure(shape: EngineShape, unit: dict, workdir: Path | None = None, seed: int = 0, family: str = "xcup") -> dict:
    """One row: the RTL's cycles and exactness beside the model's cycles; with ``workdir``, Yosys's counts for
    ``family`` beside the resource model's (without, the synthesis columns are None)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (shape.o, shape.k), dtype=np.int64)
    x = rng.integers(-128, 128, (shape.batch, shape.k), dtype=np.int64)
    w[0], x[0] = -128, -128                            # the extreme product, every input
    cycles, out = simulate(shape, w, x)
    row = {"batch": shape.batch, "rows": shape.rows, "cols": shape.cols, "k": shape.k, "o": shape.o,
           "beat_bytes": shape.rows_per_beat * shape.cols, "packed": shape.packed, "sums": shape.sums,
           "family": family, "rtl_cycles": cycles,
           "model_cycles": model_cycles(shape), "exact": bool((out == x @ w.T).all())}
    row["cycles_error"] = row["rtl_cycles"] / row["model_cycles"] - 1
    model = model_resources(shape, unit)
    synth = None
    if workdir is not None:
        from heterospec.hls.rtl import synthesize
        synth = synthesize(to_verilog(shape), "mv_engine", Path(workdir) / f"mv_{family}_{shape.sums}_b{shape.batch}",
                           family)
    for r in SYNTH_COUNTS:
        row[f"model_{r}"] = model[r]
        row[f"synth_{r}"] = None if synth is None else synth[r]
    return row
