"""The replay's price of token-level rounds against DFVG's measured rounds on the same pair (issue 23, part 6).

    python -m heterospec.replay validate                  # fits the measured profile, rounds included (brsd_sd)
    python -m heterospec.dfvg collect --method chain dfvg.prompts=40     # -> results/default+<hash>/dfvg/
    python benchmarks/rounds_check.py results/default results/default+<hash>

The measured profile's ``draft round`` and ``target verify`` fits come from the collect stage's speculative target
writes (``collect_rounds``, trace sets such as ``brsd_sd``: steps of 12-13 tokens deep into a problem). DFVG's
rounds (``dfvg/<strategy>/rounds.parquet``) come from whole generations from the prompt, with the same
``SpeculativeDecoder``. Per strategy the script prints each round's measured draft and verify time beside the
profile's price of it (at its own tokens and context), and each generation's total beside what the replay's
``token_speculation`` mechanism prices for it (``rounds_ms``: ceil(g / tau) rounds at the generation's own tau).
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from heterospec.replay.profiles.measured import MeasuredProfile, read_fit
from heterospec.replay.schedules.mechanisms.token_speculation import rounds_ms
from heterospec.replay.simulator.system import Ctx, SystemParams, SpeculationParams
from heterospec.replay.traces.reader import find_rounds
from heterospec.text_table import format_table


def main(run: Path, dfvg_run: Path) -> None:
    fit = read_fit(run / "replay" / "measured_fit.parquet")
    if not {("draft", "round"), ("target", "verify")} <= {(r["role"], r["phase"]) for r in fit.to_pylist()}:
        sys.exit(f"{run}/replay/measured_fit.parquet has no round fits: collect a trace set with "
                 f"algorithm.target_decoding (e.g. brsd_sd), then run python -m heterospec.replay validate")
    prof = MeasuredProfile.from_fit(fit)
    ctx = Ctx(prof, SystemParams("same machine", {}, {}, {}, float("inf"), 0.0))   # no link: one process
    out = []
    for path in sorted(dfvg_run.glob("dfvg/*/rounds.parquet")):
        rows = pq.read_table(path).to_pylist()
        if not rows:
            continue
        gens = defaultdict(list)
        for r in rows:
            gens[r["prompt_id"]].append(r)
        meas_d = sum(r["draft_ms"] for r in rows) / len(rows)
        meas_v = sum(r["verify_ms"] for r in rows) / len(rows)
        pred_d = sum(prof.draft_round(r["kv_target"], r["drafted"]) for r in rows) / len(rows)
        pred_v = sum(prof.target_verify(r["kv_target"], r["nodes"] + 1) for r in rows) / len(rows)
        errs = []
        for rs in gens.values():
            rs.sort(key=lambda r: r["round"])
            g = sum(r["accepted"] + 1 for r in rs)
            k = max(1, round(sum(r["drafted"] for r in rs) / len(rs)))
            # this generation's own tau: ceil(g / tau) is its recorded number of rounds (nudged above float error)
            spec = SpeculationParams(min(k + 1.0, g / len(rs) * (1 + 1e-9)), k)
            d, t = rounds_ms(prof, ctx, spec, rs[0]["kv_target"], g)
            m = sum(r["draft_ms"] + r["verify_ms"] for r in rs)
            errs.append((d + t - m) / m)
        out.append((rows[0]["strategy"], len(gens), len(rows), meas_d, pred_d, meas_v, pred_v,
                    100 * sum(errs) / len(errs), 100 * sum(abs(e) for e in errs) / len(errs)))
    if not out:
        sys.exit(f"{dfvg_run}/dfvg: no DFVG rounds; run python -m heterospec.dfvg collect --method chain first")
    print(format_table(["strategy", "generations", "rounds", "draft_ms_measured", "draft_ms_priced",
                        "verify_ms_measured", "verify_ms_priced", "generation_bias_pct", "generation_mae_pct"], out))
    # what the fit saw: its rounds' mean (what the fit matches: a replay adds times up) and median (the typical round)
    fitted = [r for (_, ex), (rs, _) in find_rounds(run / "collect").items() if ex == "sequential" for r in rs]
    print(format_table(["fitted_rounds", "draft_ms_mean", "draft_ms_median", "verify_ms_mean", "verify_ms_median"],
                       [(len(fitted), *(f(sorted(r[c] for r in fitted)) for c in ("draft_ms", "verify_ms")
                                        for f in (lambda v: sum(v) / len(v), lambda v: v[len(v) // 2])))]))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python benchmarks/rounds_check.py results/<run with the fit> [results/<run with DFVG rounds>]")
    main(Path(sys.argv[1]), Path(sys.argv[-1]))
