"""How steady this machine's cores are: fixed pieces of torch work, pinned to a core, timed again and again.

    python benchmarks/machine_jitter.py [--seconds 10] [--cores 0 1] [--window-ms 100]

No trained model, no pipes, no other process of ours, one thread, the same inputs every time, so whatever
varies is the machine (other tenants of the host, its clock), not heterospec. Two kinds of work:

* ``matmul``: the tiny trio's matrix products at a training batch's size (compute-bound, like training);
* ``decode``: a randomly initialised model of the embedded default's draft architecture (the same Qwen2 code)
  prefilling 60 tokens and decoding 13 with its KV cache, as one draft call of the collects does (bound by
  the dispatch of many small operations, like every call the collects time).

Per core and kind it prints the median time of one unit, the ratio of its 90th to its 10th percentile and,
summed into windows of ``--window-ms`` (about one problem of the default run's collects: 90-200 ms), the spread
of the same work measured twice: the mean over pairs of windows of |a - b| / ((a + b) / 2). That is the
definition of ``noise_floor_pct`` in ``replay_validation_summary`` (docs/validation.md), applied to work that never
changes: a collect's floor on this machine at that time comes out near it (docs/validation.md), and a replay
that prices every problem exactly still scores about 0.7 times the floor against one run. The lag-1 autocorrelation says whether consecutive
units ran at the same speed. Nothing else should run meanwhile (the load average is printed before and after).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import torch

from heterospec.replay.validation.noise import pair_spread  # the noise floor's formula


def matmul_unit() -> Callable[[], None]:
    """About 1 ms of matrix products of the trio's widths at a training batch's rows."""
    x, a, b = torch.randn(1280, 64), torch.randn(64, 64), torch.randn(64, 192)

    def unit() -> None:
        for _ in range(2):
            (x @ a) @ b
    return unit


def decode_unit() -> Callable[[], None]:
    """One draft call: a random model of the default draft's architecture prefills 60 tokens, decodes 13."""
    from transformers import Qwen2ForCausalLM

    from heterospec.config import compose_config
    from heterospec.models.generate import _step
    from heterospec.models.tokenizer import build_tokenizer
    from heterospec.models.train import qwen2_config

    tokenizer = build_tokenizer()
    model = Qwen2ForCausalLM(qwen2_config(compose_config([]).models.draft.arch, tokenizer, "draft")).eval()
    prompt = torch.randint(5, len(tokenizer), (1, 60))

    @torch.no_grad()
    def unit() -> None:
        out, cache = _step(model, None, input_ids=prompt)
        for _ in range(13):
            out, cache = _step(model, cache, input_ids=out.logits[:, -1:].argmax(-1))
    return unit


KINDS = {"matmul": matmul_unit, "decode": decode_unit}


def timings(unit: Callable[[], None], core: int, seconds: float) -> list[float]:
    """ms of one unit, back to back for ``seconds`` on ``core`` (after a second of warm-up)."""
    os.sched_setaffinity(0, {core})
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        unit()
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter_ns()
        unit()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def autocorr(values: list[float], lag: int) -> float:
    if len(values) <= lag + 2:
        return float("nan")
    return statistics.correlation(values[:-lag], values[lag:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per core and kind of work (default 10)")
    ap.add_argument("--cores", type=int, nargs="+", default=sorted(os.sched_getaffinity(0)))
    ap.add_argument("--window-ms", type=float, default=100.0, help="one measurement's length (default 100)")
    ap.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'kind':>6}  {'core':>4}  {'units':>6}  {'unit ms':>7}  {'p90/p10':>7}  {'windows':>7}  "
          f"{'spread of two':>13}  {'lag-1 autocorrelation':>21}")
    spreads: dict[str, list[float]] = {}
    for kind in args.kinds:
        unit = KINDS[kind]()
        for core in args.cores:
            t = timings(unit, core, args.seconds)
            per = max(1, round(args.window_ms / statistics.median(t)))
            windows = [sum(t[i:i + per]) for i in range(0, len(t) - per + 1, per)]
            q = statistics.quantiles(t, n=10)
            spreads.setdefault(kind, []).append(pair_spread(windows))
            print(f"{kind:>6}  {core:>4}  {len(t):>6}  {statistics.median(t):>7.3f}  {q[-1] / q[0]:>7.2f}  "
                  f"{len(windows):>7}  {100 * spreads[kind][-1]:>12.1f}%  {autocorr(t, 1):>21.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for kind, s in spreads.items():
        print(f"{kind}: the same {args.window_ms:.0f} ms of work measured twice differs by {100 * min(s):.1f}-"
              f"{100 * max(s):.1f} % here (expect replay_validation_summary's noise floor near this now)")


if __name__ == "__main__":
    main()
