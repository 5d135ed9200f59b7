"""The ``serving`` section checked before anything runs: one line naming the key for each thing a serving run cannot
do (docs/serving.md)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from heterospec.config.collect_variants import draft_implementation, is_variant
from heterospec.config.drafts import is_board
from heterospec.errors import UserError
from heterospec.arrivals import ARRIVAL_KINDS
from heterospec.trio import ROLES

BATCHING_DRAFTS = ("model",)        # draft implementations with a batched forward pass (the float checkpoint)
LANE_DRAFTS = ("model", "w8a8")     # ... and those that can keep one KV cache per request in flight (and a board's
                                    # kernel: a slot of the batch kernel per request, heterospec.hls.kernel_serving)


def serving_dataset(cfg: DictConfig) -> str:
    """The dataset a serving run draws its problems from: ``serving.dataset``, else the run's first."""
    name = str(cfg.serving.dataset) or str(cfg.datasets[0])
    if name not in cfg.datasets:
        raise UserError(f"serving.dataset: '{name}' is not one of the run's datasets {list(cfg.datasets)}")
    return name


def load_points(cfg: DictConfig) -> list[float | str]:
    """One entry per load point: a rate multiple (poisson), a number of clients (closed) or a file (timestamps)."""
    s = cfg.serving
    kind = str(s.arrivals)
    if kind not in ARRIVAL_KINDS:
        raise UserError(f"serving.arrivals: '{kind}', expected one of {list(ARRIVAL_KINDS)}")
    if kind == "timestamps":
        if not s.timestamps:
            raise UserError("serving.timestamps: empty; arrivals=timestamps needs one file of arrival times per load "
                            "point")
        for i, f in enumerate(s.timestamps):
            if not Path(str(f)).is_file():
                raise UserError(f"serving.timestamps[{i}]: {f} not found")
        return [str(f) for f in s.timestamps]
    if not s.loads:
        raise UserError("serving.loads: empty; give at least one load point")
    for i, x in enumerate(s.loads):           # each > 0 already (the schema's range: heterospec.config.ranges)
        if kind == "closed" and not (float(x) >= 1 and float(x) == int(x)):
            raise UserError(f"serving.loads[{i}]: {x}, expected a whole number of clients >= 1 (arrivals=closed)")
    return [float(x) for x in s.loads]


def check_serving(cfg: DictConfig) -> None:
    """Everything about ``serving`` that the config alone decides beyond its numbers' ranges (checked at compose); the
    KV bound needs the models (:func:`heterospec.serve.check_kv_room`)."""
    s = cfg.serving
    load_points(cfg)
    alg = str(s.algorithm)
    if alg not in cfg.collect.algorithms or is_variant(cfg, alg) or "sequential" not in cfg.collect.executors:
        raise UserError(f"serving.algorithm: '{alg}', expected an algorithm config that the run collects with the "
                        f"sequential executor (collect.algorithms {list(cfg.collect.algorithms)}, collect.executors "
                        f"{list(cfg.collect.executors)}): its sequential collect is what the served outputs must equal")
    serving_dataset(cfg)
    for role in ROLES:
        if s.max_batch.get(role) is None:
            raise UserError(f"serving.max_batch.{role}: missing; give each role's most requests per pass")
    extra = sorted(set(s.max_batch) - set(ROLES))
    if extra:
        raise UserError(f"serving.max_batch.{extra[0]}: not a role; expected keys {list(ROLES)}")
    draft = draft_implementation(cfg)
    if draft not in LANE_DRAFTS and not is_board(draft):
        raise UserError(f"collect.draft={draft}: a serving run keeps one draft KV cache per request in flight; "
                        f"serve with collect.draft=model, w8a8 or a board of hls.boards (its kernel's slots)")
    if int(s.max_batch.draft) > 1 and draft not in BATCHING_DRAFTS and not is_board(draft):
        raise UserError(f"serving.max_batch.draft: {s.max_batch.draft}, but collect.draft={draft} cannot batch "
                        f"(one sequence per pass); use 1, or collect.draft=model")
