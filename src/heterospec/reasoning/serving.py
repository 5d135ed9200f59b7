"""Serving: several problems in flight through one Session's three workers, each role a queue.

Every request runs the paper's controller (:func:`~heterospec.reasoning.controller.solve`) through the sequential
executor, unchanged, in a thread of its own; only its roles are stand-ins (:class:`RequestRole`) that put each call
on the role's queue and wait. One :class:`Dispatcher`, in the calling thread, owns the workers' pipes and takes work
off the queues as each role frees up (:mod:`heterospec.reasoning.serving_roles` holds the workers' side):

* draft: one write at a time, first come first served (the FPGA's batch-1 lane); with ``max_batch.draft`` > 1 it
  batches like the target;
* PRM: every score waiting (up to its max batch) in one pass;
* target: continuous batching; writes join between passes (up to its max batch) and leave when their step ends.

A request's calls are the sequential executor's, in its order, each on the request's own KV cache: under greedy
decoding its steps, scores and answer are the sequential executor's (padding aside: see
:mod:`heterospec.models.batching`). Batching changes when a call runs, and that is what the trace records.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any

from heterospec.reasoning.controller import solve
from heterospec.reasoning.executors import Sequential
from heterospec.reasoning.session import trace_rows
from heterospec.trio import ROLES



@dataclass
class RoleCall:
    """One call of a request on a role's queue (``method`` ``write`` or ``score``), or a command sent at once
    (``open``, ``release``); ``wait()`` blocks until the dispatcher has its answer."""
    request: int
    role: str
    method: str
    args: tuple
    enqueued_ns: int = field(default_factory=time.perf_counter_ns)
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def wait(self) -> Any:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.done.set()


class Dispatcher:
    """The roles' queues and the only user of the workers' pipes: it hands each free role its next work."""

    def __init__(self, roles: dict, max_batch: dict[str, int]):
        self.roles, self.max_batch = roles, dict(max_batch)
        self.waiting: dict[str, deque[RoleCall]] = {r: deque() for r in ROLES}
        self.inflight: dict[str, list[tuple[Any, list[RoleCall]]]] = {r: [] for r in ROLES}   # (handle, jobs joined)
        self.running: dict[str, dict[int, RoleCall]] = {r: {} for r in ROLES}   # a batching writer's writes in the batch
        self.commands: list[tuple[Any, RoleCall]] = []
        self.records: list[dict] = []                    # every pass the workers ran, with its role
        self._inbox: deque = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = Pipe(duplex=False)

    # -- the requests' threads --------------------------------------------------------------------
    def post(self, item) -> None:
        """A job, or a request's ending, from a request's thread. A job joins its queue here: its ``enqueued_ns`` is
        stamped under the lock, so the stamps of two requests' jobs come in the order their queue takes them."""
        with self._lock:
            if isinstance(item, RoleCall):
                item.enqueued_ns = time.perf_counter_ns()
            self._inbox.append(item)
            self._wake_w.send_bytes(b"")

    # -- the dispatcher's thread -----------------------------------------------------------------
    def batches(self, role: str) -> bool:
        """Whether the role takes several requests per pass (the PRM always; a writer with max batch > 1)."""
        return role == "prm" or self.max_batch[role] > 1

    def pump(self, timeout: float | None) -> list:
        """Hand out work, wait up to ``timeout`` s for an answer or a new job, deliver the answers; returns the
        non-job items posted (requests that ended)."""
        items = self._drain()
        for role in ROLES:
            self._start(role)
        handles = [h for r in ROLES for h, _ in self.inflight[r]] + [h for h, _ in self.commands]
        if any(h.done() for h in handles):
            timeout = 0
        conns = [self.roles[r].conn for r in ROLES if self.inflight[r] and hasattr(self.roles[r], "conn")]
        conns += [self.roles[r].conn for r in ROLES if any(h.role is self.roles[r] for h, _ in self.commands)
                  and hasattr(self.roles[r], "conn")]
        if not items:
            wait(list({id(c): c for c in conns}.values()) + [self._wake_r], timeout)
        self._collect()
        return items + self._drain()

    def _drain(self) -> list:
        with self._lock:
            posted, self._inbox = list(self._inbox), deque()
            while self._wake_r.poll():
                self._wake_r.recv_bytes()
        other = []
        for item in posted:
            if not isinstance(item, RoleCall):
                other.append(item)
            elif item.method in ("write", "score"):
                self.waiting[item.role].append(item)
            else:                                        # open / release: sent now, in the order the request asked
                self.commands.append((self.roles[item.role].submit(item.method, item.request, *item.args), item))
        return other

    def _start(self, role: str) -> None:
        """Give a role its next work: the PRM, when free, every waiting score; the lane its oldest write, the next one
        sent while it writes (it waits in the worker's pipe, so the lane never idles for a round trip through this
        process); a batching writer the writes that fit beside the running ones (sent even while it runs: they join
        before its next pass)."""
        q, worker, limit = self.waiting[role], self.roles[role], self.max_batch[role]
        if role == "prm":
            if not self.inflight[role] and q:
                jobs = [q.popleft() for _ in range(min(len(q), limit))]
                self.inflight[role].append((worker.submit("score", [(j.request, *j.args) for j in jobs]), jobs))
            return
        if not self.batches(role):
            while q and len(self.inflight[role]) < 2:
                job = q.popleft()
                self.inflight[role].append((worker.submit("write_for", job.request, *job.args), [job]))
            return
        room = limit - len(self.running[role])
        if (q and room > 0 and len(self.inflight[role]) < 2) or (self.running[role] and not self.inflight[role]):
            jobs = [q.popleft() for _ in range(min(len(q), max(room, 0)))]
            for j in jobs:
                self.running[role][j.request] = j
            self.inflight[role].append((worker.submit("iterate", [(j.request, *j.args) for j in jobs]), jobs))

    def _collect(self) -> None:
        for role in ROLES:
            keep = []
            for handle, jobs in self.inflight[role]:
                if not handle.done():
                    keep.append((handle, jobs))
                    continue
                served = handle.result()
                self.records += [dict(role=role, **rec) for rec in served.records]
                if role == "prm":
                    for j, value in zip(jobs, served.value):
                        j.resolve(value)
                elif not self.batches(role):
                    jobs[0].resolve(served.value)
                else:
                    for request, step, batched in served.value:
                        self.running[role].pop(request).resolve((step, batched))
            self.inflight[role] = keep
        left = []
        for handle, job in self.commands:
            if handle.done():
                job.resolve(handle.result())
            else:
                left.append((handle, job))
        self.commands = left

    def fail(self, error: BaseException) -> None:
        """Release every waiting request's thread with ``error`` (a worker failed)."""
        jobs = [j for r in ROLES for j in self.waiting[r]] + [j for r in ROLES for _, js in self.inflight[r]
                                                                for j in js]
        for j in jobs + [j for _, j in self.commands] + [i for i in self._inbox if isinstance(i, RoleCall)]:
            j.resolve(error=error)


