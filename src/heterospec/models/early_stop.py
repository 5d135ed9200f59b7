"""When training stops early: a measured bar checked every few steps, and the dense second look near it.

:class:`Validation` says what is measured and where the bar lies; :class:`EarlyStop` is the state machine the
training loop asks at each check: go on, stop (keeping the weights nearest the bar), or go back to the previous check
and train the same batches again with denser checks.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


@dataclass
class Validation:
    """A measured stop: training ends at the first check whose ``measure`` reaches the bar.

    Checks fall every ``every`` steps. With ``every_near``, a measure that reaches the bar but lands below
    ``again_below`` (it fell through the window the bar sets between two checks) sends training back to the
    previous check, whose weights and optimiser state were kept, and the same batches are trained again
    with a check every ``every_near`` steps (training is deterministic, so the replay retraces the same weights);
    it stops at the first of those checks that reaches the bar and keeps the weights of whichever of that check
    and the one before sits nearer the bar. A measure that drops steeply (a draft learning the task between two
    checks) thus stops near the bar, at the cost of one interval trained twice.
    """
    name: str                           # what is measured, for the log ("step error", "AUROC")
    key: str                            # the manifest's field for the value at the stop
    bar: float
    measure: Callable[[Any], float]     # model -> value, in eval mode, no gradients
    reached: Callable[[float], bool]
    every: int
    every_near: int = 0
    again_below: float = float("-inf")  # with every_near: a check that reaches the bar below this fell through its window

    def check(self, model) -> float:
        model.eval()
        with torch.no_grad():
            value = self.measure(model)
        model.train()
        return value

    def nearer(self, a: float, b: float) -> bool:
        """Whether ``a`` sits nearer the bar than ``b``."""
        return abs(a - self.bar) < abs(b - self.bar)


@dataclass
class _Mark:
    """The last regular check before any replay: where training can go back to."""
    progress: Any                       # the loop's own record of where it stood (its snapshot())
    value: float
    weights: dict
    optimiser: dict


class EarlyStop:
    """A :class:`Validation` applied during training. The loop takes its batches from :meth:`next_batch` (a replay
    hands back the batches it trained since the mark), and at each :meth:`due` step calls :meth:`check`.

    ``progress`` is the loop's record of where it stands: its ``step``, ``snapshot()`` (a copy) and
    ``restore(snapshot)``, so that going back restores the step count, tokens and loss average as they were.
    """

    def __init__(self, validation: Validation, steps: int, log: Callable[[str], None]):
        self.v, self.steps, self.log = validation, steps, log
        self.next_check = validation.every
        self.mark: _Mark | None = None      # with every_near: the last regular check, to go back to
        self.since_mark: list[dict] = []    # the batches trained since it, to train again with denser checks
        self.to_replay: list[dict] = []     # batches still to train again
        self.replayed = 0                   # batches sent back to train again (0: not gone back)
        self.previous: tuple[int, float, dict] | None = None  # the replay's last check: (step, value, weights)
        self.stopped: dict | None = None    # the manifest's fields at the stop

    def next_batch(self, data: Iterator[dict]) -> dict:
        """The next batch to train: one sent back for the replay, else a fresh one (kept while a mark stands)."""
        batch = self.to_replay.pop(0) if self.to_replay else next(data)
        if self.mark is not None and not self.replayed:
            self.since_mark.append(batch)
        return batch

    def due(self, step: int) -> bool:
        return step == self.next_check

    def check(self, model, opt, progress) -> bool:
        """Measure the model at a due step and decide; True: training stops here, ``model`` holding the weights kept."""
        v, step = self.v, progress.step
        value = v.check(model)
        self.log(f"step {step}: {v.name} {value:.3f} (stops at {v.bar})")
        if v.reached(value):
            if v.every_near > 0 and value < v.again_below and not self.replayed and self.mark is not None:
                self._go_back(model, opt, progress)   # it reached the bar somewhere in the last interval
                return False
            self._stop(model, step, value)
            return True
        if self.replayed:
            self.previous = (step, value, copy.deepcopy(model.state_dict()))
            self.next_check = step + v.every_near
        else:
            if v.every_near > 0:
                self.mark = _Mark(progress.snapshot(), value, copy.deepcopy(model.state_dict()),
                                  copy.deepcopy(opt.state_dict()))
                self.since_mark = []
            self.next_check = step + v.every
        return False

    def fields(self) -> dict:
        """The manifest's fields: where it stopped (None: it ran every step), and the steps trained twice."""
        out = dict(self.stopped or {"stopped_at": None})
        if self.v.every_near > 0:
            out["steps_trained_twice"] = self.replayed
        return out

    def _go_back(self, model, opt, progress) -> None:
        """Back to the mark: its weights, optimiser state and progress; the batches since it to train again."""
        m = self.mark
        progress.restore(m.progress)
        model.load_state_dict(m.weights)
        opt.load_state_dict(m.optimiser)
        self.previous, self.to_replay, self.replayed = (progress.step, m.value, m.weights), self.since_mark, \
            len(self.since_mark)
        self.next_check = progress.step + self.v.every_near
        self.log(f"back to step {progress.step}: training steps {progress.step + 1}-{progress.step + self.replayed} "
                 f"again with a check every {self.v.every_near} steps")

    def _stop(self, model, step: int, value: float) -> None:
        """Stop at this check, or keep the replay's previous check's weights when they sit nearer the bar."""
        v = self.v
        self.stopped = {"stopped_at": step, v.key: round(value, 4)}
        self.log(f"stopping at step {step} of {self.steps} ({v.name} reached {v.bar})")
        if self.replayed and self.previous is not None and v.nearer(self.previous[1], value):
            at, kept, weights = self.previous
            model.load_state_dict(weights)
            self.stopped = {"stopped_at": at, v.key: round(kept, 4)}
            self.log(f"keeping step {at}'s weights ({v.name} {kept:.3f} is nearer {v.bar} than {value:.3f})")
