"""Progress reads well wherever it lands: off a terminal (a Snakemake log, CI, a redirected file) a stage's loop
writes whole lines — no carriage return, none longer than 500 characters, a bounded number of them — while a
terminal still gets tqdm's live bar. The clock is injected, so no test waits."""
from __future__ import annotations

import io
import os
import subprocess
import sys

from omegaconf import OmegaConf

from heterospec.config import compose_config
from heterospec.dfvg.methods import prompts, run_method
from heterospec.progress import LineProgress, progress
from heterospec.speculative.decoder import Pair


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _readable(text: str) -> list[str]:
    assert "\r" not in text, repr(text[:200])
    lines = text.splitlines()
    assert all(len(x) <= 500 for x in lines), max(lines, key=len)[:200]
    return lines


def test_a_stage_loop_writes_plain_lines_off_a_terminal(tiny, capsys):
    """The DFVG stage's decoding loop (a real, randomly initialised model) into captured stderr, not a terminal."""
    model, tok = tiny
    cfg = compose_config(["experiment=dfvg", "dfvg.prompts=12", "dfvg.max_new_tokens=4"])
    items = prompts(cfg, tok)
    gens, _ = run_method(Pair(model, model, tok), OmegaConf.create(cfg), "target_greedy", items)
    assert len(gens) == 12
    lines = _readable(capsys.readouterr().err)
    mine = [x for x in lines if "progress: dfvg target_greedy:" in x]
    assert mine and "12/12 prompt (100 %), done in" in mine[-1], lines


def test_lines_at_steps_and_intervals_with_fields_and_a_final_line():
    out, clock = io.StringIO(), Clock()
    bar = progress(range(100), desc="collect synthetic/brsd/sequential 0", unit="problem", file=out, clock=clock)
    assert isinstance(bar, LineProgress)
    for i in bar:
        clock.t += 1.0                    # 100 s in all: ten 10 % steps, each 10 s after the last line
        bar.set_postfix(acc=f"{i}%", refresh=False)
    lines = _readable(out.getvalue())
    assert len(lines) == 10, lines        # 9 steps (10 % .. 90 %) and the final line; 100 % is the final line
    assert "10/100 problem (10 %)" in lines[0] and "~1m30s left" in lines[0] and lines[0].endswith("acc=9%")
    assert lines[-1].endswith("100/100 problem (100 %), done in 1m40s, acc=99%"), lines[-1]


def test_a_fast_loop_stays_quiet_and_a_slow_one_reports_every_interval():
    out, clock = io.StringIO(), Clock()
    for _ in progress(range(1000), desc="fast", file=out, clock=clock):
        clock.t += 0.001                  # 1 s in all: steps closer than min_gap_s write nothing
    assert len(_readable(out.getvalue())) == 1
    out, clock = io.StringIO(), Clock()
    for _ in progress(iter(range(10)), desc="slow, total unknown", file=out, clock=clock):
        clock.t += 31.0                   # no total, so no steps: a line per 30 s interval
    lines = _readable(out.getvalue())
    assert len(lines) == 11 and "10 it, done in 5m10s" in lines[-1], lines


def test_long_fields_are_cut_a_stopped_loop_says_so_and_disable_writes_nothing():
    out, clock = io.StringIO(), Clock()
    bar = progress(range(10), desc="x" * 1000, file=out, clock=clock)
    for i in bar:
        if i == 3:
            break
    bar.close()
    bar.close()                           # idempotent: one final line
    (line,) = _readable(out.getvalue())
    assert len(line) <= 300
    out = io.StringIO()
    for _ in progress(range(10), desc="quiet", disable=True, file=out):
        pass
    assert out.getvalue() == ""
    out = io.StringIO()
    bar = progress(range(10), desc="stopped", file=out, clock=Clock())
    next(iter(bar))
    bar.close()
    assert "stopped after 0s" in out.getvalue()


def test_a_terminal_still_gets_the_live_bar():
    term = Terminal()
    for _ in progress(range(5), desc="on a terminal", file=term):
        pass
    assert "\r" in term.getvalue() and "on a terminal" in term.getvalue()


def test_loading_a_model_writes_no_library_bar_into_a_log(tiny, tmp_path):
    """transformers draws its own "Loading weights" bar; in a stage whose stderr is a file it stays off."""
    model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    code = ("from heterospec.models.loading import load_causal_lm; "
            f"load_causal_lm({str(tmp_path / 'm')!r}, role='draft'); print('loaded')")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    with open(tmp_path / "log", "w") as log:
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert r.returncode == 0 and r.stdout == "loaded\n", (tmp_path / "log").read_text()
    text = (tmp_path / "log").read_text()
    _readable(text)
    assert "Loading weights" not in text and "it/s]" not in text, text     # no bar at all, not even as lines