class RequestRole:
    """One request's view of a role, as the sequential executor calls it (``reset``, ``write``, ``score``): each call
    a job on the role's queue. It keeps, per model call the role made, when the job waited and which passes ran it."""

    def __init__(self, dispatcher: Dispatcher, role: str, request: int):
        self.dispatcher, self.role, self.request = dispatcher, role, request
        self.served: list[dict] = []      # per model call, in order: queue wait and passes (serving_calls columns)

    def call(self, method: str, *args) -> Any:
        if method == "reset":             # the request's own state on the worker (its KV cache), seeded
            self.dispatcher.post(RoleCall(self.request, self.role, "open", args))
            return None
        job = RoleCall(self.request, self.role, method, args)
        self.dispatcher.post(job)
        value = job.wait()
        if method == "score":
            score, calls, batched = value
            value = (score, calls)
        else:
            value, batched = value
            calls = value.calls
        for i, (c, (first, last, batch)) in enumerate(zip(calls, batched)):   # waited: until its first pass began
            self.served.append(dict(enqueued_ns=job.enqueued_ns, queued_ns=c.start_ns - job.enqueued_ns if i == 0 else 0,
                                    pass_first=first, pass_last=last, batch=batch))
        return value

    def release(self) -> RoleCall:
        """Forget the request on the worker; the job's value is the role's counters (the draft's: its KVMU log)."""
        job = RoleCall(self.request, self.role, "release", ())
        self.dispatcher.post(job)
        return job


