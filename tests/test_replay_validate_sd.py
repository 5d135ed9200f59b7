"""``replay validate`` on a collect whose target writes speculate (issue 23, part 6), end to end on the ci trio:
real collects (RSD plain, the variant ``brsd_sd``: BRSD whose target writes speculate with ``chain``), real rounds, the
measured fit, the replay with the ``*_sd`` schedules."""
from __future__ import annotations

from heterospec.collect import merge, run_shard
from heterospec.replay.grid import simulate as grid_simulate
from heterospec.replay.grid.simulate import simulate
from heterospec.config import compose_config
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.replay.profiles.measured import read_fit
from heterospec.replay.traces.call_times import TraceTimes
from heterospec.store import read_parquet

# a threshold no ci step reaches: every step is rewritten by the target, so BRSD's target writes speculate often
BASE = ["experiment=ci", "collect.limit=3", "algorithm.threshold=0.99", "algorithm.backtrack_threshold=0.99"]


def test_validate_prices_speculative_writes_as_rounds_and_fits_plain_calls_without_them(trained_models,
                                                                                        monkeypatch, capsys):
    from heterospec.replay.validation.against_collect import validate
    cfg, paths = trained_models.run(BASE)
    monkeypatch.chdir(paths.root.parent.parent)
    for alg in ("rsd", "brsd_sd"):
        run_shard(compose_config(BASE), paths, BASE, "synthetic", alg, "sequential", "0of1", processes=False)
        merge(paths, "synthetic", alg, "sequential", 1)

    def table(alg, t):
        return read_parquet(paths.collect_table("synthetic", alg, "sequential", t), COLLECT_TABLES[t]).to_pylist()
    rounds = table("brsd_sd", "rounds")
    assert rounds and not table("rsd", "rounds")
    replayed, alone = [], []

    def spy(probs, systems, schedules, profile, *args, speculation=None, **kw):
        if isinstance(profile, TraceTimes):   # the schedule-only check, one problem at a time
            alone.extend(p.trace_set for p in probs)
        else:
            replayed.append(({p.trace_set for p in probs}, [s.name for s in schedules], speculation))
        return simulate(probs, systems, schedules, profile, *args, speculation=speculation, **kw)
    monkeypatch.setattr(grid_simulate, "simulate", spy)
    rows = validate(compose_config(BASE), paths, BASE).to_pylist()
    # brsd_sd's problems replayed with the token_speculation schedule at its own rounds' tau; RSD's plainly
    assert [(ts, names, spec is not None) for ts, names, spec in replayed] == \
        [({"brsd_sd"}, ["sequential_sd"], True), ({"rsd"}, ["sequential"], False)]
    assert replayed[0][2].strategy == "chain" and 1 <= replayed[0][2].tau <= replayed[0][2].draft_len + 1
    assert alone == ["rsd"] * 3          # rounds are priced by the fit: no schedule-only check for brsd_sd
    assert "brsd_sd: token-level rounds (chain)" in capsys.readouterr().out
    fit = {(r["role"], r["phase"]): r for r in read_fit(paths.replay_fit).to_pylist()}
    # the plain target decode is fitted on RSD's calls only; the rounds on brsd_sd's rounds
    rsd_decodes = [c for c in table("rsd", "calls") if c["role"] == "target" and c["phase"] == "decode"]
    assert fit["target", "decode"]["calls"] == len(rsd_decodes)
    assert fit["draft", "round"]["calls"] == fit["target", "verify"]["calls"] == len(rounds)
    brsd = [r for r in rows if r["trace_set"] == "brsd_sd" and r["executor"] == "sequential"]
    assert len(brsd) == 3 and all(r["predicted_ms"] > 0 and r["measured_ms"] > 0 for r in brsd)
