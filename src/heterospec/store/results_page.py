"""A finished run's headline tables as markdown, from the catalogue's views: ``docs/results/<run>.md`` (each table
after the ``heterospec query`` command that prints it, under a header naming the run, the commit and machines its
jobs recorded (``run_commits``, ``run_machines``) and the date) and the README's ``<!-- results: NAME -->`` ...
``<!-- /results: NAME -->`` blocks, each naming the run and its machines (``heterospec results-doc``).

``README_TABLES`` are the tables ``heterospec tables`` prints; ``HEADLINES`` groups the headline ones by the NAME
a README block gives, with the load replay's and the serving run's beside them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from heterospec.errors import UserError
from heterospec.text_table import format_cell

# The README's tables of a run, each from one catalogue view: (title, view, columns). `heterospec tables RUN`
# prints them, so the numbers after a change of default are one command away.
README_TABLES = (
    ("Model quality (docs/models.md)", "model_quality",
     "problems, draft_accuracy, target_accuracy, prm_auroc, prm_false_reject, prm_miss, threshold, "
     "prm_auroc_corruptions, train_s_draft, train_s_prm, train_s_target, meets_bars"),
    ("Accuracy, Table III", "table3", "dataset, method, problems, accuracy"),
    ("Collection (target-written share, KV reuse)", "collect_summary",
     "dataset, algorithm, executor, problems, accuracy, target_step_share, mean_backtracks, draft_kv_reuse_ratio, "
     "mean_latency_s"),
    ("Step-ahead over sequential, same problems", "step_ahead_speedup",
     "dataset, algorithm, problems, speedup, identical_outputs_pct"),
    ("Replay validation (docs/validation.md)", "replay_validation_summary",
     "trace_set, executor, system, problems, measured_ms, predicted_ms, mae_pct, mean_bias_pct, noise_floor_pct, "
     "draft_pace, schedule_only_mae_pct, mean_error_pct, p50_hd_error_pct, p90_hd_error_pct, p50_error_pct, "
     "p90_error_pct, aggregates_within_5pct"),
    ("DFVG: tau per strategy (docs/dfvg.md)", "dfvg_summary",
     "strategy, prompts, rounds, tau, acceptance_rate, draft_efficiency, mean_nodes, mean_depth, draft_passes"),
    ("DFVG: CPU wall clock, one timing per method", "dfvg_speed",
     "method, prompts, tokens, wall_s, tokens_per_s, speedup_vs_target_greedy, speedup_vs_hf_assisted, "
     "identical_pct"),
    ("DFVG: simulated FPGA + GPU", "dfvg_replay_summary",
     "profile, strategy, design, tokens_per_s, j_per_token, speedup_vs_plain, energy_gain_vs_plain, "
     "speedup_vs_gpu_only"),
)


def _quoted(run: str) -> str:
    return "'" + run.replace("'", "''") + "'"


@dataclass(frozen=True)
class Table:
    """A view's columns for one run; ``where`` narrows the rows, ``pivot`` (``"column IN (values): value"``) turns
    the listed values of one column into columns (DuckDB's PIVOT; the values listed, so the query stays one
    read-only SELECT), so a headline fits the README."""
    title: str
    view: str
    columns: str
    where: str = ""
    pivot: str = ""

    def sql(self, run: str) -> str:
        rows = f"SELECT {self.columns} FROM {self.view} WHERE run = {_quoted(run)}" + \
            (f" AND {self.where}" if self.where else "")
        if self.pivot:
            on, value = (x.strip() for x in self.pivot.rsplit(":", 1))
            return f"SELECT * FROM (PIVOT ({rows}) ON {on} USING first({value})) ORDER BY ALL"
        return rows + " ORDER BY ALL"

    def command(self, run: str) -> str:
        return f'heterospec query "{self.sql(run)}"'


_BY_VIEW = {view: Table(title, view, columns) for title, view, columns in README_TABLES}

# README block NAME -> its tables, in the order a page shows them
HEADLINES: dict[str, tuple[Table, ...]] = {
    "model_quality": (_BY_VIEW["model_quality"],),
    "table3": (_BY_VIEW["table3"],),
    "collect_summary": (_BY_VIEW["collect_summary"],),
    "step_ahead_speedup": (_BY_VIEW["step_ahead_speedup"],),
    "dfvg": (_BY_VIEW["dfvg_summary"], _BY_VIEW["dfvg_speed"], _BY_VIEW["dfvg_replay_summary"]),
    "replay_validation": (
        _BY_VIEW["replay_validation_summary"],
        Table("Replay validation, aggregate errors with their bootstrap 95 % intervals", "replay_validation_aggregate",
              "trace_set, executor, system, statistic, problems, measured_ms, predicted_ms, rel_error, ci_low, "
              "ci_high"),
    ),
    "load_capacity": (
        Table("Load replay: capacity at the SLO per system and method (docs/load.md)", "load_capacity_summary",
              "trace_set, profile, system, method, percentile, slo_s, unloaded_s, capacity_rps, bottleneck, "
              "capacity_vs_target, capacity_vs_gpu3, unloaded_speedup_vs_gpu3"),
    ),
    "load_design_space": (
        Table("Load replay: the FPGA draft's design space (docs/load.md, The design space)",
              "load_design_space_summary",
              "trace_set, method, board, kernel, batch, fpgas, rows, cols, lanes, dsp_util, lut_util, closes, bound, "
              "pass1_ms, passb_ms, capacity_rps, reference_rps, capacity_vs_reference, reaches, limit_device, "
              "bottleneck, power_w, capacity_per_kw, per_kw_vs_reference, capacity_per_kusd"),
    ),
    "serving": (
        Table("Serving: outputs against the sequential collect (docs/serving.md)", "serving_identity",
              "dataset, algorithm, requests, problems, identical_pct, prm_calls, max_prm_score_diff"),
        Table("Serving: measured against the load replay per load point", "serving_load",
              "dataset, algorithm, load, rate_per_s, repeats, requests_per_repeat, measured_p50_hd_s, "
              "replayed_p50_hd_s, p50_hd_error_pct, p50_hd_spread_pct, p50_error_pct, measured_p90_hd_s, "
              "replayed_p90_hd_s, p90_hd_error_pct, p90_hd_spread_pct, p90_error_pct, request_bias_pct, "
              "request_mae_pct, request_noise_floor_pct, measured_throughput, replayed_throughput, "
              "throughput_error_pct, within_bars"),
        Table("Serving: the replay's errors per load point with their bootstrap 95 % intervals", "serving_errors",
              "dataset, algorithm, load, statistic, repeats, requests, measured, replayed, rel_error, ci_low, "
              "ci_high, spread"),
    ),
}

# README block NAME -> the one compact table the README shows (the page above holds the full ones)
README_HEADLINES: dict[str, Table] = {
    "model_quality": Table("Model quality", "model_quality",
                           "draft_accuracy, target_accuracy, prm_auroc, prm_false_reject, prm_miss, "
                           "prm_auroc_corruptions"),
    "table3": Table("Accuracy, Table III", "table3", "dataset, method, accuracy", pivot="method IN ('draft_only', 'target_only', 'target_sd', 'rsd', 'brsd', 'brsd_w8a8', "
                   "'brsd_u280'): accuracy"),
    "collect_summary": Table("Collect, sequential executor", "collect_summary",
                             "algorithm, accuracy, target_step_share, mean_backtracks, mean_latency_s",
                             where="executor = 'sequential'"),
    "step_ahead_speedup": Table("Step-ahead over sequential", "step_ahead_speedup",
                                "algorithm, speedup, identical_outputs_pct"),
    "dfvg": Table("DFVG on the simulated FPGA + GPU", "dfvg_replay_summary",
                  "profile, strategy, design, tokens_per_s, speedup_vs_plain, speedup_vs_gpu_only"),
    "replay_validation": Table("Replay validation, errors of the aggregates", "replay_validation_summary",
                               "trace_set, executor, mean_error_pct, p50_hd_error_pct, p90_hd_error_pct, "
                               "p50_error_pct, p90_error_pct, mae_pct, noise_floor_pct, draft_pace"),
    "load_capacity": Table("Load replay: capacity (requests/s) at the SLO, paper_v12", "load_capacity_summary",
                           "trace_set, method, system, capacity_rps",
                           where="profile = 'paper_v12' AND method IN ('target', 'rsd', 'brsd')",
                           pivot="system IN ('gpu3', 'hetero_u280', 'hetero_v80'): capacity_rps"),
    "load_design_space": Table("Load replay: one FPGA's design points against three GPUs (requests/s)",
                               "load_design_space_summary", "method, board, reference_rps, batch, capacity_rps",
                               where="kernel = 'ours' AND fpgas = 1", pivot="batch IN (1, 16): capacity_rps"),
    "serving": Table("Serving: measured against the load replay", "serving_load",
                     "load, requests_per_repeat, measured_p50_hd_s, replayed_p50_hd_s, measured_p90_hd_s, "
                     "replayed_p90_hd_s, request_mae_pct, request_noise_floor_pct, measured_throughput, "
                     "replayed_throughput, within_bars"),
}

BLOCK = re.compile(r"^<!-- (/?)results: (\S+) -->\s*$")


def markdown_table(columns: list[str], rows: list[tuple]) -> str:
    """A GitHub markdown table, cells formatted as the terminal tables format them."""
    def esc(v) -> str:
        return format_cell(v).replace("|", "\\|")
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def _present(db: Path) -> set[str]:
    from heterospec.store.catalog import query
    return {v for (v,) in query(db, "SELECT view_name FROM duckdb_views() WHERE NOT internal")[1]}


def render(db: Path, run: str, name: str, present: set[str] | None = None) -> str:
    """One headline NAME's tables for ``run``, each after the command that prints it (a ```bash block marked
    runnable like every documented command: tests/test_documented_commands.py runs it); a view
    without rows for the run is one line saying so."""
    from heterospec.store.catalog import query
    present = _present(db) if present is None else present
    parts = []
    for t in HEADLINES[name]:
        rows: list = []
        if t.view in present:
            cols, rows = query(db, t.sql(run))
        if not rows:
            parts.append(f"*{t.title}: no rows for run {run} in view `{t.view}`; skipped.*")
            continue
        parts.append(f"**{t.title}**\n\n<!-- runnable -->\n```bash\n{t.command(run)}\n```\n\n"
                     f"{markdown_table(cols, rows)}")
    return "\n\n".join(parts)


def run_machines(db: Path, run: str, present: set[str] | None = None) -> list[tuple[str, int, str]]:
    """(the machine in words, jobs, stages) per machine the run's jobs recorded, most jobs first; empty for a run
    made before runs recorded their machines."""
    from heterospec.store.catalog import query
    from heterospec.store.machines import describe
    present = _present(db) if present is None else present
    if "run_machines" not in present:
        return []
    _, rows = query(db, "SELECT cpu_model, cpu_id, vector_isa, logical_cores, usable_cores, jobs, stages "
                        f"FROM run_machines WHERE run = {_quoted(run)}")   # most jobs first
    return [(describe(*r[:5]), r[5], r[6]) for r in rows]


def run_commits(db: Path, run: str, present: set[str] | None = None) -> list[tuple[str, int, str]]:
    """(the commit in words, jobs, stages) per commit the run's jobs recorded, most jobs first (a role trained
    before manifests recorded the machine and commit is left out)."""
    from heterospec.store.catalog import query
    from heterospec.store.machines import commit_text
    present = _present(db) if present is None else present
    if "machines" not in present:
        return []
    _, rows = query(db, "SELECT commit, dirty, count(*) AS jobs, string_agg(DISTINCT stage, ', ' ORDER BY stage) "
                        f"FROM machines WHERE run = {_quoted(run)} AND (commit IS NOT NULL OR cpu_model IS NOT NULL) "
                        "GROUP BY ALL ORDER BY jobs DESC, commit, dirty")
    return [(commit_text(c, d), n, stages) for c, d, n, stages in rows]


def machines_line(machines: list[tuple[str, int, str]]) -> str:
    """The machines a run was made on, in one phrase: ``AMD EPYC (...), 2 logical cores``."""
    if not machines:
        return "an unrecorded machine"
    if len(machines) == 1:
        return machines[0][0]
    return f"{len(machines)} machines: " + "; ".join(m for m, _, _ in machines)


def render_readme(db: Path, run: str, name: str, present: set[str] | None = None,
                  machines: list[tuple[str, int, str]] | None = None) -> str:
    """A README block: NAME's compact table and one source line (the run's page and the machines that made it;
    the command that prints it)."""
    from heterospec.store.catalog import query
    present = _present(db) if present is None else present
    machines = run_machines(db, run, present) if machines is None else machines
    t = README_HEADLINES[name]
    rows: list = []
    if t.view in present:
        cols, rows = query(db, t.sql(run))
    source = f"[run `{run}`](docs/results/{run}.md) on {machines_line(machines)}: `{t.command(run)}`"
    if not rows:
        return f"*{t.title}: no rows for run `{run}` in view `{t.view}`* ({source})"
    return f"{markdown_table(cols, rows)}\n\n<sub>{source}</sub>"


def checkout_commit(root: Path) -> str:
    """The git HEAD of the checkout at ``root`` (with a note when its tree has uncommitted changes)."""
    from heterospec.store.machines import code_commit, commit_text
    head, dirty = code_commit(root)
    return "unknown (not a git checkout)" if head is None else commit_text(head, dirty)


def _listed(what: str, ran: str, items: list[tuple[str, int, str]], note: str = "") -> list[str]:
    """One bullet for one item, else a bullet saying how many (the jobs ``ran`` at / on them) with one sub-bullet
    each (its jobs and stages)."""
    total = sum(n for _, n, _ in items)
    if len(items) == 1:
        return [f"* {what}: {items[0][0]} (recorded by the run's {_jobs(total)}{note})"]
    return [f"* {what}s: the run's {_jobs(total)} ran {ran} {len(items)} {what}s{note}:",
            *(f"  * {text}: {_jobs(n)} ({stages})" for text, n, stages in items)]


def _jobs(n: int) -> str:
    return f"{n} job" + ("" if n == 1 else "s")


def header(db: Path, run: str, commit: str, present: set[str] | None = None) -> list[str]:
    """The page's bullets on what made the run: the commits and machines its jobs recorded (``commit``: the
    checkout's HEAD now, named when it differs from the run's or the run recorded none)."""
    present = _present(db) if present is None else present
    commits, machines = run_commits(db, run, present), run_machines(db, run, present)
    if commits:
        lines = _listed("commit", "at", commits)
        if [c for c, _, _ in commits] != [commit]:
            lines.append(f"* checkout HEAD when this page was generated: {commit}")
    else:
        lines = [f"* commit: {commit} (the checkout's HEAD when this page was generated; the run recorded no "
                 "commit: made before runs recorded it)"]
    if machines:   # training's floats differ by CPU model ([models.md](../models.md#reproducibility))
        lines += _listed("machine", "on", machines, "; compare its numbers with a run's on the same CPU model: "
                         "[models.md](../models.md#reproducibility)")
    else:
        lines.append("* machine: not recorded (the run was made before runs recorded their machine)")
    return lines


def page(db: Path, run: str, commit: str, date: str, present: set[str] | None = None) -> str:
    """``docs/results/<run>.md``: every headline table of the run."""
    present = _present(db) if present is None else present
    head = [f"# Results of run `{run}`", "",
            "Generated by `heterospec results-doc " + run + "` from `" + str(db) + "`; do not edit by hand.", "",
            f"* run: `{run}` (`results/{run}/`)",
            *header(db, run, commit, present),
            f"* generated: {date}", ""]
    body = [f"## {name}\n\n{render(db, run, name, present)}\n" for name in HEADLINES]
    return "\n".join(head) + "\n" + "\n".join(body)


def rewrite_blocks(text: str, where: str, tables: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with each results block's body replaced by ``tables[NAME]``, and the stale ones' "file:line NAME"."""
    lines = text.split("\n")
    out, stale, i = [], [], 0
    while i < len(lines):
        m = BLOCK.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        closing, name = m.groups()
        if closing:
            raise UserError(f"{where}:{i + 1}: <!-- /results: {name} --> without its opening line")
        if name not in HEADLINES:
            raise UserError(f"{where}:{i + 1}: results block {name!r} names no headline table "
                            f"(known: {', '.join(HEADLINES)})")
        end = next((j for j in range(i + 1, len(lines)) if BLOCK.match(lines[j])), None)
        if end is None or BLOCK.match(lines[end]).groups() != ("/", name):
            raise UserError(f"{where}:{i + 1}: results block {name!r} is not closed by <!-- /results: {name} -->")
        body = ["", *tables[name].split("\n"), ""]
        if lines[i + 1:end] != body:
            stale.append(f"{where}:{i + 1} {name}")
        out += [lines[i], *body, lines[end]]
        i = end + 1
    return "\n".join(out), stale