@dataclass
class ServedRequest:
    """One request of a serving run: which problem, when it arrives (s from the run's start), its client."""
    index: int
    problem: Any
    prompt: list[int]
    arrival_s: float
    client: int = -1                     # closed loop: the client that sent it; open loop: -1


def solve_request(dispatcher: Dispatcher, req: ServedRequest, alg, max_tokens: int, devices: dict, impls: dict,
                  t0_ns: int) -> dict[str, list[dict]]:
    """Run the controller on one request through the queues; its trace rows, timed from its arrival."""
    roles = {r: RequestRole(dispatcher, r, req.index) for r in ROLES}
    ex = Sequential(roles["draft"], roles["prm"], roles["target"], max_tokens, devices, impls)
    arrival_ns = t0_ns + round(req.arrival_s * 1e9)
    ex.begin(req.problem.question, req.prompt, alg.seed)
    ex.rec.t0 = arrival_ns                # every time in its trace counts from its arrival
    out = solve(ex, alg)
    ex.finish()
    finished_ns = time.perf_counter_ns()
    closing = {r: roles[r].release() for r in ROLES}
    rows = trace_rows(req.problem, out, ex.rec, len(req.prompt), (finished_ns - arrival_ns) / 1e9,
                      closing["draft"].wait())
    served = {r: iter(roles[r].served) for r in ROLES}
    for row in rows["calls"]:             # the executor records each call as it returns: the same order
        row.update(next(served[row["role"]]))
        row["enqueued_ns"] -= arrival_ns
    for r in ROLES:
        if next(served[r], None) is not None:
            raise RuntimeError(f"request {req.index}: more {r} calls served than recorded")
    rows["request"] = [dict(problem_id=req.problem.id, finished_ns=finished_ns - arrival_ns)]
    for r in ("prm", "target"):
        closing[r].wait()
    return rows


def serve(dispatcher: Dispatcher, requests: list[ServedRequest], alg, max_tokens: int, devices: dict, impls: dict,
          closed_loop: tuple[int, float] | None = None) -> tuple[dict[int, dict], int]:
    """Serve ``requests``: open loop at their arrival times, or ``closed_loop`` = (clients, think_s): each client
    sends its next request ``think_s`` after its last one ended (the first ones at 0). Returns each request's rows
    (by index) and the run's start (perf_counter ns)."""
    pending = deque(requests)
    results: dict[int, dict] = {}
    threads: list[threading.Thread] = []
    t0 = time.perf_counter_ns()
    due: list[ServedRequest] = []
    if closed_loop is not None:
        clients, think = closed_loop
        for c in range(min(clients, len(pending))):
            r = pending.popleft()
            r.arrival_s, r.client = 0.0, c
            due.append(r)
    else:
        due, pending = list(pending), deque()

    def run(req: ServedRequest) -> None:
        try:
            dispatcher.post(("ended", req.index, solve_request(dispatcher, req, alg, max_tokens, devices, impls, t0)))
        except BaseException as e:        # noqa: BLE001 - handed to the dispatcher's thread, which raises it
            dispatcher.post(("failed", req.index, e))

    try:
        while len(results) < len(requests):
            now = (time.perf_counter_ns() - t0) / 1e9
            while due and due[0].arrival_s <= now:
                t = threading.Thread(target=run, args=(due.pop(0),), daemon=True)
                t.start()
                threads.append(t)
            for kind, index, payload in dispatcher.pump(due[0].arrival_s - now if due else None):
                if kind == "failed":
                    raise payload
                results[index] = payload
                if closed_loop is not None and pending:      # the client's next request, after its think time
                    req = next(r for r in requests if r.index == index)
                    nxt = pending.popleft()
                    nxt.arrival_s = req.arrival_s + payload["request"][0]["finished_ns"] / 1e9 + closed_loop[1]
                    nxt.client = req.client
                    due.append(nxt)
                    due.sort(key=lambda r: r.arrival_s)
    except BaseException as e:
        dispatcher.fail(e)
        raise
    for t in threads:
        t.join()
    return results, t0
