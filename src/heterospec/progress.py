"""Progress of a long loop, readable wherever it lands: a live tqdm bar on a terminal; elsewhere (a Snakemake log,
CI, output redirected to a file) one plain line now and then, never a carriage return.

A bar redraws itself with ``\\r``; in a file every redraw stays, so a log ends up with lines of hundreds of
updates. Off a terminal we write a line when the loop crosses a ``step_pct`` step (no closer than ``min_gap_s``
to the previous line) or when ``every_s`` seconds have passed, and one at the end.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, TextIO

MAX_LINE = 300   # a postfix or description never makes a log line longer than this


def progress(iterable: Iterable, desc: str, unit: str = "it", total: int | None = None, disable: bool = False,
             file: TextIO | None = None, every_s: float = 30.0, step_pct: float = 10.0, min_gap_s: float = 5.0,
             clock: Callable[[], float] = time.monotonic):
    """Wrap ``iterable`` with progress on ``file`` (stderr): a bar on a terminal, else periodic lines.
    The result iterates like ``iterable`` and takes ``set_postfix(**fields)``."""
    file = sys.stderr if file is None else file
    if _is_terminal(file):
        from tqdm import tqdm
        return tqdm(iterable, desc=desc, unit=unit, total=total, disable=disable, file=file, mininterval=2)
    return LineProgress(iterable, desc, unit, total, disable, file, every_s, step_pct, min_gap_s, clock)


def quiet_library_bars(file: TextIO | None = None) -> None:
    """Off a terminal, turn off Hugging Face's own bars (transformers' "Loading weights", hub downloads), which
    would write ``\\r``-updates into the log; set in the environment, so worker processes inherit it."""
    if _is_terminal(sys.stderr if file is None else file):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:      # imported already: the variable was read, tell the library
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def _is_terminal(file: Any) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class LineProgress:
    """Progress as whole lines: ``HH:MM:SS progress: <desc>: 12/40 problem (30 %), 1m12s, ~2m48s left, acc=62%``."""

    def __init__(self, iterable: Iterable, desc: str, unit: str, total: int | None, disable: bool, file: TextIO,
                 every_s: float, step_pct: float, min_gap_s: float, clock: Callable[[], float]):
        self.iterable, self.desc, self.unit, self.file, self.disable = iterable, desc, unit, file, disable
        if total is None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except TypeError:
                total = None
        self.total, self.n = total, 0
        self.every_s, self.step_pct, self.min_gap_s, self.clock = every_s, step_pct, min_gap_s, clock
        self.postfix: dict[str, Any] = {}
        self.t0 = self.last = clock()
        self.next_pct = step_pct

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __len__(self) -> int:
        return self.total or 0

    def set_postfix(self, refresh: bool = True, **fields: Any) -> None:
        """Fields shown at the end of the next line (as tqdm's ``set_postfix``; ``refresh`` is accepted and ignored)."""
        self.postfix = fields

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done; write a line when a step or the interval is reached."""
        self.n += n
        if self.disable or self.file is None:
            return
        now = self.clock()
        pct = 100 * self.n / self.total if self.total else None
        due_step = pct is not None and pct >= self.next_pct and now - self.last >= self.min_gap_s
        if (due_step or now - self.last >= self.every_s) and (self.total is None or self.n < self.total):
            self._write(now)

    def close(self) -> None:
        """Write the final line once (the loop ended, finished or not)."""
        if self.disable or self.file is None:
            return
        self._write(self.clock(), final=True)
        self.file = None   # closed: a second close writes nothing

    def _write(self, now: float, final: bool = False) -> None:
        self.last = now
        if self.total:
            pct = 100 * self.n / self.total
            while self.next_pct <= pct:
                self.next_pct += self.step_pct
            done = f"{self.n}/{self.total} {self.unit} ({pct:.0f} %)"
        else:
            done = f"{self.n} {self.unit}"
        spent = now - self.t0
        parts = [done, _duration(spent)]
        if final:
            parts[1] = f"done in {parts[1]}" if self.total is None or self.n >= self.total else f"stopped after {parts[1]}"
        elif self.total and self.n:
            parts.append(f"~{_duration(spent * (self.total - self.n) / self.n)} left")
        parts += [f"{k}={v}" for k, v in self.postfix.items()]
        line = f"{time.strftime('%H:%M:%S')} progress: {self.desc}: {', '.join(parts)}"
        self.file.write(line[:MAX_LINE] + "\n")
        self.file.flush()


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
