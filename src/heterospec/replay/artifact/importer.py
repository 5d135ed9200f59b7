"""Import the HeteroReason artifact's per-problem JSON traces (v11 and v12 formats) into Parquet tables.

A trace folder holds one JSON file per problem (``example_<i>.json``). Two layouts exist:

* **v12** (``Hardware/inputs/Config1/with_bt``): top-level ``prompt_tokens``, 1-based ``logical_step``,
  ``target_total_tokens`` on every event, backtrack fields on ``BACKTRACK_EVENT`` rows.
* **v11** (``Hardware/inputs/Config1/no_bt``): no ``prompt_tokens``, 0-based ``logical_step``,
  ``target_mode`` and cached / continuation / critical token counts per event, and an optional
  ``target_trace_events`` list (target interventions, including those that follow a backtrack).

:func:`import_traces` returns two tables: one row per ``execution_trace`` event (``ARTIFACT_TRACE_EVENTS_SCHEMA``) and one row
per ``target_trace_events`` entry (``ARTIFACT_TARGET_EVENTS_SCHEMA``). Step numbers (``logical_step``, ``from_step``,
``to_step``) are normalised to 1-based; ``step_base`` records the base the file used. Each ``BACKTRACK_EVENT`` row
also carries the target-trace entry the v11 backtrack rule pairs with it (``bt_*`` columns; null when none).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from heterospec.errors import UserError
from heterospec.store.parquet import read_parquet, versioned, write_parquet

FORMATS = ("v11", "v12")
STATUSES = ("accept_pure_draft", "accept_via_prefetch", "target_rescue", "BACKTRACK_EVENT")
TARGET_TRACE_MODES = ("prefetched_complete", "partial_resume", "direct_generation")
BACKTRACK_PHASE = "backtrack_target_intervention"

_i32 = pa.int32()
ARTIFACT_TRACE_EVENTS_SCHEMA = versioned("artifact_trace_events", 1, [
    pa.field("dataset", pa.string(), nullable=False),       # the trace file's folder name (math500, ...)
    pa.field("source", pa.string(), nullable=False),        # file path relative to the import root
    pa.field("problem_idx", pa.int64(), nullable=False),    # the file's `idx`
    pa.field("format", pa.string(), nullable=False),        # v11 | v12
    pa.field("trace_semantics", pa.string()),               # summary.trace_semantics (v12 files)
    pa.field("prompt_tokens", _i32),                        # null when the file has none (v11)
    pa.field("is_correct", pa.bool_(), nullable=False),
    pa.field("backtrack_count", _i32, nullable=False),
    pa.field("summary_draft_tokens", _i32, nullable=False),   # summary.total_tokens_breakdown[0]
    pa.field("summary_target_tokens", _i32, nullable=False),  # summary.total_tokens_breakdown[1]
    pa.field("event_idx", _i32, nullable=False),
    pa.field("logical_step", _i32, nullable=False),         # normalised to 1-based
    pa.field("step_base", pa.int8(), nullable=False),       # 0 or 1: the base the file used
    pa.field("status", pa.string(), nullable=False),
    pa.field("final_model", pa.string(), nullable=False),
    pa.field("draft_tokens_spent", _i32, nullable=False),
    pa.field("target_tokens_spent", _i32, nullable=False),
    pa.field("target_total_tokens", _i32),                  # v12 only
    pa.field("target_mode", pa.string()),                   # v11 only
    pa.field("target_cached_tokens", _i32),
    pa.field("target_continuation_tokens", _i32),
    pa.field("target_critical_gen_tokens", _i32),
    pa.field("latency_recorded", pa.float64(), nullable=False),  # the trace's own `latency` field
    pa.field("from_step", _i32),                            # BACKTRACK_EVENT rows; normalised to 1-based
    pa.field("to_step", _i32),
    pa.field("steps_dropped", _i32),
    pa.field("rollback_draft_tokens", _i32),
    pa.field("rollback_target_tokens", _i32),
    pa.field("bt_target_mode", pa.string()),                # matched backtrack_target_intervention entry
    pa.field("bt_target_tokens", _i32),
    pa.field("bt_target_critical_gen_tokens", _i32),
])

ARTIFACT_TARGET_EVENTS_SCHEMA = versioned("artifact_target_events", 1, [
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("problem_idx", pa.int64(), nullable=False),
    pa.field("entry_idx", _i32, nullable=False),            # position in target_trace_events
    pa.field("event_idx", _i32, nullable=False),
    pa.field("logical_step", _i32, nullable=False),         # normalised to 1-based
    pa.field("phase", pa.string(), nullable=False),
    pa.field("target_mode", pa.string(), nullable=False),
    pa.field("target_tokens", _i32, nullable=False),
    pa.field("target_cached_tokens", _i32, nullable=False),
    pa.field("target_continuation_tokens", _i32, nullable=False),
    pa.field("target_critical_gen_tokens", _i32, nullable=False),
])


@dataclass
class ImportedTraces:
    events: pa.Table          # ARTIFACT_TRACE_EVENTS_SCHEMA
    target_events: pa.Table   # ARTIFACT_TARGET_EVENTS_SCHEMA

    def write(self, events_path: str | Path, target_events_path: str | Path) -> None:
        write_parquet(self.events, events_path, ARTIFACT_TRACE_EVENTS_SCHEMA)
        write_parquet(self.target_events, target_events_path, ARTIFACT_TARGET_EVENTS_SCHEMA)


# ----------------------------------------------------------------------------- field checks
class _Bad(Exception):
    """A field problem inside one file; turned into a UserError naming the file."""


def _get(obj: dict, key: str, where: str, kinds: tuple, required: bool = True, default: Any = None) -> Any:
    if not isinstance(obj, dict):
        raise _Bad(f"'{where}' is not an object")
    if key not in obj:
        if required:
            raise _Bad(f"field '{where}.{key}' missing" if where else f"field '{key}' missing")
        return default
    value = obj[key]
    name = f"{where}.{key}" if where else key
    if bool not in kinds and isinstance(value, bool):
        raise _Bad(f"field '{name}' is a boolean, expected {_kind_names(kinds)}")
    if not isinstance(value, kinds):
        raise _Bad(f"field '{name}' is {type(value).__name__}, expected {_kind_names(kinds)}")
    if int in kinds and isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise _Bad(f"field '{name}' is negative ({value})")
    return value


def _kind_names(kinds: tuple) -> str:
    return " or ".join({int: "int", float: "number", str: "string", bool: "bool", list: "list", dict: "object"}[k]
                       for k in kinds)


def detect_format(data: dict) -> str:
    """``v12`` when the file has top-level ``prompt_tokens`` or a v12 ``trace_semantics``, else ``v11``."""
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    semantics = summary.get("trace_semantics")
    if "prompt_tokens" in data or (isinstance(semantics, str) and semantics.startswith("v12")):
        return "v12"
    return "v11"


def _parse_file(path: Path, rel: str, dataset: str, fmt: str | None) -> tuple[list[dict], list[dict]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level is {type(data).__name__}, expected an object")
    got = detect_format(data)
    if fmt is not None and got != fmt:
        raise UserError(f"{path}: trace format is {got}, expected {fmt}")
    try:
        return _parse(data, got, rel, dataset)
    except _Bad as e:
        raise UserError(f"{path}: {e}") from None


def _parse(data: dict, fmt: str, rel: str, dataset: str) -> tuple[list[dict], list[dict]]:
    v12 = fmt == "v12"
    base = 1 if v12 else 0
    shift = 1 - base
    idx = _get(data, "idx", "", (int,))
    summary = _get(data, "summary", "", (dict,))
    is_correct = _get(summary, "is_correct", "summary", (bool,))
    backtrack_count = _get(summary, "backtrack_count", "summary", (int,))
    breakdown = _get(summary, "total_tokens_breakdown", "summary", (list,))
    if len(breakdown) < 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in breakdown):
        raise _Bad("field 'summary.total_tokens_breakdown' must be a list of at least 2 ints")
    semantics = _get(summary, "trace_semantics", "summary", (str,), required=False)
    prompt = _get(data, "prompt_tokens", "", (int,), required=v12)
    trace = _get(data, "execution_trace", "", (list,))
    tte = _get(data, "target_trace_events", "", (list,), required=False, default=[])

    common = dict(dataset=dataset, source=rel, problem_idx=idx)
    targets: list[dict] = []
    pending: dict[int, list[dict]] = {}
    for j, t in enumerate(tte):
        w = f"target_trace_events[{j}]"
        row = dict(common, entry_idx=j,
                   event_idx=_get(t, "event_idx", w, (int,)),
                   logical_step=_get(t, "logical_step", w, (int,)) + shift,
                   phase=_get(t, "phase", w, (str,)),
                   target_mode=_get(t, "target_mode", w, (str,)),
                   target_tokens=_get(t, "target_tokens", w, (int,)),
                   target_cached_tokens=_get(t, "target_cached_tokens", w, (int,)),
                   target_continuation_tokens=_get(t, "target_continuation_tokens", w, (int,)),
                   target_critical_gen_tokens=_get(t, "target_critical_gen_tokens", w, (int,)))
        targets.append(row)
        if row["phase"] == BACKTRACK_PHASE:
            pending.setdefault(row["logical_step"], []).append(row)

    rows: list[dict] = []
    per_problem = dict(common, format=fmt, trace_semantics=semantics, prompt_tokens=prompt, is_correct=is_correct,
                       backtrack_count=backtrack_count, summary_draft_tokens=breakdown[0],
                       summary_target_tokens=breakdown[1], step_base=base)
    for i, e in enumerate(trace):
        w = f"execution_trace[{i}]"
        status = _get(e, "status", w, (str,))
        if status not in STATUSES:
            raise _Bad(f"field '{w}.status' is '{status}', expected one of {list(STATUSES)}")
        if v12 and status == "accept_via_prefetch":
            raise _Bad(f"field '{w}.status' is 'accept_via_prefetch', which v12 traces do not use")
        row = dict(per_problem,
                   event_idx=_get(e, "event_idx", w, (int,)),
                   logical_step=_get(e, "logical_step", w, (int,)) + shift,
                   status=status,
                   final_model=_get(e, "final_model", w, (str,)),
                   draft_tokens_spent=_get(e, "draft_tokens_spent", w, (int,)),
                   target_tokens_spent=_get(e, "target_tokens_spent", w, (int,)),
                   target_total_tokens=_get(e, "target_total_tokens", w, (int,), required=v12),
                   target_mode=_get(e, "target_mode", w, (str,), required=False),
                   target_cached_tokens=_get(e, "target_cached_tokens", w, (int,), required=False),
                   target_continuation_tokens=_get(e, "target_continuation_tokens", w, (int,), required=False),
                   target_critical_gen_tokens=_get(e, "target_critical_gen_tokens", w, (int,), required=False),
                   latency_recorded=float(_get(e, "latency", w, (int, float), required=False, default=0.0)),
                   from_step=None, to_step=None, steps_dropped=None, rollback_draft_tokens=None,
                   rollback_target_tokens=None, bt_target_mode=None, bt_target_tokens=None,
                   bt_target_critical_gen_tokens=None)
        if row["logical_step"] < 1:
            raise _Bad(f"field '{w}.logical_step' is {row['logical_step'] - shift}, below the {fmt} base {base}")
        if status == "BACKTRACK_EVENT":
            row["from_step"] = _get(e, "from_step", w, (int,), required=v12)
            row["to_step"] = _get(e, "to_step", w, (int,), required=True)
            for k in ("steps_dropped", "rollback_draft_tokens", "rollback_target_tokens"):
                row[k] = _get(e, k, w, (int,), required=v12)
            for k in ("from_step", "to_step"):
                if row[k] is not None:
                    row[k] += shift
            match = pending.get(row["to_step"])
            if match:
                m = match.pop(0)
                row["bt_target_mode"] = m["target_mode"]
                row["bt_target_tokens"] = m["target_tokens"]
                row["bt_target_critical_gen_tokens"] = m["target_critical_gen_tokens"]
        rows.append(row)
    return rows, targets


# ----------------------------------------------------------------------------- public API
def trace_files(root: str | Path) -> list[Path]:
    """Every ``*.json`` under ``root`` (or ``root`` itself when it is a file), sorted by path."""
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise UserError(f"{root}: trace folder not found")
    files = sorted(root.rglob("*.json"), key=lambda p: (str(p.parent), _natural(p.name)))
    if not files:
        raise UserError(f"{root}: no *.json trace files")
    return files


def _natural(name: str) -> tuple:
    stem, _, num = name.rpartition("_")
    num = num.removesuffix(".json")
    return (stem, int(num)) if num.isdigit() else (name, -1)


def import_traces(root: str | Path, fmt: str | None = None) -> ImportedTraces:
    """Read every trace file under ``root``; ``fmt`` None detects each file's format, else requires it.

    ``dataset`` is each file's folder name; ``source`` its path relative to ``root``.
    """
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"unknown trace format '{fmt}'; choose one of {list(FORMATS)} (or none to detect)")
    root = Path(root)
    rows: list[dict] = []
    targets: list[dict] = []
    files = trace_files(root)
    for n, path in enumerate(files):
        rel = path.name if root.is_file() else str(path.relative_to(root))
        try:
            r, t = _parse_file(path, rel, path.parent.name, fmt)
        except UserError as e:
            raise UserError(f"{e} ({n} of {len(files)} traces read before it; fix or remove this file)") from None
        rows += r
        targets += t
    return ImportedTraces(pa.Table.from_pylist(rows, schema=ARTIFACT_TRACE_EVENTS_SCHEMA),
                          pa.Table.from_pylist(targets, schema=ARTIFACT_TARGET_EVENTS_SCHEMA))


def read_events(path: str | Path) -> pa.Table:
    return read_parquet(path, ARTIFACT_TRACE_EVENTS_SCHEMA)


def read_target_events(path: str | Path) -> pa.Table:
    return read_parquet(path, ARTIFACT_TARGET_EVENTS_SCHEMA)
