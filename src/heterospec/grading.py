"""Answer grading shared by the synthetic task and the real benchmarks.

The last ``\\boxed{}`` of a model output is extracted, normalised and compared with the
reference answer: units first (two different units never match), then as strings, then
numerically (relative tolerance 1e-4 with an absolute floor, see :func:`numbers_match`), then
symbolically through ``math-verify``.
"""
from __future__ import annotations

import re
from functools import lru_cache

_REL_TOL = 1e-4
# Only a reference of exactly 0 (where no relative tolerance exists) needs an absolute floor. It must
# stay below every non-zero reference magnitude, so that it never equates two answers a benchmark
# tells apart (the smallest in math500, gsm8k, gaokao2023en and olympiadbench is 6.72e-5), and above
# the rounding of a decimal string to a double (about 1e-16 relative).
_ABS_FLOOR = 1e-9


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        # "\boxed 5" form
        m = re.match(r"\\(?:boxed|fbox)\s+([^\s$]+)", text[start:])
        return m.group(1) if m else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None  # unbalanced: the model stopped inside the box


_UNITS = re.compile(r"\\(?:text|mbox|mathrm)\{\s*(cm|m|km|kg|g|s|hours?|minutes?|days?|dollars?|cents?|units?|degrees?|inches?|feet|meters?)\s*\}")
_UNIT_NAMES = {"meter": "m", "meters": "m", "feet": "foot", "inches": "inch"}


def unit(ans: str) -> str | None:
    """The unit written after an answer (``5\\text{ cm}`` -> ``cm``), singular; None when there is none."""
    found = _UNITS.findall(ans)
    if not found:
        return None
    name = found[-1]
    return _UNIT_NAMES.get(name, name[:-1] if len(name) > 3 and name.endswith("s") else name)


def normalize(ans: str) -> str:
    """Canonical string form of an answer: no spaces, dollars, units, ``\\left``/``\\right``, trailing dot."""
    s = ans.strip()
    s = _UNITS.sub("", s)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\ ", ""),
                     ("dfrac", "frac"), ("tfrac", "frac"), ("^\\circ", ""), ("^{\\circ}", ""),
                     ("\\$", ""), ("$", ""), ("\\%", ""), ("%", "")):
        s = s.replace(old, new)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if re.fullmatch(r"-?[\d,]+(\.\d+)?", s) and "," in s and re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")  # thousands separators
    if re.fullmatch(r"-?\d+\.\d*?0+", s):
        s = s.rstrip("0").rstrip(".")
    return s


_SCI = re.compile(r"(-?\d+(?:\.\d+)?)(?:\\times|\\cdot|\*)10\^(?:\{(-?\d+)\}|(-?\d))")


def _as_number(s: str) -> float | None:
    m = _SCI.fullmatch(s)  # 1.5\times10^{-3}
    if m:
        return float(m.group(1)) * 10.0 ** int(m.group(2) or m.group(3))
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    if m:
        den = float(m.group(3))
        return None if den == 0 else (-1 if m.group(1) else 1) * float(m.group(2)) / den
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)/(-?\d+(?:\.\d+)?)", s)
    if m:
        den = float(m.group(2))
        return None if den == 0 else float(m.group(1)) / den
    try:
        return float(s)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _symbolic_equal(pred: str, gold: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:  # pragma: no cover - math-verify is a declared dependency
        return False
    try:
        g = parse("$" + gold + "$")
        p = parse("$" + pred + "$")
        return bool(g and p and verify(g, p))
    except Exception:  # math-verify raises many kinds of parser errors on free text
        return False


def numbers_match(pred: float, gold: float) -> bool:
    """``|pred - gold| <= 1e-4 * |gold|``, or within the absolute floor 1e-9 (for a reference of 0)."""
    return abs(pred - gold) <= max(_REL_TOL * abs(gold), _ABS_FLOOR)


def answers_match(pred: str, gold: str) -> bool:
    """True when two extracted answers are equal as strings, as numbers or symbolically.

    A unit counts where both answers state one: ``5\\text{ cm}`` matches ``5`` but not ``5\\text{ m}``.
    """
    pu, gu = unit(pred), unit(gold)
    if pu is not None and gu is not None and pu != gu:
        return False
    p, g = normalize(pred), normalize(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is not None and gn is not None:
        return numbers_match(pn, gn)
    return _symbolic_equal(pred, gold)


def grade(output: str, gold: str) -> bool:
    """Grade a model output (its last ``\\boxed{}``) against the reference answer."""
    pred = last_boxed(output)
    return pred is not None and answers_match(pred, gold)
