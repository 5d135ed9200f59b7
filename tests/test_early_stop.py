"""The early stop's state machine (heterospec.models.early_stop) on a one-weight model trained with momentum.

The measure is a scripted error by step, so every decision is worked by hand: which steps are checked, where training
goes back to, which weights are kept. The oracle for the weights is a straight run of the same batches: going back
restores weights, optimiser state and progress, so the kept weights equal the straight run's at that step, bit for bit.
"""
from __future__ import annotations

import torch

from heterospec.models.early_stop import EarlyStop, Validation
from heterospec.models.train import TrainingProgress

BAR = 0.15


def _error(step: int) -> float:
    """Falls by 0.05 a step from 1 at step 0: 0.5 at 10, 0.2 at 16, 0.15 at 17, 0.05 at 19, 0 from 20 on."""
    return max(0.0, 1 - step / 20)


def _batches():
    i = 0
    while True:
        i += 1
        yield {"x": torch.tensor([(i % 7 + 1) / 10]), "attention_mask": torch.ones(1, i % 3 + 1), "id": i}


def _train(steps: int, every: int = 10, every_near: int = 0, again_below: float = float("-inf"), stop: bool = True,
           error=_error):
    """Train up to ``steps`` with (or, ``stop=False``, without) the early stop; (model, progress, stop, the ids of
    the batches trained in order, log lines)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run, trained, lines, data = TrainingProgress(), [], [], _batches()
    validation = Validation("scripted error", "validation_step_error", BAR, lambda m: error(run.step),
                            lambda v: v <= BAR, every, every_near, again_below)
    early = EarlyStop(validation, steps, lines.append) if stop else None
    while run.step < steps:
        batch = early.next_batch(data) if early else next(data)
        loss = (model(batch["x"]) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        run.add(batch, loss.item())
        trained.append(batch["id"])
        if early and early.due(run.step) and early.check(model, opt, run):
            break
    return model, run, early, trained, lines


def _checks(lines: list[str]) -> list[int]:
    return [int(line.split("step ")[1].split(":")[0]) for line in lines if "(stops at" in line]


def test_without_reaching_the_bar_every_step_is_trained():
    _, run, early, _, lines = _train(30, error=lambda step: 0.9)
    assert _checks(lines) == [10, 20, 30] and run.step == 30
    assert early.fields() == {"stopped_at": None}


def test_it_stops_at_the_first_check_that_reaches_the_bar():
    model, run, early, trained, lines = _train(40)
    assert _checks(lines) == [10, 20] and run.step == 20 and trained == list(range(1, 21))
    assert early.fields() == {"stopped_at": 20, "validation_step_error": 0.0}
    assert "stopping at step 20 of 40 (scripted error reached 0.15)" in lines


def test_a_stop_that_fell_through_the_window_is_found_again_densely():
    """Step 20's error (0) lies below again_below (0.10): back to step 10, the same batches 11-20 again with a check
    every 3 steps: 13 (0.35), 16 (0.2), 19 (0.05, reached). 16's 0.2 sits nearer the bar than 19's 0.05: kept."""
    model, run, early, trained, lines = _train(40, every_near=3, again_below=0.10)
    assert _checks(lines) == [10, 20, 13, 16, 19]
    assert trained == list(range(1, 21)) + list(range(11, 20))   # the replay trains the very same batches
    assert "back to step 10: training steps 11-20 again with a check every 3 steps" in lines
    assert early.fields() == {"stopped_at": 16, "validation_step_error": 0.2, "steps_trained_twice": 10}
    straight, straight_run, *_ = _train(16, stop=False)
    assert torch.equal(model.weight, straight.weight)   # weights and momentum went back: the same weights, bit for bit
    assert run.step == 19 and run.tokens == _train(19, stop=False)[1].tokens


def test_the_replays_own_check_is_kept_when_nearer():
    """A bar the replay's check at 16 reaches exactly: it stops there with 16's own weights."""
    error = {10: 0.5, 20: 0.0, 13: 0.4, 16: 0.14}.get
    model, _, early, _, lines = _train(40, every_near=3, again_below=0.10, error=lambda s: error(s, 0.9))
    assert _checks(lines) == [10, 20, 13, 16]
    assert early.fields() == {"stopped_at": 16, "validation_step_error": 0.14, "steps_trained_twice": 10}
    assert torch.equal(model.weight, _train(16, stop=False)[0].weight)


def test_a_stop_inside_the_window_or_at_the_first_check_does_not_go_back():
    _, _, early, trained, lines = _train(40, every_near=3, again_below=-1.0)   # 0 at step 20 is not below -1
    assert _checks(lines) == [10, 20] and early.fields()["stopped_at"] == 20 and trained == list(range(1, 21))
    _, _, early, _, lines = _train(40, every=20, every_near=3, again_below=0.10)  # no earlier check to go back to
    assert _checks(lines) == [20] and early.fields() == {"stopped_at": 20, "validation_step_error": 0.0,
                                                         "steps_trained_twice": 0}
