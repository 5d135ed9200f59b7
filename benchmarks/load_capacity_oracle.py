"""The capacity search against an analytic queue: one server of D = 37 ms (an M/D/1 queue: Poisson arrivals, the
target alone writing 37 tokens at 1 ms each), an SLO of 4 D on the P99. The analytic capacity is the rate where
the M/D/1 wait (Erlang's formula) is within 3 D with probability 0.99: 12.51 requests/s. Prints the search's
capacity under each of ``--seeds`` arrival seeds (one seed per search) at ``--requests`` counted requests per
point, its error, and the median's.

    python benchmarks/load_capacity_oracle.py [--seeds 5] [--requests 20000] [--steps 6]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000, help="load.max_requests: counted before a rate meets")
    ap.add_argument("--steps", type=int, default=6, help="load.search_steps: bisections")
    a = ap.parse_args()
    from test_capacity_search import capacity, job, largest, md1_wait_cdf, writes
    from heterospec.text_table import format_table
    D = 37
    want = largest(lambda rho: md1_wait_cdf(rho, 3.0) >= 0.99, 0.01, 0.99) / (D / 1e3)
    rows = []
    for seed in range(a.seeds):
        t0 = time.process_time()
        row = capacity(job([writes(D)]), 4 * D / 1e3, f"load.max_requests={a.requests}", "load.seeds=1",
                       f"load.seed={seed}", f"load.search_steps={a.steps}")
        rows.append((seed, row["capacity_rps"], row["capacity_rps"] / want - 1, row["p99_s"], row["evaluations"],
                     time.process_time() - t0))
    print(format_table(["seed", "capacity_rps", "error", "p99_s", "points", "cpu_s"], rows))
    med = statistics.median(r[1] for r in rows)
    print(f"analytic {want:.3f} req/s; median of {a.seeds} seeds {med:.3f} ({med / want - 1:+.1%}); each seed within "
          f"{max(abs(r[2]) for r in rows):.1%}; {a.requests} counted requests per point, {a.steps} bisections")


if __name__ == "__main__":
    main()
