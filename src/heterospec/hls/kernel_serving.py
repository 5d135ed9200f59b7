"""The batch-B kernel as a serving run's draft: one weight pass carries one command of each of up to B writes.

Each request in flight holds a slot of one :class:`~heterospec.hls.kernel_lib.BatchKernel` (its KV region and KVMU
registers) and a :class:`~heterospec.reasoning.roles.StepWriter` over a :class:`~heterospec.hls.kernel_draft.
KernelDecoding` -- the collect's kernel draft, command for command -- whose kernel is the slot (:class:`SlotKernel`).
A write runs in a thread of its own; every command it sends waits at the :class:`PassGate`, which runs a pass once
every running write has sent its next command or ended, taking up to ``serving.max_batch.draft`` of the waiting
commands in the order they came. So a request's commands, and with them its tokens, steps and KVMU log, are the
ones it sends alone; only when each runs is shared. The kernel is built with one slot per request of a load-point
run (KV regions: ``serving.requests``), while a pass takes at most B (the design's sequences per pass).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from heterospec.errors import UserError
from heterospec.hls.kernel_lib import BatchKernel, Shape
from heterospec.reasoning.serving_roles import LaneWriter, Served, _Passes


class PassGate:
    """Gathers the running writes' commands into passes of the batch kernel (module docstring)."""

    def __init__(self, kernel: BatchKernel, max_batch: int):
        self.kernel, self.max_batch = kernel, max_batch
        self.cv = threading.Condition()
        self.posted: dict[int, tuple] = {}       # slot -> its write's next command
        self.order: list[int] = []               # the posted slots, first come first
        self.results: dict[int, dict] = {}
        self.busy: set[int] = set()              # slots whose write is computing (neither posted nor ended)

    def submit(self, slot: int, command: tuple) -> dict:
        """A write's command (from its thread): waits for the pass that runs it; its outputs."""
        with self.cv:
            self.posted[slot] = command
            self.order.append(slot)
            self.busy.discard(slot)
            self.cv.notify_all()
            self.cv.wait_for(lambda: slot in self.results)
            return self.results.pop(slot)

    def next_pass(self) -> dict[int, tuple] | None:
        """(main thread) Wait until no write computes; the commands of the next pass, or None if none waits."""
        with self.cv:
            self.cv.wait_for(lambda: not self.busy)
            if not self.order:
                return None
            take, self.order = self.order[:self.max_batch], self.order[self.max_batch:]
            return {s: self.posted.pop(s) for s in take}

    def deliver(self, out: dict[int, dict]) -> None:
        """(main thread) A pass's outputs to the writes that sent its commands, each computing again from now."""
        with self.cv:
            self.results.update(out)
            self.busy.update(out)
            self.cv.notify_all()


class SlotKernel:
    """One slot of the batch kernel with :class:`~heterospec.hls.kernel_lib.KernelInstance`'s interface, so that a
    :class:`~heterospec.hls.kernel_draft.KernelDecoding` drives it unchanged: ``reset`` clears the slot's registers
    at once; each ``step`` is one command of a shared pass."""

    def __init__(self, gate: PassGate, slot: int):
        self.gate, self.slot = gate, slot
        self.shape: Shape = gate.kernel.shape
        self.calls = 0

    def reset(self) -> None:
        self.gate.kernel.join(self.slot)         # only while no pass runs: the caller's write is computing

    def step(self, mode: int, mark: int = 0, reinit: int = 0, base: int = 0, host_token: int = 0) -> dict:
        self.calls += 1
        return self.gate.submit(self.slot, (mode, mark, reinit, base, host_token))


@dataclass
class _Write:
    """A write in flight: its thread, and the passes it ran in."""
    request: int
    thread: threading.Thread
    passes: list[tuple[int, int, int]] = field(default_factory=list)   # (seq, start_ns, batch)
    step: object = None
    error: BaseException | None = None