def generate(db: Path, run: str, out_dir: Path | None, readme: Path | None, check: bool,
             commit: str, date: str) -> tuple[Path | None, list[str]]:
    """Write ``out_dir/<run>.md`` (unless ``check``) and rewrite ``readme``'s results blocks (``check``: only
    compare); returns the page written and the README's stale blocks."""
    from heterospec.store.catalog import query
    if not db.exists():
        raise UserError(f"{db}: no catalogue (finish a run first: snakemake --cores all)")
    present = _present(db)
    if not any(t.view in present and query(db, f"SELECT 1 FROM {t.view} WHERE run = {_quoted(run)} LIMIT 1")[1]
               for ts in HEADLINES.values() for t in ts):
        raise UserError(f"run {run}: none of the headline tables has rows in {db}; "
                        f"finished runs: heterospec query \"SELECT DISTINCT run FROM accuracy\"")
    written = None
    if not check and out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = out_dir / f"{run}.md"
        written.write_text(page(db, run, commit, date, present))
    stale: list[str] = []
    if readme is not None and readme.exists():
        text = readme.read_text()
        machines = run_machines(db, run, present)
        new, stale = rewrite_blocks(text, str(readme), {n: render_readme(db, run, n, present, machines)
                                                        for n in HEADLINES})
        if not check and new != text:
            readme.write_text(new)
    return written, stale
