"""Mutation testing of the core modules with mutmut; prints a score per module and every surviving mutant.

    python tests/mutation/run.py [--fresh] [--jobs 2] [--min 90]

mutmut (configured in pyproject.toml's [tool.mutmut]) copies src/ into mutants/, mutates the six modules listed
there and runs, for each mutant, the tests of the selection that reach the mutated function. A mutant is
*killed* when a test fails or times out; *no tests* and *survived* mutants count against the score, except the
mutants docs/testing.md lists as equivalent (no test can tell them from the original; each with its reason):
the score is killed / (mutants - equivalent), printed beside the raw killed / mutants. Results are cached in
mutants/ (only changed functions are re-tested); ``--fresh`` starts over. The exit status is 1 when a module
scores below ``--min`` percent. Not collected by pytest (no test_ prefix).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = {  # name -> path under src/heterospec
    "controller": "reasoning/controller.py",
    "kvcache": "reasoning/kvcache.py",
    "intmath": "quantize/intmath.py",
    "artifact replays": "replay/artifact/replays.py",
    "DFVG verifier": "speculative/verify.py",
    "grader": "grading.py",
}
KILLED = {1, 3, 36, -24, 24, 152, 255}       # a test failed, or the mutant hung past its timeout
DOC = ROOT / "docs" / "testing.md"


def equivalent() -> set[str]:
    """Mutant names listed under docs/testing.md's "Equivalent mutants" heading (one backticked name a line)."""
    text = DOC.read_text() if DOC.is_file() else ""
    section = text.split("## Equivalent mutants", 1)[1].split("\n## ", 1)[0] if "## Equivalent mutants" in text else ""
    return set(re.findall(r"^- `(heterospec\.[^`]+)`", section, flags=re.M))


def outcomes(module: str) -> dict[str, int | None]:
    """Mutant name -> mutmut's exit code for one module (None: not run yet)."""
    meta = ROOT / "mutants" / "src" / "heterospec" / f"{module}.meta"
    if not meta.is_file():
        raise SystemExit(f"mutation: {meta} not found; did mutmut run? (see its output above)")
    return json.loads(meta.read_text())["exit_code_by_key"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh", action="store_true", help="discard mutmut's cached results (mutants/) first")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument("--min", type=float, default=90.0, help="lowest acceptable score per module, percent")
    ap.add_argument("--report", action="store_true", help="only print the scores of the last run in mutants/")
    args = ap.parse_args(argv)
    return report(args) if args.report else run_mutmut(args)


def run_mutmut(args) -> int:
    """Run mutmut over the configured modules, then :func:`report`."""
    if args.fresh:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    mutmut = Path(sys.executable).with_name("mutmut")
    if not mutmut.exists():
        raise SystemExit("mutation: mutmut is not installed in this environment (pip install mutmut==3.8.1)")
    t0 = time.monotonic()
    # one intra-op thread: mutmut forks a process that has used torch, and a forked child waiting on the
    # parent's thread pool hangs (it would count as a timeout, i.e. a kill, whatever the tests say)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run = subprocess.run([str(mutmut), "run", "--max-children", str(args.jobs)], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
        raise SystemExit(f"mutation: mutmut run failed (exit {run.returncode})")
    print(f"mutmut run: {(time.monotonic() - t0) / 60:.1f} min with {args.jobs} jobs")
    return report(args)


def report(args) -> int:
    """Print the score per module from mutants/; 1 when one is below ``args.min``."""
    low, survivors, same = [], [], equivalent()
    print(f"{'module':<18} {'killed':>7} {'mutants':>8} {'raw':>7} {'equivalent':>11} {'score':>7}")
    for name, module in MODULES.items():
        codes = outcomes(module)
        killed = sum(c in KILLED for c in codes.values())
        equiv = sum(k in same and c not in KILLED for k, c in codes.items())
        raw = 100.0 * killed / len(codes) if codes else 100.0
        score = 100.0 * killed / (len(codes) - equiv) if len(codes) > equiv else 100.0
        print(f"{name:<18} {killed:>7} {len(codes):>8} {raw:>6.1f}% {equiv:>11} {score:>6.1f}%")
        survivors += [k for k, c in codes.items() if c not in KILLED and k not in same]
        if score < args.min:
            low.append(name)
    if survivors:
        print(f"surviving, not known equivalent ({len(survivors)}; `mutmut show NAME` prints the change):")
        for k in sorted(survivors):
            print("  " + k)
    if low:
        print(f"below {args.min:g} %: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
