"""Device workers: each role's model lives in its own process, bound to its own torch device.

The controller talks to a role through :class:`ProcessRole` (a real worker process, so the
step-ahead executor truly overlaps the three models) or :class:`LocalRole` (the same object
in-process, for tests). Both offer ``submit(method, *args) -> Handle`` and ``cancel(handle)``;
a cancelled ``write`` stops between two tokens and returns what it has.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from dataclasses import dataclass
from typing import Any

from heterospec.errors import UserError


@dataclass
class RoleSpec:
    """Everything a worker needs to build its role; picklable."""
    role: str             # draft | prm | target
    path: str             # checkpoint directory
    device: str           # torch device: cpu, cuda:N
    dtype: str = "float32"
    threads: int = 1      # torch intra-op threads in the worker
    prompt: str = "plain"
    delimiter: str = "\n\n"
    step_token: str = "<extra_0>"
    temperature: float = 0.0
    quantized: bool = False  # draft only: path is a W8A8 export (collect.draft=w8a8)
    cpus: tuple[int, ...] = ()  # CPU cores the worker is pinned to (empty: any)
    nice: int = 0         # OS priority offset of the worker (speculative roles yield the CPU to the critical path)
    decoding: Any = None  # draft and target: a DecodingRecipe (reasoning.roles) for another way of writing; None: plain
                          # (a target's other decoding also offers plain writes: SpeculativeTarget)
    serving: int = 0      # a serving worker (reasoning.serving_roles): the most requests in one pass; 0: a collect's


def check_device(role: str, device: str) -> None:
    """A device name this machine has, or one clear line."""
    import torch
    if device == "cpu":
        return
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        if not torch.cuda.is_available():
            raise UserError(f"system.torch_devices.{role}={device}: this machine has no CUDA device "
                            f"(use system=cpu3 or torch_devices.{role}=cpu)")
        if idx >= torch.cuda.device_count():
            raise UserError(f"system.torch_devices.{role}={device}: only {torch.cuda.device_count()} CUDA device(s) here")
        return
    if device == "mps" and torch.backends.mps.is_available():
        return
    raise UserError(f"system.torch_devices.{role}={device}: not a torch device (expected cpu or cuda:N)")


def build_role(spec: RoleSpec):
    """Load the model and wrap it as a StepWriter (draft, target) or a StepScorer (PRM).

    A writer decodes plainly unless ``spec.decoding`` names another way (token-level speculation, the accelerator
    kernel); the draft's writer logs its KVMU: the decoding's own (a kernel's registers) or the software twin.
    """
    import torch
    from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
    from heterospec.models.prm import StepScorer
    from heterospec.models.prefix_cache import PrefixCache
    from heterospec.reasoning.kvcache import KVMU
    from heterospec.models.decoding import PlainDecoding
    from heterospec.reasoning.roles import Call, StepWriter

    torch.set_num_threads(spec.threads)
    if spec.serving:
        from heterospec.reasoning.serving_roles import build_serving_role
        return build_serving_role(spec)
    if spec.role == "prm":
        prm = load_prm(spec.path, device=spec.device, dtype=spec.dtype, prompt=spec.prompt, step_token=spec.step_token)
        return StepScorer(prm.protocol, PrefixCache(prm.model), Call)
    tokenizer = load_tokenizer(spec.path, spec.role)
    if spec.decoding is not None:
        decoding = spec.decoding.build(spec)
    elif spec.quantized:  # the W8A8 export of the quantize stage, run as the FPGA computes it
        from heterospec.quantize.model import load_quantized_draft
        decoding = PlainDecoding(load_quantized_draft(spec.path, spec.device), spec.temperature)
    else:
        model = load_causal_lm(spec.path, device=spec.device, dtype=spec.dtype, role=spec.role)
        decoding = PlainDecoding(model, spec.temperature)
    kvmu = (decoding.kvmu or KVMU()) if spec.role == "draft" else None
    writer = StepWriter(decoding, tokenizer, spec.delimiter, kvmu)
    if spec.role == "target" and spec.decoding is not None:
        return SpeculativeTarget(writer, StepWriter(decoding.plain(spec.temperature), tokenizer, spec.delimiter))
    return writer


class SpeculativeTarget:
    """A target that writes with token-level speculation, and plainly over the same loaded model (a KV cache of its
    own) for the writes that should not speculate: the step-ahead prefetch, unless ``algorithm.speculative_prefetch``.
    Both are StepWriters, so one stop rule holds for both."""
    kvmu = None

    def __init__(self, speculative, plain):
        self.speculative, self.plainly = speculative, plain

    def reset(self, seed: int) -> None:
        """A new problem for both writers."""
        self.speculative.reset(seed)
        self.plainly.reset(seed)

    def write(self, context: list[int], valid: int, max_tokens: int, step_start: int | None = None,
              plain: bool = False, cancelled=lambda: False):
        """:meth:`StepWriter.write` with the speculative writer, or with ``plain`` the plain one."""
        return (self.plainly if plain else self.speculative).write(context, valid, max_tokens, step_start, cancelled)

    def decode(self, tokens: list[int]) -> str:
        return self.speculative.decode(tokens)

    @property
    def processed(self) -> int:
        return self.speculative.processed + self.plainly.processed

    @property
    def ingested(self) -> int:
        return self.speculative.ingested + self.plainly.ingested

    @property
    def generated(self) -> int:
        return self.speculative.generated + self.plainly.generated


def role_stats(role) -> dict:
    """KV-reuse counters and the KVMU log of a role since its last reset."""
    return {"processed": role.processed, "ingested": getattr(role, "ingested", 0),
            "generated": getattr(role, "generated", 0),
            "kvmu": list(role.kvmu.log) if getattr(role, "kvmu", None) else []}


def _serve(spec: RoleSpec, conn, cancel) -> None:
    """Worker loop: build the role, then answer (req_id, method, args) requests in order."""
    if spec.cpus:
        os.sched_setaffinity(0, spec.cpus)
    if spec.nice:
        os.nice(spec.nice)
    try:
        role = build_role(spec)
    except UserError as e:
        conn.send((-1, "usererror", str(e)))
        return
    except Exception:
        conn.send((-1, "error", traceback.format_exc()))
        return
    conn.send((-1, "ok", None))
    if spec.serving:
        role.waiting = conn.poll      # a batching writer stops between passes when new writes wait to join
    while True:
        try:
            req_id, method, args = conn.recv()
        except EOFError:
            return
        if method == "close":
            return
        try:
            if method == "write":
                # cancelling request N stops it and anything older still running: requests run in order
                result = role.write(*args, cancelled=lambda rid=req_id: cancel.value >= rid)
            elif method == "stats":
                result = role_stats(role)
            else:
                result = getattr(role, method)(*args)
            conn.send((req_id, "ok", result))
        except Exception:
            conn.send((req_id, "error", traceback.format_exc()))


class Handle:
    """A submitted request; ``result()`` blocks until the worker answers."""

    def __init__(self, role: "ProcessRole | LocalRole", req_id: int, value: Any = None):
        self.role, self.req_id, self._value, self._done = role, req_id, value, value is not None

    def result(self) -> Any:
        if not self._done:
            self._value, self._done = self.role._wait(self.req_id), True
        return self._value

    def done(self) -> bool:
        return self._done or self.role._ready(self.req_id)


_CTX = None


def _context():
    """A forkserver that has imported torch and transformers once, so workers start in a moment. transformers
    imports most of itself lazily, at a model's first load (1.7 s of modules on this CPU, in every worker): the
    modelling and generation modules are preloaded too, so a worker builds its role in about 0.1 s."""
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["torch", "transformers", "transformers.modeling_utils",
                                     "transformers.generation.utils", "transformers.models.qwen2.modeling_qwen2",
                                     "heterospec.reasoning.roles", "heterospec.models.loading",
                                     "heterospec.models.prm"])
    return _CTX


def start_forkserver() -> None:
    """Start the workers' forkserver now, so its imports (about 3 s) run beside the caller's own instead of after
    them; a stage that will start workers calls this first."""
    from multiprocessing import forkserver

    _context()
    forkserver.ensure_running()


class ProcessRole:
    """A role served by its own worker process."""

    def __init__(self, spec: RoleSpec):
        check_device(spec.role, spec.device)
        ctx = _context()
        self.spec, self.name = spec, spec.role
        self.cancel_value = ctx.Value("q", -1, lock=False)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(spec, child, self.cancel_value), daemon=True,
                                name=f"heterospec-{spec.role}")
        self.proc.start()
        self._next, self._results = 0, {}

    def ready(self) -> None:
        """Wait until the worker has built its role (the roles of a session load side by side)."""
        self._wait(-1)

    def submit(self, method: str, *args) -> Handle:
        self._next += 1
        self.conn.send((self._next, method, args))
        return Handle(self, self._next)

    def call(self, method: str, *args) -> Any:
        return self.submit(method, *args).result()

    def cancel(self, handle: Handle) -> None:
        self.cancel_value.value = max(self.cancel_value.value, handle.req_id)

    def _receive(self) -> None:
        try:
            req_id, status, payload = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the {self.name} worker died (exit code {self.proc.exitcode})") from None
        if status == "usererror":
            raise UserError(payload)
        if status == "error":
            raise RuntimeError(f"{self.name} worker failed:\n{payload}")
        self._results[req_id] = payload

    def _wait(self, req_id: int) -> Any:
        while req_id not in self._results:
            self._receive()
        return self._results.pop(req_id)

    def _ready(self, req_id: int) -> bool:
        while req_id not in self._results and self.conn.poll():
            self._receive()
        return req_id in self._results

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send((0, "close", ()))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()


class LocalRole:
    """The same interface, run in this process: each request completes when submitted."""

    def __init__(self, spec: RoleSpec):
        check_device(spec.role, spec.device)
        self.spec, self.name = spec, spec.role
        self.role = build_role(spec)
        self._next = 0

    def ready(self) -> None:
        """Built when made."""

    def submit(self, method: str, *args) -> Handle:
        self._next += 1
        if method == "stats":
            value = role_stats(self.role)
        else:
            value = getattr(self.role, method)(*args)
        return Handle(self, self._next, value if value is not None else True)

    def call(self, method: str, *args) -> Any:
        return self.submit(method, *args).result()

    def cancel(self, handle: Handle) -> None:
        pass  # already complete

    def _ready(self, req_id: int) -> bool:
        return True

    def close(self) -> None:
        pass
