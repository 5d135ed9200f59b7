"""The roles as a serving worker holds them: one state per request in flight (its own KV cache), and batched work.

* :class:`LaneWriter` — the draft's batch-1 lane: one request's step at a time, each request with its own
  :class:`~heterospec.reasoning.roles.StepWriter` (the very code a collect's draft writes with).
* :class:`BatchWriter` — the target (or a batching draft): continuous batching. Each :meth:`BatchWriter.iterate` is
  one forward pass: the writes that joined since the last pass have their context read (prefill first, as vLLM's
  scheduler does), else every running write decodes one token; a write leaves the batch when its step ends.
* :class:`BatchScorer` — the PRM: the steps waiting for it scored in one pass, each over its request's own cache.

Every pass is reported as a record (:data:`PASS_FIELDS`): the requests in it, what each held and was fed, its time.
A request's own calls (:class:`~heterospec.reasoning.roles.Call`) are the ones a collect records, so its trace reads
as a collect's; beside each call, the passes it ran in (:data:`Batched`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from heterospec.models.batching import feed_batch
from heterospec.models.prefix_cache import PrefixCache, common_prefix
from heterospec.reasoning.roles import Call, Step, StepWriter

# a pass: its number, phase, the requests in it, per request the tokens its cache held and the tokens fed, its time
# (wall clock) and the worker's CPU time in it (its own work: a worker that shares a core waits beside it);
# ``forwards``: model forwards it stands for (a lane's decode call: one per token fed; a batched pass: 1)
PASS_FIELDS = ("seq", "phase", "requests", "held", "fed", "start_ns", "end_ns", "cpu_ns", "forwards")


Batched = tuple[int, int, float]     # a call's first and last pass (their seq) and its mean batch over them


@dataclass
class Served:
    """What a command returns: its result (with each call's :data:`Batched`) and the records of the passes it ran."""
    value: Any
    records: list[dict] = field(default_factory=list)


class _Passes:
    """Numbers the role's passes and keeps their records until a command returns them."""

    def __init__(self):
        self.seq, self.new = 0, []

    def add(self, phase: str, requests: list[int], held: list[int], fed: list[int], t0: int, t1: int, cpu: int,
            forwards: int = 1) -> int:
        self.seq += 1
        self.new.append(dict(seq=self.seq, phase=phase, requests=requests, held=held, fed=fed, start_ns=t0,
                             end_ns=t1, cpu_ns=cpu, forwards=forwards))
        return self.seq

    def take(self) -> list[dict]:
        out, self.new = self.new, []
        return out


class LaneWriter:
    """One request's write at a time, each request with a writer of its own (``make()``)."""

    def __init__(self, make: Callable[[], StepWriter]):
        self.make, self.writers, self.passes = make, {}, _Passes()

    def open(self, request: int, seed: int) -> None:
        self.writers[request] = w = self.make()
        w.reset(seed)

    def write_for(self, request: int, context: list[int], valid: int, max_tokens: int) -> Served:
        """The request's next step after ``context`` (:meth:`StepWriter.write`), as (Step, [Batched per call])."""
        cpu = time.process_time_ns()
        step = self.writers[request].write(context, valid, max_tokens)
        cpu = time.process_time_ns() - cpu
        wall = sum(c.end_ns - c.start_ns for c in step.calls) or 1
        seqs = [self.passes.add(c.phase, [request], [c.kv_len], [c.tokens_in], c.start_ns, c.end_ns,
                                cpu * (c.end_ns - c.start_ns) // wall,       # the write's CPU time, shared by wall time
                                1 if c.phase == "prefill" else c.tokens_in) for c in step.calls]
        return Served((step, [(s, s, 1.0) for s in seqs]), self.passes.take())

    def release(self, request: int) -> dict:
        """Forget the request; its writer's counters and KVMU log (as :func:`~heterospec.reasoning.workers.role_stats`)."""
        w = self.writers.pop(request)
        return {"processed": w.processed, "ingested": w.ingested, "generated": w.generated,
                "kvmu": list(w.kvmu.log) if w.kvmu else []}


@dataclass
class _Row:
    """A write in the batch: :meth:`StepWriter.write`'s loop, one token per pass."""
    request: int
    writer: StepWriter
    context: list[int]
    valid: int
    max_tokens: int
    prior: list[int]
    feed: list[int]                      # tokens to feed in the next pass
    tokens: list[int] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    passes: list[list[int]] = field(default_factory=lambda: [[], []])   # prefill, decode: the passes' seqs
    sizes: list[list[int]] = field(default_factory=lambda: [[], []])    # ... and their batch sizes
    kv1: int = 0                         # held after the prefill (the decode call's kv_len)
    p1: int = 0                          # tokens processed by then
    complete: bool = False
    eos: bool = False
    last_fed: bool = False               # a step cut at the token limit feeds its last token, then leaves


class BatchWriter(LaneWriter):
    """Continuous batching over per-request writers (plain decoding; greedy or seeded sampling per request)."""

    def __init__(self, make: Callable[[], StepWriter], pad: int = 0):
        super().__init__(make)
        self.pad = pad
        self.joining: list[_Row] = []
        self.running: list[_Row] = []

    waiting: Callable[[], bool] = staticmethod(lambda: False)   # a worker sets it: another command is waiting

    def iterate(self, joins: list[tuple]) -> Served:
        """Take the writes in ``joins`` ((request, context, valid, max_tokens), ...), then run passes until a write
        ends or another command waits (new writes to join: they join before the next pass); returns the writes that
        ended, as [(request, Step, [Batched per call]), ...], and the passes' records."""
        for request, context, valid, max_tokens in joins:
            self.joining.append(self._join(request, list(context), valid, max_tokens))
        ended: list = []
        while (self.joining or self.running) and not ended:
            ended = self._pass()
            if self.waiting():
                break
        return Served(ended, self.passes.take())

    def _pass(self) -> list:
        """One forward pass: the joiners' prefill if any wait (prefill first, as vLLM schedules), else one decode
        token for every running write; returns the writes that ended."""
        rows = self.joining or self.running
        phase = "prefill" if self.joining else "decode"
        held = [len(r.writer.decoding.cache.ids) for r in rows]
        fed = [len(r.feed) for r in rows]
        t0, cpu = time.perf_counter_ns(), time.process_time_ns()
        logits = feed_batch([r.writer.decoding.cache for r in rows], [r.feed for r in rows], self.pad)
        t1, cpu = time.perf_counter_ns(), time.process_time_ns() - cpu
        seq = self.passes.add(phase, [r.request for r in rows], held, fed, t0, t1, cpu)
        done = []
        for r, lg, h, n in zip(rows, logits, held, fed):
            k = 0 if phase == "prefill" else 1
            r.passes[k].append(seq)
            r.sizes[k].append(len(rows))
            if phase == "prefill":
                r.calls.append(Call("prefill", n, 0, h, t0, t1))
                r.kv1, r.p1 = len(r.writer.decoding.cache.ids), r.writer.decoding.processed
            if r.last_fed or self._sample(r, lg):          # its last token fed now, or its step ended
                done.append(r)
        if phase == "prefill":
            self.running += self.joining
            self.joining = []
        for r in done:
            self.running.remove(r)
        return [(r.request, self._finish(r, t1), self._call_passes(r)) for r in done]

    def _join(self, request: int, context: list[int], valid: int, max_tokens: int) -> _Row:
        w = self.writers[request]
        keep = common_prefix(w.written, context)
        if w.kvmu is not None:
            w._kvmu_before(keep, context, valid)
        w.ingested += len(context) - keep
        _, feed = w.decoding.cache.prepare(context)
        return _Row(request, w, context, valid, max_tokens, [], feed)

    def _sample(self, r: _Row, logits) -> bool:
        """Pick the row's next token from its logits; True when its step has ended (fed what it must)."""
        dec = r.writer.decoding
        room = r.max_tokens - len(r.prior) - len(r.tokens)
        if room <= 0:                                     # a step that began at its limit writes nothing
            return True
        dec.logits = logits
        tok = dec.next(room).tokens[0]
        r.tokens.append(tok)
        r.complete, r.eos = r.writer._stops(r.tokens, r.prior)
        if r.complete:
            return True
        r.feed = [tok]                                    # fed in the next pass (PlainDecoding.keep)
        r.last_fed = len(r.prior) + len(r.tokens) >= r.max_tokens
        return False

    def _finish(self, r: _Row, t1: int) -> Step:
        w, dec = r.writer, r.writer.decoding
        w.generated += len(r.tokens)
        r.calls.append(Call("decode", dec.processed - r.p1, len(r.tokens), r.kv1, r.calls[0].end_ns, t1))
        w.written = r.context + r.tokens
        if w.kvmu is not None:
            w.kvmu.speculate(len(r.context), len(w.written), ahead=r.valid < len(r.context))
        return Step(r.prior + r.tokens, w.tokenizer.decode(r.prior + r.tokens, skip_special_tokens=True),
                    r.complete, r.eos, r.calls)

    @staticmethod
    def _call_passes(r: _Row) -> list[tuple[int, int, float]]:
        """(first pass, last pass, mean batch) of the row's prefill call and of its decode call (none: 0, 0, 0)."""
        return [(p[0], p[-1], sum(s) / len(s)) if p else (0, 0, 0.0) for p, s in zip(r.passes, r.sizes)]


class BatchScorer:
    """The PRM's waiting steps in one pass, each request with its own KV cache over what it has read."""

    def __init__(self, protocol, model, pad: int = 0):
        self.protocol, self.model, self.pad = protocol, model, pad
        self.caches: dict[int, PrefixCache] = {}
        self.passes = _Passes()

    def open(self, request: int, seed: int = 0) -> None:
        self.caches[request] = PrefixCache(self.model)

    def release(self, request: int) -> dict:
        c = self.caches.pop(request)
        return {"processed": c.processed}

    def score(self, items: list[tuple[int, str, list[str]]]) -> Served:
        """Rewards of the last step of each (request, question, steps), as [(score, [Call], [Batched]), ...]."""
        caches = [self.caches[r] for r, _, _ in items]
        feeds = [c.prepare(self.protocol.ids(q, steps))[1] for c, (_, q, steps) in zip(caches, items)]
        held = [len(c.ids) for c in caches]
        t0, cpu = time.perf_counter_ns(), time.process_time_ns()
        logits = feed_batch(caches, feeds, self.pad)
        t1, cpu = time.perf_counter_ns(), time.process_time_ns() - cpu
        seq = self.passes.add("score", [r for r, _, _ in items], held, [len(f) for f in feeds], t0, t1, cpu)
        batched = [(seq, seq, float(len(items)))]
        return Served([(float(self.protocol.reward(lg)), [Call("score", len(f), 0, h, t0, t1)], batched)
                       for lg, f, h in zip(logits, feeds, held)], self.passes.take())


def build_serving_role(spec):
    """The serving form of ``spec``'s role: the PRM batches its scores; a writer with ``spec.serving`` > 1 batches its
    writes, with 1 it is a lane (the draft's default). The draft's writers keep the KVMU's log, as in a collect. A
    decoding recipe with a serving form of its own (the generated kernel: ``serving_role``) builds that."""
    from heterospec.models.decoding import PlainDecoding
    from heterospec.models.loading import load_causal_lm, load_prm, load_tokenizer
    from heterospec.reasoning.kvcache import KVMU

    if spec.decoding is not None and hasattr(spec.decoding, "serving_role"):   # the generated kernel as the draft
        return spec.decoding.serving_role(spec)
    if spec.role == "prm":
        prm = load_prm(spec.path, device=spec.device, dtype=spec.dtype, prompt=spec.prompt, step_token=spec.step_token)
        return BatchScorer(prm.protocol, prm.model, _pad(prm.tokenizer))
    tokenizer = load_tokenizer(spec.path, spec.role)
    if spec.quantized:   # the W8A8 export (collect.draft=w8a8), one lane
        from heterospec.quantize.model import load_quantized_draft
        model = load_quantized_draft(spec.path, spec.device)
    else:
        model = load_causal_lm(spec.path, device=spec.device, dtype=spec.dtype, role=spec.role)

    def make() -> StepWriter:
        return StepWriter(PlainDecoding(model, spec.temperature), tokenizer, spec.delimiter,
                          KVMU() if spec.role == "draft" else None)

    return LaneWriter(make) if spec.serving == 1 else BatchWriter(make, _pad(tokenizer))


def _pad(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
