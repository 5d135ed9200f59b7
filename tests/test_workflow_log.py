"""Snakemake's job blocks stay readable in a log: no file list or reason of thousands of characters."""
import logging

from heterospec.workflow_log import ShortJobLines, shorten_list, shorten_reason
from test_workflow import plan, plan_call

DRY_RUNS = [plan_call("default")]   # (conftest starts it in the background)


def test_a_long_list_keeps_its_first_items_and_counts_the_rest():
    assert shorten_list(["aaaa", "bbbb", "cccc"], limit=10) == ["aaaa", "bbbb", "... (1 more)"]   # "aaaa, bbbb" is 10
    assert shorten_list(["aaaa", "bbbb", "cccc"], limit=16) == ["aaaa", "bbbb", "cccc"]            # 16: all fit
    assert shorten_list(["a" * 30, "b"], limit=10) == ["a" * 30, "... (1 more)"]                    # one always shows
    reason = "Missing output files: x1, x2, x3, x4; Input files updated by another job: y1, y2, y3, y4"
    assert shorten_reason(reason, limit=20) == ("Missing output files: x1, x2, x3, ... (1 more); "
                                                "Input files updated by another job: y1, y2, y3, ... (1 more)")
    assert shorten_reason("Forced execution", limit=5) == "Forced execution"


def test_the_filter_cuts_snakemakes_job_record_only_where_it_is_long():
    record = logging.LogRecord("snakemake.logging", logging.INFO, "", 0, "job", None, None)
    record.__dict__.update(input=[f"results/run/t{i}.parquet" for i in range(100)], output=["one.parquet"],
                           reason="Missing output files: one.parquet", rule_name="figure")
    assert ShortJobLines().filter(record)
    assert len(", ".join(record.input)) < 450 and record.input[-1].endswith("more)")
    assert record.output == ["one.parquet"] and record.reason == "Missing output files: one.parquet"


def test_the_default_plan_prints_no_line_over_500_characters(dry_run):
    r = plan(dry_run, "default")
    assert r.returncode == 0, r.stderr[-2000:]
    out = (r.stdout + r.stderr).splitlines()
    assert any(line.startswith("rule collect_variant:") for line in out)   # the job blocks are still there
    assert max(map(len, out)) <= 500, max(out, key=len)[:300]


def test_the_default_plan_starts_the_timed_collects_first_then_the_slowest_variant(dry_run):
    """Priorities, from the plan's job blocks: the timed collects (one job, interleaved; the replay validates them
    alone) before every variant, and among the variants the torch int8 draft (~3 ms a token) before the kernel's, so
    a short job ends the run."""
    r = plan(dry_run, "default")
    assert r.returncode == 0, r.stderr[-2000:]
    rule, algorithm, priority = None, None, {}
    for line in (r.stdout + r.stderr).splitlines():
        if line.startswith("rule "):
            rule = line.split()[1].rstrip(":")
            algorithm = "timed" if rule == "collect_timed" else None
        elif rule in ("collect_shard", "collect_variant") and "wildcards:" in line:
            algorithm = line.split("algorithm=")[1].split(",")[0]
        elif rule in ("collect_shard", "collect_variant", "collect_timed") and line.strip().startswith("priority:"):
            priority.setdefault(algorithm, set()).add(int(line.split(":")[1]))
    assert set(priority) == {"timed", "brsd_u280", "brsd_w8a8"}, priority
    # each variant's two executors in one job (collect_variant), none block-wise per executor (collect_shard)
    rules = [line.split()[1].rstrip(":") for line in (r.stdout + r.stderr).splitlines() if line.startswith("rule ")]
    assert rules.count("collect_variant") == 2 and "collect_shard" not in rules, rules
    assert min(priority["timed"]) > max(priority["brsd_w8a8"]) > max(priority["brsd_u280"])


def test_the_dry_runs_summary_lists_wrap_without_losing_a_rule():
    rules = [f"figure_rule_number_{i}" for i in range(40)]
    text = "Reasons:\n    output files have to be generated:\n        " + ", ".join(rules)
    record = logging.LogRecord("snakemake.logging", logging.INFO, "", 0, text, None, None)
    assert ShortJobLines().filter(record)
    lines = record.msg.split("\n")
    assert max(map(len, lines)) <= 400 and len(lines) > 3
    assert all(line.startswith("        ") for line in lines[2:])
    assert [r.strip(", ") for line in lines[2:] for r in line.strip().split(", ")] == rules
