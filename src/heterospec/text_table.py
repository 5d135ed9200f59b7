"""Plain aligned text tables for the terminal: the CLI and every stage that prints a summary use this one."""
from __future__ import annotations


def format_cell(v) -> str:
    """One value as every table shows it: floats to 4 significant digits (whole above 1e5), None empty."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
    return str(v).replace("\n", "\\n")


def format_table(columns: list[str], rows: list[tuple]) -> str:
    """A plain aligned text table."""
    body = [[format_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(columns)]

    def line(vals: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in body]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
