"""The target writing its steps by token-level speculation (issue 23), on the ci trio: under greedy decoding RSD and
BRSD take exactly the steps plain target writes take (the oracle: the same session with ``target_decoding: plain``),
for every strategy and both executors, the step-ahead prefetch plain or speculative; every speculative target call
leaves its rounds in ``collect_rounds/v1``; ``target_sd`` writes target-only's outputs; bad input is one line before
any model loads."""
from __future__ import annotations

import sys

import pytest

from conftest import run_cmd
from heterospec.collect import merge, run_shard
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.evaluate import EVALUATION_SCHEMA, evaluate
from heterospec.reasoning.session import Session
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.speculative.strategies import STRATEGIES
from heterospec.store import read_parquet
from heterospec.store.catalog import build, query
from heterospec.tasks import load_problems
from test_reasoning import OVERRIDES, trio  # noqa: F401  (the module's trio: threshold at its PRM's median)

PROBLEMS = 4
TIMING = ("latency_s",)     # what may differ between two runs of the same reasoning


def _overrides(cfg, *more: str) -> list[str]:
    thr = cfg.algorithm.threshold
    return OVERRIDES + [f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}", *more]


def _reason(cfg, checkpoints, alg, executor: str) -> list[dict]:
    """Each problem's rows, the timings left out: the problem row, its steps, its calls' (role, step, outcome)."""
    out = []
    with Session(cfg, checkpoints, processes=False, alg=alg) as s:
        for p in load_problems(cfg.dataset, PROBLEMS):
            rows = s.run(p, alg, executor)
            out.append(dict(problem={k: v for k, v in rows["problems"][0].items() if k not in TIMING},
                            steps=rows["steps"], rounds=rows["rounds"],
                            calls=[(c["role"], c["step_idx"], c["step"], c["attempt"], c["phase"], c["outcome"],
                                    c["tokens_out"], c["start_ns"]) for c in rows["calls"]]))
    return out


