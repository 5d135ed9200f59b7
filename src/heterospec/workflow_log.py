"""Snakemake's job blocks, kept readable in a log.

Snakemake prints each job with every input and output file and the reason it runs ("Missing output files: ...",
"Input files updated by another job: ..."), each list on one line: a figure that reads twenty tables gives a line
of thousands of characters in the console, in ``.snakemake/log/`` and in CI. :class:`ShortJobLines` cuts each such
list to its first files and says how many more there are (and wraps the dry run's summary lists of rules); the rule, its wildcards, threads and resources stay as
Snakemake prints them, and the job's rule log under ``results/<run>/logs/`` has the details.
The Snakefile installs it on Snakemake's logger (:func:`install`).
"""
from __future__ import annotations

import logging

LIMIT = 400   # characters of one file list or reason; the rest becomes "... (N more)"


def shorten_list(items: list[str], limit: int = LIMIT) -> list[str]:
    """The first ``items`` that fit in ``limit`` characters (joined by ", "), then "... (N more)"."""
    if len(", ".join(items)) <= limit:
        return items
    kept: list[str] = []
    for item in items:
        if kept and len(", ".join(kept + [item])) > limit:
            break
        kept.append(item)
    return kept + [f"... ({len(items) - len(kept)} more)"]


def shorten_reason(reason: str, limit: int = LIMIT) -> str:
    """Each "Label: a, b, c" clause of a reason (clauses split by "; ") with its list cut as :func:`shorten_list`,
    the clauses sharing ``limit`` between them."""
    parts = reason.split("; ")
    clauses = []
    for clause in parts:
        label, sep, rest = clause.partition(": ")
        cut = ", ".join(shorten_list(rest.split(", "), limit // len(parts)))
        clauses.append(label + sep + cut if sep else clause)
    return "; ".join(clauses)


def wrap_lists(text: str, limit: int = LIMIT) -> str:
    """Lines of ``text`` longer than ``limit`` that are comma-separated lists (the dry run's summary of the rules each
    reason applies to) wrapped into several lines of the same indentation; other lines as they are."""
    out = []
    for line in text.split("\n"):
        if len(line) <= limit or ", " not in line:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        cur = ""
        for item in line.strip().split(", "):
            if cur and len(indent) + len(cur) + len(item) + 2 > limit:
                out.append(indent + cur + ",")
                cur = item
            else:
                cur = f"{cur}, {item}" if cur else item
        out.append(indent + cur)
    return "\n".join(out)


class ShortJobLines(logging.Filter):
    """Cuts the file lists and the reason of Snakemake's job records (every handler then prints them short)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in ("input", "output", "log"):
            files = record.__dict__.get(key)
            if isinstance(files, list) and all(isinstance(f, str) for f in files):
                record.__dict__[key] = shorten_list(files)
        reason = record.__dict__.get("reason")
        if isinstance(reason, str):
            record.__dict__["reason"] = shorten_reason(reason)
        if isinstance(record.msg, str) and not record.args and len(record.msg) > LIMIT:
            record.msg = wrap_lists(record.msg)
        return True


def install() -> None:
    """Add :class:`ShortJobLines` to Snakemake's logger (once)."""
    log = logging.getLogger("snakemake.logging")
    if not any(isinstance(f, ShortJobLines) for f in log.filters):
        log.addFilter(ShortJobLines())
