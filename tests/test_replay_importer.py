"""Importer of the HeteroReason artifact traces (v11 and v12 formats)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from heterospec.errors import UserError
from heterospec.replay.artifact.importer import (ARTIFACT_TRACE_EVENTS_SCHEMA, ARTIFACT_TARGET_EVENTS_SCHEMA, detect_format, import_traces,
                                        read_events, read_target_events)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
AE_INPUTS = SHARED / "heteroreason_ae" / "Hardware" / "inputs" / "Config1"
needs_shared = pytest.mark.skipif(not AE_INPUTS.is_dir(), reason=f"{AE_INPUTS} absent (shared artifact traces)")


def v12_doc(idx=0):
    ev = [dict(event_idx=0, logical_step=1, status="accept_pure_draft", final_model="Draft", draft_tokens_spent=10,
               target_tokens_spent=0, target_total_tokens=0, latency=0.0),
          dict(event_idx=1, logical_step=2, status="target_rescue", final_model="Target", draft_tokens_spent=20,
               target_tokens_spent=15, target_total_tokens=30, latency=0.0),
          dict(event_idx=2, logical_step=3, status="BACKTRACK_EVENT", final_model="Target", draft_tokens_spent=7,
               target_tokens_spent=0, target_total_tokens=12, latency=0.0, from_step=3, to_step=1,
               steps_dropped=1, rollback_draft_tokens=30, rollback_target_tokens=30)]
    return dict(idx=idx, prompt_tokens=50,
                summary=dict(is_correct=True, backtrack_count=1, total_tokens_breakdown=[37, 42, 0],
                             prompt_tokens=50, trace_semantics="v12_recomputed_overlap"),
                execution_trace=ev)


def v11_doc(idx=0):
    def e(i, status, d, t=0, mode="none", cached=0, cont=0, crit=0, **kw):
        return dict(event_idx=i, logical_step=i, status=status, final_model="Draft", draft_tokens_spent=d,
                    target_tokens_spent=t, target_mode=mode, target_cached_tokens=cached,
                    target_continuation_tokens=cont, target_critical_gen_tokens=crit, latency=0, **kw)
    ev = [e(0, "accept_pure_draft", 10),
          e(1, "target_rescue", 20, 30, "partial_resume", 18, 12, 12),
          e(2, "BACKTRACK_EVENT", 7, to_step=0, from_step=2)]
    tte = [dict(event_idx=0, logical_step=1, phase="target_intervention", target_mode="partial_resume",
                target_tokens=30, target_cached_tokens=18, target_continuation_tokens=12,
                target_critical_gen_tokens=12),
           dict(event_idx=1, logical_step=0, phase="backtrack_target_intervention", target_mode="direct_generation",
                target_tokens=40, target_cached_tokens=0, target_continuation_tokens=40,
                target_critical_gen_tokens=40)]
    return dict(idx=idx, summary=dict(is_correct=False, backtrack_count=1, total_tokens_breakdown=[37, 70, 0]),
                execution_trace=ev, target_trace_events=tte)


def write(root: Path, rel: str, doc) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
    return p


def test_both_formats_detected_and_normalised(tmp_path):
    write(tmp_path, "with_bt/math500/example_0.json", v12_doc())
    write(tmp_path, "no_bt/math500/example_0.json", v11_doc())
    r = import_traces(tmp_path)
    assert r.events.schema.equals(ARTIFACT_TRACE_EVENTS_SCHEMA, check_metadata=True)
    rows = r.events.to_pylist()
    by = {(x["format"], x["event_idx"]): x for x in rows}
    assert {x["format"] for x in rows} == {"v11", "v12"}
    # logical steps are 1-based in both; the base is recorded
    assert [by["v12", i]["logical_step"] for i in range(3)] == [1, 2, 3]
    assert [by["v11", i]["logical_step"] for i in range(3)] == [1, 2, 3]
    assert by["v11", 0]["step_base"] == 0 and by["v12", 0]["step_base"] == 1
    assert by["v11", 2]["to_step"] == 1 and by["v11", 2]["from_step"] == 3
    assert by["v12", 2]["to_step"] == 1 and by["v12", 2]["rollback_draft_tokens"] == 30
    assert by["v12", 0]["prompt_tokens"] == 50 and by["v11", 0]["prompt_tokens"] is None
    assert by["v12", 1]["target_total_tokens"] == 30 and by["v11", 1]["target_total_tokens"] is None
    assert by["v11", 1]["target_mode"] == "partial_resume" and by["v11", 1]["target_critical_gen_tokens"] == 12
    # the v11 backtrack row carries its matched backtrack_target_intervention entry
    assert (by["v11", 2]["bt_target_mode"], by["v11", 2]["bt_target_tokens"],
            by["v11", 2]["bt_target_critical_gen_tokens"]) == ("direct_generation", 40, 40)
    assert by["v12", 2]["bt_target_mode"] is None
    assert r.target_events.num_rows == 2
    assert sorted(r.target_events.column("logical_step").to_pylist()) == [1, 2]
    assert all(x["dataset"] == "math500" for x in rows)


def test_forced_format_mismatch(tmp_path):
    write(tmp_path, "a/example_0.json", v11_doc())
    with pytest.raises(UserError, match="format is v11, expected v12"):
        import_traces(tmp_path, fmt="v12")
    with pytest.raises(UserError, match="unknown trace format"):
        import_traces(tmp_path, fmt="v13")
    assert detect_format(v11_doc()) == "v11" and detect_format(v12_doc()) == "v12"


def test_parquet_roundtrip(tmp_path):
    write(tmp_path, "in/x/example_0.json", v12_doc())
    write(tmp_path, "in/x/example_1.json", v11_doc(1))
    r = import_traces(tmp_path / "in")
    r.write(tmp_path / "ev.parquet", tmp_path / "te.parquet")
    assert read_events(tmp_path / "ev.parquet").equals(r.events)
    assert read_target_events(tmp_path / "te.parquet").num_rows == r.target_events.num_rows
    assert r.target_events.schema.names == ARTIFACT_TARGET_EVENTS_SCHEMA.names


def _broken(doc_fn, mutate):
    doc = doc_fn()
    mutate(doc)
    return doc


@pytest.mark.parametrize("doc, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "top level is list"),
    (_broken(v12_doc, lambda d: d.pop("execution_trace")), "'execution_trace' missing"),
    (_broken(v12_doc, lambda d: d["execution_trace"][1].pop("draft_tokens_spent")),
     "'execution_trace[1].draft_tokens_spent' missing"),
    (_broken(v12_doc, lambda d: d["execution_trace"][0].update(draft_tokens_spent="12")),
     "'execution_trace[0].draft_tokens_spent' is str, expected int"),
    (_broken(v12_doc, lambda d: d["execution_trace"][0].update(target_total_tokens=-1)),
     "'execution_trace[0].target_total_tokens' is negative"),
    (_broken(v12_doc, lambda d: d["execution_trace"][0].update(status="weird")),
     "'execution_trace[0].status' is 'weird'"),
    (_broken(v12_doc, lambda d: d["execution_trace"][2].pop("to_step")), "'execution_trace[2].to_step' missing"),
    (_broken(v12_doc, lambda d: d["execution_trace"][1].pop("target_total_tokens")),
     "'execution_trace[1].target_total_tokens' missing"),
    (_broken(v12_doc, lambda d: d["summary"].update(is_correct=1)), "'summary.is_correct' is int, expected bool"),
    (_broken(v12_doc, lambda d: d.update(prompt_tokens=True)), "'prompt_tokens' is a boolean"),
    (_broken(v11_doc, lambda d: d["target_trace_events"][0].pop("phase")),
     "'target_trace_events[0].phase' missing"),
    (_broken(v11_doc, lambda d: d["execution_trace"][0].update(logical_step=-1)), "logical_step"),
])
def test_malformed_file_is_one_line_user_error(tmp_path, doc, needle):
    good = write(tmp_path, "ds/example_0.json", v12_doc())
    bad = write(tmp_path, "ds/example_1.json", doc)
    with pytest.raises(UserError) as ei:
        import_traces(tmp_path)
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(bad) in msg and str(good) not in msg
    assert needle in msg


def test_missing_folder(tmp_path):
    with pytest.raises(UserError, match="not found"):
        import_traces(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no \\*.json"):
        import_traces(tmp_path / "empty")


@needs_shared
def test_shared_artifact_traces():
    r = import_traces(AE_INPUTS)
    fmts = dict(zip(r.events.column("source").to_pylist(), r.events.column("format").to_pylist()))
    assert all(f == ("v12" if s.startswith("with_bt") else "v11") for s, f in fmts.items())
    gk = [s for s in fmts if s.startswith("with_bt/gaokao2023en/")]
    assert len(gk) == 385
    n_gk = sum(1 for s in r.events.column("source").to_pylist() if s.startswith("with_bt/gaokao2023en/"))
    assert n_gk == 4692   # simulator_reference.json: "events": 4692
    ls = r.events.column("logical_step").to_pylist()
    assert min(ls) == 1