def _same_reasoning(got: list[dict], want: list[dict]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g["problem"] == w["problem"]
        assert g["steps"] == w["steps"]
        # the same calls with the same outcomes and tokens (a speculative call feeds other counts of tokens)
        assert [c[:-1] for c in g["calls"]] == [c[:-1] for c in w["calls"]]


@pytest.fixture(scope="module")
def plain(trio):  # noqa: F811
    """The oracle: plain target writes, under each executor."""
    cfg, _, checkpoints = trio
    return {ex: _reason(cfg, checkpoints, cfg.algorithm, ex) for ex in ("sequential", "step_ahead")}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("executor, prefetch", [("sequential", False), ("step_ahead", False), ("step_ahead", True)],
                         ids=["sequential", "step_ahead", "step_ahead_speculative_prefetch"])
def test_speculative_target_writes_reason_like_plain_ones(trio, plain, strategy, executor, prefetch):  # noqa: F811
    cfg, _, checkpoints = trio
    alg = compose_config(_overrides(cfg, f"algorithm.target_decoding={strategy}",
                                    f"algorithm.speculative_prefetch={prefetch}")).algorithm
    got = _reason(cfg, checkpoints, alg, executor)
    _same_reasoning(got, plain[executor])
    assert any(g["problem"]["target_steps"] > 0 for g in got)        # the target really rewrote steps
    assert not any(w["rounds"] for w in plain[executor])             # plain writes leave no rounds
    # every speculative target call left its rounds: joined by start_ns, the tokens they kept are the call's
    for g in got:
        decode = {c[-1]: c for c in g["calls"] if c[0] == "target" and c[4] == "decode"}
        kept: dict[int, int] = {}
        for r in g["rounds"]:
            assert r["strategy"] == strategy and r["kept"] <= r["accepted"] + 1 and r["accepted"] <= r["nodes"]
            kept[r["start_ns"]] = kept.get(r["start_ns"], 0) + r["kept"]
        plainly = executor == "step_ahead" and not prefetch    # prefetches decode plainly: no rounds
        spoken = {t: c for t, c in decode.items() if c[6] > 0 and not (plainly and _prefetched(c))}
        assert set(kept) <= set(decode) and set(spoken) <= set(kept)
        assert all(kept[t] == decode[t][6] for t in kept)
        if plainly:
            assert not any(_prefetched(decode[t]) for t in kept)


def test_speculative_target_in_worker_processes(trio, plain):  # noqa: F811
    """Real worker processes: step-ahead prefetches are cancelled mid-step and their partial outputs resumed by the
    speculative writer, and the reasoning is still plain reasoning's."""
    cfg, _, checkpoints = trio
    alg = compose_config(_overrides(cfg, "algorithm.target_decoding=feedback")).algorithm
    with Session(cfg, checkpoints, processes=True, alg=alg) as s:
        got = [s.run(p, alg, "step_ahead") for p in load_problems(cfg.dataset, PROBLEMS)]
    reasoning = ("output", "correct", "stop", "steps", "draft_steps", "target_steps", "backtracks", "prm_calls")
    for g, w in zip(got, plain["step_ahead"], strict=True):   # (what cancelled work had done depends on timing)
        assert [g["problems"][0][k] for k in reasoning] == [w["problem"][k] for k in reasoning]
        assert g["steps"] == w["steps"]
    assert any(r["rounds"] for r in got)


def _prefetched(call: tuple) -> bool:
    """A step-ahead target call started as a prefetch (its outcome says what became of it)."""
    return call[5] in ("prefetch_hit", "cancelled")


def test_collect_writes_the_rounds_table_and_its_view(trio, monkeypatch):  # noqa: F811
    cfg, paths, _ = trio
    root = paths.root.parent.parent
    monkeypatch.chdir(root)
    ov = _overrides(cfg, "collect.limit=3", "algorithm.target_decoding=tree")
    run = compose_config(ov)
    run_shard(run, paths, ov, "synthetic", "rsd", "sequential", "0of1", processes=False)
    merge(paths, "synthetic", "rsd", "sequential", 1)
    table = lambda t: read_parquet(paths.collect_table("synthetic", "rsd", "sequential", t), COLLECT_TABLES[t]).to_pylist()
    rounds, calls = table("rounds"), table("calls")
    assert rounds and {r["strategy"] for r in rounds} == {"tree"} and {r["algorithm"] for r in rounds} == {"rsd"}
    writes = {(c["problem_id"], c["start_ns"]): c for c in calls if c["role"] == "target" and c["phase"] == "decode"}
    assert {(r["problem_id"], r["start_ns"]) for r in rounds} == set(writes)
    for key, c in writes.items():
        mine = [r for r in rounds if (r["problem_id"], r["start_ns"]) == key]
        assert [r["round"] for r in mine] == list(range(len(mine)))
        assert sum(r["kept"] for r in mine) == c["tokens_out"]
        assert all((r["step_idx"], r["outcome"]) == (c["step_idx"], c["outcome"]) for r in mine)
    # the catalogue's per-call acceptance: τ = mean tokens per round, from the rows themselves
    db = root / "results" / "heterospec.duckdb"
    assert "collect_call_acceptance" in build(db, root)
    cols, rows = query(db, f"SELECT problem_id, start_ns, rounds, drafted, accepted, tau FROM collect_call_acceptance "
                           f"WHERE run = '{run.name}' AND algorithm = 'rsd'")
    assert len(rows) == len(writes)
    for pid, start, n, drafted, accepted, tau in rows:
        mine = [r for r in rounds if (r["problem_id"], r["start_ns"]) == (pid, start)]
        assert (n, drafted, accepted) == (len(mine), sum(r["drafted"] for r in mine), sum(r["accepted"] for r in mine))
        assert tau == pytest.approx(round((accepted + n) / n, 3))


def test_target_sd_writes_target_only_outputs(trio, tmp_path):  # noqa: F811
    cfg, paths, _ = trio
    ov = _overrides(cfg, "eval_limit=6", "algorithm.target_sd=feedback")
    cfg = compose_config(ov)
    rows = {m: evaluate(cfg, paths, "synthetic", m, ov, tmp_path / f"{m}.parquet") for m in ("target_only", "target_sd")}
    assert read_parquet(tmp_path / "target_sd.parquet", EVALUATION_SCHEMA).num_rows == 6
    keep = ("problem_id", "prediction", "correct", "output", "prompt_tokens", "output_tokens")
    assert [{k: r[k] for k in keep} for r in rows["target_sd"]] == [{k: r[k] for k in keep} for r in rows["target_only"]]
    assert {r["method"] for r in rows["target_sd"]} == {"target_sd"}


# --- bad input: one line naming the key, before any model loads ----------------------------------------------------
@pytest.fixture
def no_model_loads(monkeypatch):
    """Loading a model fails the test: bad input must stop before."""
    import heterospec.models.loading as loading

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(loading, "load_causal_lm", refuse)


@pytest.mark.parametrize("key", ["target_decoding", "target_sd"])
def test_unknown_strategy_is_one_line(trio, tmp_path, no_model_loads, key):  # noqa: F811
    cfg, paths, checkpoints = trio
    ov = _overrides(cfg, f"algorithm.{key}=treee")
    cfg = compose_config(ov)
    with pytest.raises(UserError, match=rf"^algorithm.{key}=treee: not a token-level strategy; expected one of "
                                        r"\['chain', 'hf_heuristic', 'feedback', 'tree'\]$"):
        if key == "target_sd":
            evaluate(cfg, paths, "synthetic", "target_sd", ov, tmp_path / "x.parquet")
        else:
            Session(cfg, checkpoints, processes=False)


@pytest.mark.parametrize("stage, key", [("collect", "target_decoding"), ("evaluate", "target_sd")])
def test_unknown_strategy_on_the_command_line_is_one_line(tmp_path, stage, key):
    """Before anything else is read: here no model was ever trained."""
    args = ["run", "--dataset", "synthetic", "--algorithm", "rsd", "--executor", "sequential"] if stage == "collect" \
        else ["--dataset", "synthetic", "--method", "target_sd"]
    r = run_cmd([sys.executable, "-m", f"heterospec.{stage}", *args, "experiment=ci", f"algorithm.{key}=chian"],
                cwd=tmp_path)
    expected = "['plain', 'chain', 'hf_heuristic', 'feedback', 'tree']" if stage == "collect" else \
        "['chain', 'hf_heuristic', 'feedback', 'tree']"
    assert r.returncode == 2 and r.stderr.strip() == \
        f"heterospec: algorithm.{key}=chian: not a token-level strategy; expected one of {expected}", r.stderr


def test_tree_wider_than_the_draft_devices_lanes_is_one_line(trio, no_model_loads):  # noqa: F811
    cfg, _, checkpoints = trio
    # the run's draft device an U280 (8 draft lanes): a 12-wide tree does not fit it
    cfg = compose_config(_overrides(cfg, "hardware@system.draft=u280", "algorithm.target_decoding=tree",
                                    "token_speculation.tree.max_width=12"))
    with pytest.raises(UserError, match=r"^token_speculation.tree.max_width=12 exceeds the 8 parallel draft lanes of 'u280'"):
        Session(cfg, checkpoints, processes=False)


def test_draft_with_another_tokenizer_is_one_line(trio, tmp_path):  # noqa: F811
    cfg, _, checkpoints = trio
    from heterospec.models.loading import load_tokenizer
    other = tmp_path / "draft"
    tok = load_tokenizer(checkpoints["draft"])
    tok.add_tokens(["<unseen>"])
    tok.save_pretrained(other)                  # a tokenizer is all the check reads: no model is there to load
    cfg = compose_config(_overrides(cfg, "algorithm.target_decoding=chain"))
    with pytest.raises(UserError, match=r"^algorithm.target_decoding=chain: draft .*/draft: draft and target "
                                        r"tokenizers differ") as e:
        Session(cfg, checkpoints, processes=False, speculative_draft=str(other))
    assert "\n" not in str(e.value)
