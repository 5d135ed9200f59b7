"""The ids that key what one stage hands the next (the HLS perf table the replay reads): a board by its hardware
config name, a draft model by its published name or its models config, a clock in whole kHz."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def board_id(device: Any) -> str:
    """A board's id: its hardware config name (``u280``), as a Device or a hardware config node carries it."""
    return str(device.name)


def draft_model_id(models: Any) -> str:
    """The run's draft: a hub checkpoint's last path part (``Qwen2.5-0.5B-Instruct``), else the models config name
    of a trio trained here (``tiny``)."""
    d = models["draft"]
    return Path(str(d.path)).name if d.source == "hub" else str(models.name)


def clock_khz(mhz: float) -> int:
    """A clock as whole kHz: the key clocks are matched by (never float equality on MHz)."""
    return round(float(mhz) * 1000)
