"""DFVG's numbers on the embedded default: τ per strategy, CPU speedup over plain greedy decoding and over
Hugging Face assisted generation (identical output), and the simulated FPGA + GPU design.

    python benchmarks/dfvg_bench.py                      # experiment=dfvg: 100 prompts, 3 timed repetitions
    python benchmarks/dfvg_bench.py --prompts 20 --repeats 1 experiment=dfvg
Needs the run's draft and target (snakemake --cores all --config experiment=dfvg, or
python -m heterospec.models train --role draft experiment=dfvg, then --role target).
"""
import sys

from heterospec import stage
from heterospec.dfvg.stage import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not any(a.startswith("experiment=") for a in args):
        args.append("experiment=dfvg")
    stage.run(main, ["bench", *args])
