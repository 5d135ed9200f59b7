"""The RSD / BRSD engine on a real (ci-sized) trained trio: identical reasoning under both executors,
KV reuse, the KVMU's log, trace tables, resumable sharded collection, and one-line errors."""
from __future__ import annotations

import functools
import json
import sys

import pytest

from conftest import copy_quantized, run_cmd
from heterospec.collect import merge, run_shard, shard_range
from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.models.role_manifest import read_manifest
from heterospec.paths import ROLES
from heterospec.reasoning.kvcache import ACCEPT, INIT, ROLLBACK, SPECULATION
from heterospec.reasoning.session import Session
from heterospec.reasoning.collect_schemas import COLLECT_TABLES
from heterospec.replay.simulator.steps import steps_from_calls
from heterospec.replay.traces.reader import find_traces
from heterospec.store import read_parquet
from heterospec.tasks import load_problems

OVERRIDES = ["experiment=ci", "collect.limit=6"]


@pytest.fixture(scope="module")
def trio(trained_models):
    """The session's ci trio in a run of this module's own."""
    cfg, paths = trained_models.run(OVERRIDES)
    checkpoints = {r: read_manifest(paths.model_manifest(r))["path"] for r in ROLES}
    # the ci PRM barely separates steps: put the threshold at the median of its scores so that both
    # accept and reject (and backtrack) branches run
    with Session(cfg, checkpoints, processes=False) as s:
        scores = sorted(c["prm_score"] for p in load_problems(cfg.dataset, 4)
                        for c in s.run(p, cfg.algorithm, "sequential")["calls"] if c["role"] == "prm")
    median = scores[len(scores) // 2]
    cfg = compose_config(OVERRIDES + [f"algorithm.threshold={median}", f"algorithm.backtrack_threshold={median}"])
    return cfg, paths, checkpoints


def _solve_all(session, cfg, executor, problems, alg):
    return [session.run(p, alg, executor) for p in problems]


@pytest.mark.parametrize("processes", [False, True], ids=["in_process", "worker_processes"])
def test_executors_reason_identically(trio, processes):
    cfg, _, checkpoints = trio
    problems = load_problems(cfg.dataset, 4)
    alg = cfg.algorithm
    with Session(cfg, checkpoints, processes=processes) as s:
        seq = _solve_all(s, cfg, "sequential", problems, alg)
        ahead = _solve_all(s, cfg, "step_ahead", problems, alg)
    for a, b in zip(seq, ahead):
        pa_, pb = a["problems"][0], b["problems"][0]
        assert (pa_["output"], pa_["steps"], pa_["backtracks"], pa_["target_steps"]) == \
               (pb["output"], pb["steps"], pb["backtracks"], pb["target_steps"])
    # the trio writes real steps and the PRM really rejects some of them
    assert any(r["problems"][0]["target_steps"] > 0 for r in seq)
    assert all("\n\n" in r["problems"][0]["output"] for r in seq)
    # step-ahead overlapped something: target prefetches happened and some were cancelled
    outcomes = {c["outcome"] for r in ahead for c in r["calls"] if c["role"] == "target"}
    assert "cancelled" in outcomes or "prefetch_hit" in outcomes


def test_draft_processes_each_token_once(trio):
    cfg, _, checkpoints = trio
    problems = load_problems(cfg.dataset, 6)
    with Session(cfg, checkpoints, processes=False) as s:
        rows = [r["problems"][0] for r in _solve_all(s, cfg, "sequential", problems, cfg.algorithm)]
    processed = sum(r["draft_processed"] for r in rows)
    denominator = sum(r["draft_tokens"] + r["draft_ingested"] for r in rows)
    assert processed / denominator <= 1.05
    # ingested includes the prompt and the target's steps (shadow synchronisation)
    assert sum(r["draft_ingested"] for r in rows) >= sum(r["prompt_tokens"] for r in rows)


def _trie_size(seqs: list[list[int]]) -> int:
    """Distinct prefixes of ``seqs``: the tokens a model that never re-reads a prefix must process."""
    return len({tuple(s[:i]) for s in seqs for i in range(1, len(s) + 1)})


def _count_fed(model, counter: list[int]):
    """Count the tokens that go through ``model``'s forward (an observer: the call itself is unchanged)."""
    forward = model.forward

    @functools.wraps(forward)
    def counted(*args, **kw):
        counter[0] += kw["input_ids"].shape[-1]
        return forward(*args, **kw)
    model.forward = counted


def test_prm_and_target_process_each_token_once(trio, monkeypatch):
    """Prefix-cache reuse for the PRM and the target, as for the draft: at most 5 % re-processed. Needed: the
    distinct prefixes of what the PRM scored; for the target, the tokens it sampled plus the host tokens."""
    cfg, _, checkpoints = trio
    problems = load_problems(cfg.dataset, 6)
    with Session(cfg, checkpoints, processes=False) as s:
        scorer, target = s.roles["prm"].role, s.roles["target"].role
        prm_fed, target_fed = [0], [0]
        _count_fed(scorer.cache.model, prm_fed)
        _count_fed(target.decoding.cache.model, target_fed)
        scored: list[list[int]] = []
        ids = scorer.ids
        monkeypatch.setattr(scorer, "ids", lambda q, steps: scored.append(ids(q, steps)) or scored[-1])
        prm_needed = target_needed = 0
        for p in problems:
            scored.clear()
            s.run(p, cfg.algorithm, "sequential")
            prm_needed += _trie_size(scored)
            t = s.roles["target"].call("stats")
            target_needed += t["generated"] + t["ingested"]
    assert len(scored) > 1 and target_needed > 0
    assert prm_fed[0] / prm_needed <= 1.05
    assert target_fed[0] / target_needed <= 1.05


def test_kvmu_logs_every_transition(trio):
    """Under step_ahead the draft's KVMU log has the prompt's INIT first, steps for the PRM and steps drafted ahead,
    accepts, and rejects: a rollback (to valid) when the target's step shares nothing with the rejected one, else a
    re-initialisation keeping the shared tokens; the pointers stay ordered."""
    cfg, _, checkpoints = trio
    problems = load_problems(cfg.dataset, 6)
    with Session(cfg, checkpoints, processes=False) as s:
        logs = [r["kvmu"] for r in _solve_all(s, cfg, "step_ahead", problems, cfg.algorithm)]
    seen = {(row["mode"], row["reason"]) for log in logs for row in log}
    assert {(INIT, "prompt"), (SPECULATION, "draft"), (SPECULATION, "step_ahead"), (ACCEPT, "prm")} <= seen
    assert {(ROLLBACK, "reject"), (INIT, "reject")} & seen
    for log in logs:
        assert log[0]["mode"] == INIT and log[0]["reason"] == "prompt"
        for row in log:
            assert row["valid"] <= row["current"] <= row["step_ahead"]
            assert row["mode"] not in (INIT, ROLLBACK) or row["valid"] == row["current"] == row["step_ahead"]


@pytest.mark.parametrize("executor", ["sequential", "step_ahead"])
def test_every_trace_label_is_the_controllers_verdict(trio, executor):
    """BRSD with a backtrack cap of 1, so failed rewrites past the cap stay: each PRM call and each draft proposal
    is labelled with the verdict the controller settled on its step, and the PRM calls labelled ``backtrack`` are
    the backtracks the controller counted."""
    cfg, _, checkpoints = trio
    alg = compose_config(OVERRIDES + [f"algorithm.threshold={cfg.algorithm.threshold}",
                                      f"algorithm.backtrack_threshold={cfg.algorithm.threshold}",
                                      "algorithm.max_backtracks=1"]).algorithm
    seen = set()
    with Session(cfg, checkpoints, processes=False) as s:
        ex = s.executor(executor, alg)
        told, settle = [], ex.settle
        ex.settle = lambda path, step, verdict: told.append(verdict) or settle(path, step, verdict)
        for p in load_problems(cfg.dataset, 6):
            told.clear()
            rows = s.run(p, alg, executor, ex)
            prm = [c for c in rows["calls"] if c["role"] == "prm"]
            assert [c["outcome"] for c in prm] == told
            proposals = [c["outcome"] for c in rows["calls"] if c["role"] == "draft" and c["outcome"] != "cancelled"]
            assert proposals[::2] == proposals[1::2] == [v for v, c in zip(told, prm) if c["attempt"] == 0]
            assert sum(v == "backtrack" for v in told) == rows["problems"][0]["backtracks"]
            # the step table: a row per proposal, its outcome from the same verdicts; every call in one of them
            steps = rows["steps"]
            assert [s["outcome"] == "accept" for s in steps] == [v == "accept" for v, c in zip(told, prm)
                                                                 if c["attempt"] == 0]
            assert sum(s["outcome"] == "backtrack" for s in steps) == rows["problems"][0]["backtracks"]
            assert {c["step_idx"] for c in rows["calls"]} == set(range(len(steps)))
            seen.update(told)
    assert seen == {"accept", "reject", "backtrack", "kept"}


def test_collect_shards_resume_and_merge(trio, tmp_path, monkeypatch):
    cfg, paths, _ = trio
    monkeypatch.chdir(paths.root.parent.parent)
    thr = cfg.algorithm.threshold
    ov = OVERRIDES + ["collect.shards=2", f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}"]
    cfg = compose_config(ov)
    for shard in ("0of2", "1of2"):
        run_shard(cfg, paths, ov, "synthetic", "brsd", "sequential", shard, processes=False)
    journal = paths.collect_shard("synthetic", "brsd", "sequential", "1of2", "problems").parent / "journal"
    assert len(list(journal.glob("*.json"))) == len(shard_range(6, 1, 2))
    # a killed run: one problem's journal entry is gone; the rerun redoes only that problem
    first = sorted(journal.glob("*.json"))[0]
    kept = {p.name: p.stat().st_mtime_ns for p in journal.glob("*.json") if p != first}
    first.unlink()
    run_shard(cfg, paths, ov, "synthetic", "brsd", "sequential", "1of2", processes=False)
    assert first.exists() and all(journal.joinpath(n).stat().st_mtime_ns == t for n, t in kept.items())
    merge(paths, "synthetic", "brsd", "sequential", 2)
    problems = read_parquet(paths.collect_table("synthetic", "brsd", "sequential", "problems"), COLLECT_TABLES["problems"])
    calls = read_parquet(paths.collect_table("synthetic", "brsd", "sequential", "calls"), COLLECT_TABLES["calls"])
    assert problems.num_rows == 6 and len(set(problems.column("problem_id").to_pylist())) == 6
    assert set(calls.column("role").to_pylist()) == {"draft", "prm", "target"}
    assert all(e >= s for s, e in zip(calls.column("start_ns").to_pylist(), calls.column("end_ns").to_pylist()))
    # the step table: one row per draft proposal, its outcome the controller's; the validation's step view is it
    steps = read_parquet(paths.collect_table("synthetic", "brsd", "sequential", "steps"), COLLECT_TABLES["steps"]).to_pylist()
    proposals = [c for c in calls.to_pylist() if c["role"] == "prm" and c["attempt"] == 0]
    assert [(s["problem_id"], s["outcome"] == "accept") for s in steps] == \
        [(c["problem_id"], c["outcome"] == "accept") for c in proposals]
    for p in problems.to_pylist():
        mine = [s["outcome"] for s in steps if s["problem_id"] == p["problem_id"]]
        assert mine.count("backtrack") == p["backtracks"] and mine.count("accept") >= p["draft_steps"]
    view = steps_from_calls(find_traces(paths.collect_root, ["sequential"])[0][("brsd", "sequential")]).to_pylist()
    assert [(v["problem"], v["outcome"]) for v in view] == [(s["problem_id"], s["outcome"]) for s in steps]
    assert {v["prompt_tokens"] for v in view} == {p["prompt_tokens"] for p in problems.to_pylist()}


def test_collect_journal_restarts_when_settings_or_models_change(trio, monkeypatch):
    """Journaled problems are reused only under the same settings and models; any change redoes them all."""
    cfg, paths, _ = trio
    monkeypatch.chdir(paths.root.parent.parent)
    thr = cfg.algorithm.threshold
    base = OVERRIDES + [f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}", "collect.limit=2"]
    journal = paths.collect_shard("synthetic", "rsd", "sequential", "0of1", "problems").parent / "journal"

    def collect(ov):
        run_shard(compose_config(ov), paths, ov, "synthetic", "rsd", "sequential", "0of1", processes=False)
        return {p.name: p.stat().st_mtime_ns for p in journal.glob("*.json")}, (journal / "SPEC").read_text()

    first, spec = collect(base)
    assert len(first) == 2
    assert collect(base) == (first, spec)                                  # same settings: resumed, nothing redone
    changed, spec2 = collect(base + ["algorithm.max_steps=19"])
    assert spec2 != spec and set(changed) == set(first) and all(changed[n] != first[n] for n in first)
    manifest = paths.model_manifest("prm")
    text = manifest.read_text()
    try:
        manifest.write_text(json.dumps(json.loads(text), indent=3))       # the PRM's manifest is not the same text
        retrained, spec3 = collect(base + ["algorithm.max_steps=19"])
    finally:
        manifest.write_text(text)
    assert spec3 not in (spec, spec2) and all(retrained[n] != changed[n] for n in first)


def test_missing_device_is_one_line(trio, tmp_path):
    cfg, _, checkpoints = trio
    cfg = compose_config(OVERRIDES + ["system.torch_devices.target=cuda:3"])
    with pytest.raises(UserError, match=r"system.torch_devices.target=cuda:3"):
        Session(cfg, checkpoints, processes=False)


def test_prm_without_separator_is_one_line(trio):
    cfg, _, checkpoints = trio
    cfg = compose_config(OVERRIDES + ["models.prm_step_token='<nope>'"])
    with pytest.raises(UserError, match="no step separator token '<nope>'"):
        Session(cfg, checkpoints, processes=False)


def test_different_tokenizers_is_one_line(trio, tmp_path):
    cfg, _, checkpoints = trio
    other = tmp_path / "other"
    from heterospec.models.loading import load_causal_lm, load_tokenizer
    tok = load_tokenizer(checkpoints["target"])
    tok.add_tokens(["<unseen>"])
    load_causal_lm(checkpoints["target"]).save_pretrained(other)
    tok.save_pretrained(other)
    with pytest.raises(UserError, match="different tokenizers"):
        Session(cfg, {**checkpoints, "target": str(other)}, processes=False)


def test_collect_cli_bad_shard_is_one_line(tmp_path):
    r = run_cmd([sys.executable, "-m", "heterospec.collect", "run", "--dataset", "synthetic", "--algorithm", "rsd",
                 "--executor", "sequential", "--shard", "3of2", "experiment=ci"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "heterospec: --shard 3of2: need 0 <= i < n"


def test_quantized_draft_runs_as_the_draft(trio, trained_models, ci_quantized):
    """collect.draft=w8a8: the W8A8 export drafts; reasoning still runs and traces its calls."""
    cfg, _, checkpoints = trio
    thr = cfg.algorithm.threshold
    ov = OVERRIDES + ["collect.draft=w8a8", f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}"]
    _, qpaths = trained_models.run(OVERRIDES)     # the trio's run
    copy_quantized(ci_quantized, qpaths)     # the session's export of this trio's draft, by the quantize stage
    out = run_shard(compose_config(ov), qpaths, ov, "synthetic", "brsd", "sequential", "0of1", processes=False)
    problems = read_parquet(out["problems"], COLLECT_TABLES["problems"])
    assert problems.num_rows == 6 and sum(problems.column("draft_tokens").to_pylist()) > 0
    # the draft role is the W8A8 export, and its cached step equals the export's own greedy continuation,
    # recomputed here by a full forward per token without any cache
    import torch
    from heterospec.quantize.model import W8A8Draft, load_quantized_draft
    qdir = str(qpaths.quantized_draft.parent.resolve())
    problem = load_problems(cfg.dataset, 1)[0]
    with Session(compose_config(ov), {**checkpoints, "draft": qdir}, processes=False) as s:
        assert isinstance(s.roles["draft"].role.decoding.cache.model, W8A8Draft)
        prompt = s.prompt_ids(problem.question)
        s.roles["draft"].call("reset", 0)
        step = s.roles["draft"].call("write", prompt, len(prompt), 12)
    model, ids = load_quantized_draft(qdir), list(prompt)
    with torch.no_grad():
        for _ in step.tokens:
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert len(step.tokens) > 0 and step.tokens == ids[len(prompt):]


def test_collect_repeats(trio, monkeypatch, capsys):
    """collect.repeats=2: the tables keep one trace per problem, the repeats table both runs' timings; raising the
    repeats keeps the journaled first runs; the validation compares each problem's fastest run."""
    from heterospec.replay.validation.against_collect import validate
    cfg, paths, _ = trio
    monkeypatch.chdir(paths.root.parent.parent)
    thr = cfg.algorithm.threshold
    base = OVERRIDES + [f"algorithm.threshold={thr}", f"algorithm.backtrack_threshold={thr}", "collect.limit=3"]
    journal = paths.collect_shard("synthetic", "brsd", "sequential", "0of1", "problems").parent / "journal"
    run_shard(compose_config(base), paths, base, "synthetic", "brsd", "sequential", "0of1", processes=False)
    first = {p.name: p.stat().st_mtime_ns for p in journal.glob("*.json")}
    out = paths.collect_shard("synthetic", "brsd", "sequential", "0of1", "repeats")
    assert len(first) == 3 and read_parquet(out, COLLECT_TABLES["repeats"]).num_rows == 0    # one run: no repeats rows
    ov = base + ["collect.repeats=2"]
    run_shard(compose_config(ov), paths, ov, "synthetic", "brsd", "sequential", "0of1", processes=False)
    assert all(journal.joinpath(n).stat().st_mtime_ns == t for n, t in first.items())   # only the new runs ran
    assert len(list(journal.glob("*.r1.json"))) == 3
    # problem 0's second run made to take half its first run's time, so that its minimum is not its first run
    quiet = json.loads((journal / "000000.r1.json").read_text())
    f = json.loads((journal / "000000.json").read_text())["problems"][0]["latency_s"] / 2 / \
        quiet["problems"][0]["latency_s"]
    for c in quiet["calls"]:
        c["start_ns"], c["end_ns"] = int(c["start_ns"] * f), int(c["end_ns"] * f)
    quiet["problems"][0]["latency_s"] *= f
    (journal / "000000.r1.json").write_text(json.dumps(quiet))
    run_shard(compose_config(ov), paths, ov, "synthetic", "brsd", "sequential", "0of1", processes=False)
    merge(paths, "synthetic", "brsd", "sequential", 1)
    table = lambda t: read_parquet(paths.collect_table("synthetic", "brsd", "sequential", t), COLLECT_TABLES[t]).to_pylist()
    problems, calls, reps = table("problems"), table("calls"), table("repeats")
    assert len(problems) == 3 and len({p["problem_id"] for p in problems}) == 3
    for p in problems:
        mine = [c for c in calls if c["problem_id"] == p["problem_id"]]
        shape = [(c["role"], c["phase"], c["tokens_in"], c["tokens_out"], c["kv_len"]) for c in mine]
        for j in (0, 1):
            run = [r for r in reps if r["problem_id"] == p["problem_id"] and r["repeat"] == j]
            # the same calls (sequential, greedy), each repeat with its own timings and its whole latency
            assert [(r["role"], r["phase"], r["tokens_in"], r["tokens_out"], r["kv_len"]) for r in run[:-1]] == shape
            assert run[-1]["role"] == "controller" and run[-1]["end_ns"] >= max(r["end_ns"] for r in run[:-1])
        assert [r["start_ns"] for r in reps if r["problem_id"] == p["problem_id"] and r["repeat"] == 0][:-1] == \
            [c["start_ns"] for c in mine]
    fastest = {p["problem_id"]: min(r["end_ns"] for r in reps if r["problem_id"] == p["problem_id"]
                                    and r["role"] == "controller") / 1e6 for p in problems}
    assert fastest[problems[0]["problem_id"]] == pytest.approx(quiet["problems"][0]["latency_s"] * 1e3, rel=1e-6)
    val = validate(compose_config(ov), paths, ov).to_pylist()
    assert "2 repeats; each problem's fastest counts" in capsys.readouterr().out
    seq = {v["problem"]: v["measured_ms"] for v in val if v["executor"] == "sequential"}
    assert seq == pytest.approx(fastest)


def test_collect_repeats_must_take_the_same_steps():
    from heterospec.reasoning.repeats import check_same_steps
    rows = lambda outcome, score: dict(steps=[dict(position=0, outcome=outcome, draft_score=score)],
                                       problems=[dict(problem_id="p", output="x")])
    check_same_steps(rows("accept", 0.5), rows("accept", 0.5 + 1e-9), 1)
    for other in (rows("backtrack", 0.5), rows("accept", 0.6)):
        with pytest.raises(UserError, match="repeat 1 of problem p took other steps"):
            check_same_steps(rows("accept", 0.5), other, 1)