class KernelBatchWriter(LaneWriter):
    """The kernel draft's serving role: :meth:`iterate` (continuous batching, as the dispatcher drives a batching
    writer) and :meth:`write_for` (a lane: one write at a time)."""

    waiting: Callable[[], bool] = staticmethod(lambda: False)   # a worker sets it: another command is waiting

    def __init__(self, kernel: BatchKernel, make: Callable[[SlotKernel], object], max_batch: int):
        self.kernel, self.gate = kernel, PassGate(kernel, max_batch)
        self.make_writer, self.writers, self.passes = make, {}, _Passes()
        self.slots: dict[int, int] = {}                  # request -> slot
        self.free = list(range(kernel.batch))
        self.running: dict[int, _Write] = {}             # slot -> write
        self.done: list[_Write] = []

    def open(self, request: int, seed: int) -> None:
        if not self.free:
            raise UserError(f"the kernel draft has {self.kernel.batch} slots (a KV cache each, as many as "
                            f"serving.requests) and every one holds a request in flight; request {request} finds none")
        slot = self.free.pop(0)
        self.slots[request] = slot
        w = self.make_writer(SlotKernel(self.gate, slot))
        self.writers[request] = w
        w.reset(seed)

    def release(self, request: int) -> dict:
        stats = super().release(request)
        self.free.append(self.slots.pop(request))
        return stats

    def _start(self, request: int, context: list[int], valid: int, max_tokens: int) -> None:
        slot = self.slots[request]
        writer = self.writers[request]

        def run() -> None:
            try:
                write.step = writer.write(list(context), valid, max_tokens)
            except BaseException as e:          # re-raised in the worker's thread
                write.error = e
            with self.gate.cv:
                self.gate.busy.discard(slot)
                self.done.append(write)
                self.gate.cv.notify_all()

        write = _Write(request, threading.Thread(target=run, name=f"kernel-slot-{slot}", daemon=True))
        with self.gate.cv:
            self.gate.busy.add(slot)
        self.running[slot] = write
        write.thread.start()

    def iterate(self, joins: list[tuple]) -> Served:
        """Start the writes in ``joins`` ((request, context, valid, max_tokens), ...), then run passes until a write
        ends or another command waits; the writes that ended as [(request, Step, [Batched per call]), ...]."""
        for request, context, valid, max_tokens in joins:
            self._start(request, context, valid, max_tokens)
        ended = self._run_passes()
        return Served(ended, self.passes.take())

    def write_for(self, request: int, context: list[int], valid: int, max_tokens: int) -> Served:
        """One write alone (the dispatcher's lane)."""
        self._start(request, context, valid, max_tokens)
        ended: list = []
        while not ended:
            ended = self._run_passes(stop_when_waiting=False)
        (_, step, batched), = ended
        return Served((step, batched), self.passes.take())

    def _run_passes(self, stop_when_waiting: bool = True) -> list:
        ended: list[_Write] = []
        while self.running and not ended:
            cmds = self.gate.next_pass()
            with self.gate.cv:
                ended, self.done = self.done, []
            for w in ended:
                self.running.pop(self.slots[w.request])
                w.thread.join()
                if w.error is not None:
                    raise w.error
            if cmds:
                self._pass(cmds)
            if stop_when_waiting and self.waiting():
                break
        return [(w.request, w.step, self._call_passes(w)) for w in ended]

    def _pass(self, cmds: dict[int, tuple]) -> None:
        requests = {s: self.running[s].request for s in cmds}
        t0, cpu = time.perf_counter_ns(), time.process_time_ns()
        out = self.kernel.run_pass(cmds)
        t1, cpu = time.perf_counter_ns(), time.process_time_ns() - cpu
        order = sorted(cmds)
        seq = self.passes.add("decode", [requests[s] for s in order], [out[s]["wr_addr"] for s in order],
                              [out[s]["wr_en"] for s in order], t0, t1, cpu)
        for s in order:
            self.running[s].passes.append((seq, t0, len(cmds)))
        self.gate.deliver(out)

    @staticmethod
    def _call_passes(w: _Write) -> list[tuple[int, int, float]]:
        """(first pass, last pass, mean batch) of each of the step's calls: the passes that began within it."""
        out = []
        for c in w.step.calls:
            mine = [(seq, b) for seq, t, b in w.passes if c.start_ns <= t <= c.end_ns]
            out.append((mine[0][0], mine[-1][0], sum(b for _, b in mine) / len(mine)) if mine else (0, 0, 0.0))
        return out
