"""Trace tables of a serving run (:mod:`heterospec.serve`): fixed, versioned pyarrow schemas.

A serving run serves ``serving.requests`` requests at each load point, ``serving.repeats`` times; ``load_index`` and
``repeat`` name one such run, ``request`` a request in it.

* ``serving_requests/v1`` — one row per request: when it arrived and ended, how long it queued for each role, and
  the problem row a collect writes (its outputs).
* ``serving_calls/v1`` — one row per model call, the ``collect_calls/v3`` columns (times from the request's arrival)
  plus when its job waited and the passes it ran in (``serving_passes``).
* ``serving_steps/v1`` — the controller's steps (the ``collect_steps/v1`` columns) per request.
* ``serving_passes/v1`` — one row per forward pass of a worker: which requests it carried, what each held and was
  fed, its time (from the run's start).
* ``batch_prices/v1`` — the passes as measured batched prices (:mod:`heterospec.replay.profiles.batch_prices`' schema).
"""
from __future__ import annotations

import pyarrow as pa

from heterospec.reasoning.collect_schemas import (COLLECT_CALLS_SCHEMA, COLLECT_KVMU_SCHEMA, COLLECT_PROBLEMS_SCHEMA,
                                                  COLLECT_STEPS_SCHEMA)
from heterospec.store import versioned

_RUN = [
    pa.field("run", pa.string()),
    pa.field("models", pa.string()),
    pa.field("dataset", pa.string()),
    pa.field("algorithm", pa.string()),      # rsd | brsd
    pa.field("load_index", pa.int32()),      # which of serving.loads (or serving.timestamps)
    pa.field("repeat", pa.int32()),          # 0, 1, ...: the rounds over the load points
]
_REQUEST = [pa.field("request", pa.int32())]   # 0, 1, ... in arrival order within its run

_COLLECT_RUN = {"run", "models", "dataset", "algorithm", "executor"}


def _collect_fields(schema: pa.Schema) -> list[pa.Field]:
    return [f for f in schema if f.name not in _COLLECT_RUN]


SERVING_REQUESTS_SCHEMA = versioned("serving_requests", 1, _RUN + _REQUEST + [
    pa.field("sequence", pa.int32()),        # the run's place in the session (load points interleave with repeats)
    pa.field("arrivals", pa.string()),       # poisson | closed | timestamps
    pa.field("load", pa.float64()),          # serving.loads' value (a multiple of the unloaded rate; clients)
    pa.field("rate_per_s", pa.float64()),    # poisson: the arrival rate; else null
    pa.field("unloaded_s", pa.float64()),    # mean latency of the problems served one at a time (the rate's unit)
    pa.field("run_started_unix_s", pa.float64()),   # wall clock at the run's start (drift across a session)
    pa.field("client", pa.int32()),          # closed loop: the client that sent it; else -1
    pa.field("arrival_s", pa.float64()),     # from the run's start
    pa.field("finish_s", pa.float64()),      # from the run's start: its last step settled
    pa.field("draft_queue_s", pa.float64()), # time its jobs waited in each role's queue
    pa.field("prm_queue_s", pa.float64()),
    pa.field("target_queue_s", pa.float64()),
    # the collect's problem row; latency_s = finish_s - arrival_s
    *_collect_fields(COLLECT_PROBLEMS_SCHEMA),
])

SERVING_CALLS_SCHEMA = versioned("serving_calls", 1, _RUN + _REQUEST + _collect_fields(COLLECT_CALLS_SCHEMA) + [
    pa.field("enqueued_ns", pa.int64()),     # its job joined the role's queue (from the request's arrival)
    pa.field("queued_ns", pa.int64()),       # from joining the queue to its first pass (its job's first call; else 0)
    pa.field("pass_first", pa.int64()),      # the role's passes (serving_passes.seq) it ran in, first and last
    pa.field("pass_last", pa.int64()),
    pa.field("batch", pa.float64()),         # mean requests per pass over them
])

SERVING_STEPS_SCHEMA = versioned("serving_steps", 1, _RUN + _REQUEST + _collect_fields(COLLECT_STEPS_SCHEMA))

SERVING_PASSES_SCHEMA = versioned("serving_passes", 1, _RUN + [
    pa.field("role", pa.string()),           # draft | prm | target
    pa.field("seq", pa.int64()),             # the role's pass number in its worker
    pa.field("phase", pa.string()),          # prefill | decode | score
    pa.field("batch", pa.int32()),           # requests in the pass
    pa.field("requests", pa.list_(pa.int32())),
    pa.field("held", pa.list_(pa.int32())),  # per request: tokens its KV cache held before the pass
    pa.field("fed", pa.list_(pa.int32())),   # per request: tokens fed (the pass pads them to the longest)
    pa.field("start_ns", pa.int64()),        # from the run's start
    pa.field("end_ns", pa.int64()),
    pa.field("cpu_ns", pa.int64()),          # the worker's CPU time in it (wall less the time others had its core)
    pa.field("forwards", pa.int32()),        # model forwards it stands for: 1; the draft lane's decode call: per token
])

# the draft's KVMU log per request, as a collect logs it (the software twin's transitions, or a kernel's registers)
SERVING_KVMU_SCHEMA = versioned("serving_kvmu", 1, _RUN + _REQUEST + _collect_fields(COLLECT_KVMU_SCHEMA))

SERVING_TABLES = {"requests": SERVING_REQUESTS_SCHEMA, "calls": SERVING_CALLS_SCHEMA, "steps": SERVING_STEPS_SCHEMA,
                  "passes": SERVING_PASSES_SCHEMA, "kvmu": SERVING_KVMU_SCHEMA}
