"""The generated draft kernel as the draft role's :class:`~heterospec.models.decoding.Decoding`: one kernel call per
token, through the kernel's own command interface (KVMU mode, mark, re-init, base, host token).

The kernel's KVMU (:mod:`heterospec.hls.kvmu`) moves its pointers one token per command: INIT writes a host token at
``ahead`` and commits it (valid = current = ahead), with ``reinit`` it first truncates to ``base`` <= valid; SPEC
writes the sampler's token at ``ahead`` (with ``mark`` it closes a step: current = ahead); ACCEPT sets valid =
current; ROLLBACK sets current = ahead = valid. The Python twin (:class:`heterospec.reasoning.kvcache.KVMU`) moves
by whole writes. :class:`KernelKVMU` takes the twin's calls from the :class:`~heterospec.reasoning.roles.StepWriter`
and turns each into the commands below; each log row is read from the kernel's registers after them:

* **accept** (the PRM passed the step under verification): ACCEPT. The step was written with its last token marked,
  so current is its end and valid moves there.
* **reject** (rollback to ``keep`` >= valid): ROLLBACK; the step and anything drafted ahead go. When the target's
  rewrite shares the draft's first tokens (``keep`` > valid: the twin keeps them), the KVMU has rolled back to
  valid, so the kept tokens are re-written after what it reports holding: INIT with ``reinit`` at ahead - 1 (the
  last committed token again, for the sampler's next token), then SPEC for each kept token, the last marked. The
  kernel is deterministic and samples greedily, so the sampler gives back the very tokens it wrote before (checked,
  token by token).
* **backtrack** (``keep`` < valid): INIT with ``reinit`` at ``keep`` - 1, re-writing the last kept token: the
  pointers truncate to ``keep`` (to empty, a reset of the registers, when ``keep`` is 0).
* **host tokens in** (the prompt, shadow synchronisation of the target's tokens, re-initialisation after a
  backtrack): INIT, one command per token. The kernel commits a host token as it writes it; the twin commits in a
  separate ACCEPT (``shadow_sync``) that follows. So the INIT row shows valid as it stood before the host tokens
  (current and ahead after them), and the ACCEPT row that follows shows the commit the kernel made.
* **draft** (a step written after a verified context): SPEC per token, the step's last token marked (current = its
  end: the step goes to the PRM).
* **step ahead** (a step drafted while the PRM verifies the one before it): SPEC per token, none marked (current
  stays at the end of the step under verification). When that step is accepted and the step drafted ahead becomes
  the one under verification, its end must be marked, and the KVMU marks only as it writes: ROLLBACK to valid, then
  the step is re-written as above (the last token marked; again the same tokens), at the cost of one kernel call per
  token of the step.

Where the two cannot agree: host tokens that are not verified yet (the draft drafting ahead after a target rewrite
that the PRM is still scoring, ``host`` in the twin's log). The twin keeps valid before them; the kernel has no such
state (INIT commits), so the kernel's valid includes the rewrite from there on, and when the PRM passes it the
twin's ACCEPT row has no counterpart (the kernel's valid is there already); a backtrack re-initialises below it as
usual. Collected under the step-ahead executor, the two logs differ in exactly these rows. The tokens are
unaffected: whatever the pointers, a rollback below valid re-initialises and one above it re-writes, so the kernel
always holds exactly the context it is given.

A step's last token is written when the step ends (the twin counts it as held at once; the plain decoding feeds it
only at the next write), so the kernel's ``ahead`` is the twin's ``step_ahead`` at every row. The next write after it
needs no re-feed: the token the kernel sampled after it is the continuation.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from heterospec.errors import UserError
from heterospec.hls.kernel_lib import KernelInstance
from heterospec.hls.kvmu import ACCEPT, INIT, ROLLBACK, SPEC
from heterospec.reasoning import kvcache
from heterospec.models.prefix_cache import common_prefix
from heterospec.models.decoding import Chunk, Decoding


class KernelKVMU:
    """The methods of :class:`heterospec.reasoning.kvcache.KVMU`, carried out by the kernel's KVMU.

    ``rollback``, ``initialise`` and ``accept`` arrive before the write's context is in; they are queued (the
    pointers they imply are predicted as the twin would move them, for the writer's next decision) and run in order
    when the decoding's ``start`` has the context. ``speculate`` runs at once. Every row's pointers are the kernel's
    registers after the row's commands (the module docstring says how each maps)."""

    def __init__(self, decoding: "KernelDecoding"):
        self.decoding = decoding
        self.valid = self.current = self.step_ahead = 0
        self.log: list[tuple[int, str, int, int, int, str]] = []
        self.queue: list[tuple[str, int, str]] = []
        self.in_use = False     # a writer drives it (its reset was called): mark steps, write their last token

    def reset(self) -> None:
        """A new problem: every pointer at 0, the log empty."""
        self.valid = self.current = self.step_ahead = 0
        self.log, self.queue = [], []
        self.in_use = True

    def rollback(self, length: int, why: str) -> None:
        """Drop what the cache holds after ``length`` (queued: reject, backtrack)."""
        self.queue.append(("rollback", length, why))
        self.current = self.step_ahead = length
        self.valid = min(self.valid, length)

    def initialise(self, length: int, why: str) -> None:
        """Host tokens in up to ``length`` (queued: the context's tokens come with the decoding's ``start``)."""
        self.queue.append(("initialise", length, why))
        self.current = self.step_ahead = length

    def accept(self, length: int, why: str = "prm") -> None:
        """The path up to ``length`` is verified (queued)."""
        self.queue.append(("accept", length, why))
        self.valid = length

    def speculate(self, start: int, length: int, ahead: bool) -> None:
        """The write ended: its last token goes in (marked unless drafted ahead) and the row is logged."""
        self.decoding._end_step(mark=not ahead)
        self._row(kvcache.SPECULATION, "step_ahead" if ahead else "draft")

    def _row(self, mode: str, why: str, valid: int | None = None) -> None:
        r = self.decoding.regs
        v = r["valid"] if valid is None else valid
        self.valid, self.current, self.step_ahead = v, r["current"], r["ahead"]
        self.log.append((time.perf_counter_ns(), mode, v, r["current"], r["ahead"], why))

    def run(self, context: list[int]) -> None:
        """Carry out the queued moves for a write after ``context``."""
        dec = self.decoding
        queue, self.queue = self.queue, []
        for op, length, why in queue:
            if op == "rollback":
                dec._truncate(length)
                self._row(kvcache.ROLLBACK, why)
            elif op == "initialise":
                before = dec.regs["valid"]
                dec._host(context[:length])
                self._row(kvcache.INIT, why, valid=before)
            else:
                if dec.regs["current"] > dec.regs["valid"]:
                    dec._cmd(ACCEPT)
                self._row(kvcache.ACCEPT, why)


class KernelDecoding(Decoding):
    """Greedy decoding with the generated kernel: each token one ``draft_step`` call (module docstring)."""
    kind = "kernel"

    def __init__(self, kernel: KernelInstance, where: str = "the kernel", board_ms: tuple[float, ...] = ()):
        self.k = kernel
        self.where = where              # named in errors: the kernel folder
        self.board_ms = board_ms        # the perf model's ms per kernel call writing KV slot i (empty: not modelled)
        self.kvmu = KernelKVMU(self)
        self._clear()
        self._processed = 0
        self.modelled_ms = 0.0          # the board's modelled time of every kernel call since the last reset

    def _clear(self) -> None:
        self.k.reset()
        self.ids: list[int] = []        # the tokens in KV slots [0, ahead)
        self.regs = {"valid": 0, "current": 0, "ahead": 0}
        self.sample: int | None = None  # the token the kernel sampled after ids[-1] (None: not known)
        self.pending = False            # the last token handed out is not written yet
        self.room = 0

    # -- commands ------------------------------------------------------------------------------------------------
    def _cmd(self, mode: int, mark: int = 0, reinit: int = 0, base: int = 0, host: int = 0) -> dict:
        if mode in (INIT, SPEC):
            slot = base if reinit else self.regs["ahead"]
            if slot >= self.k.shape.capacity:
                raise UserError(f"the draft's context needs KV slot {slot}, past the kernel's capacity of "
                                f"{self.k.shape.capacity} (CAPACITY, {self.where}); raise quantize.rope_positions "
                                f"and regenerate the kernel, or lower algorithm.max_tokens_per_call")
        o = self.k.step(mode, mark, reinit, base, host)
        if o["error"]:
            raise RuntimeError(f"kernel KVMU refused command mode={mode} mark={mark} reinit={reinit} base={base} "
                               f"with valid/current/ahead {self.regs['valid']}/{self.regs['current']}/"
                               f"{self.regs['ahead']}")
        if o["wr_en"]:
            if self.board_ms:
                self.modelled_ms += self.board_ms[o["wr_addr"]]
            del self.ids[o["wr_addr"]:]
            self.ids.append(o["token_in"])
            self.sample = o["token_out"]
            self._processed += 1
        elif mode == ROLLBACK:
            del self.ids[o["ahead"]:]
            self.sample = None
        self.regs = o
        return o

    def _host(self, tokens: list[int]) -> None:
        """Host tokens in (INIT) after the common prefix of what the kernel holds and ``tokens``."""
        for t in tokens[common_prefix(self.ids, tokens):]:
            self._cmd(INIT, host=t)

    def _rewrite(self, tokens: list[int], mark: bool) -> None:
        """Write ``tokens`` (the kernel's own, held before) again after the slots the KVMU says it holds: the last
        held token again (INIT reinit at ahead - 1, for the sampler's next token), then SPEC each, the last marked
        when ``mark``; the greedy sampler must give each back."""
        at = self.regs["ahead"]
        if at == 0:
            raise RuntimeError("cannot re-write after an empty KV cache: nothing committed")
        self._cmd(INIT, reinit=1, base=at - 1, host=self.ids[at - 1])
        for i, t in enumerate(tokens):
            o = self._cmd(SPEC, mark=int(mark and i == len(tokens) - 1))
            if o["token_in"] != t:
                raise RuntimeError(f"kernel re-write of slot {o['wr_addr']} gave token {o['token_in']}, it held {t}")

    def _truncate(self, keep: int) -> None:
        """Hold exactly ids[:keep], with current = keep (module docstring: reject, backtrack, shared prefix)."""
        valid = self.regs["valid"]
        if keep == 0:
            self._clear()
        elif keep < valid:
            self._cmd(INIT, reinit=1, base=keep - 1, host=self.ids[keep - 1])
        else:
            kept = self.ids[valid:keep]
            self._cmd(ROLLBACK)     # reject: the step under verification and any step drafted ahead go
            if kept:
                self._rewrite(kept, mark=True)

    def _end_step(self, mark: bool) -> None:
        """The writer's step ended: write its last token (marked when the step goes to the PRM)."""
        if self.pending:
            self._cmd(SPEC, mark=int(mark))
            self.pending = False

    # -- Decoding --------------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        self._clear()           # greedy: the seed does not matter
        self._processed = 0
        self.modelled_ms = 0.0

    def start(self, context: list[int]) -> int:
        if len(context) > self.k.shape.capacity:
            raise UserError(f"a context of {len(context)} tokens is longer than the kernel's KV capacity of "
                            f"{self.k.shape.capacity} (CAPACITY, {self.where}); raise quantize.rope_positions and "
                            f"regenerate the kernel, or lower algorithm.max_tokens_per_call")
        p0 = self._processed
        self.pending = False    # a complete step's last token not written (no KVMU driving): it comes in as a host token
        self.kvmu.run(context)
        keep = common_prefix(self.ids, context)
        if keep < len(self.ids):
            self._truncate(keep)
        self._host(context)
        if self.kvmu.in_use and self.regs["current"] < len(context) and self.regs["valid"] < len(context):
            self._truncate(len(context))        # a step drafted ahead goes to the PRM: re-written, its end marked
        if self.sample is None:                                           # after a rollback: the logits are gone
            self._cmd(INIT, reinit=1, base=len(self.ids) - 1, host=self.ids[-1])
        return self._processed - p0

    def next(self, room: int) -> Chunk:
        self.room = room
        self.pending = True
        return Chunk([self.sample])

    def keep(self, kept: int, complete: bool) -> None:
        if not kept:
            self.pending = False
            return
        if (complete or self.room == 1) and self.kvmu.in_use:
            return              # the step's last token: written when the step ends (KernelKVMU.speculate)
        if not complete:
            self._cmd(SPEC)
            self.pending = False

    @property
    def processed(self) -> int:
        return self._processed

    @property
    def held(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class KernelRecipe:
    """How a draft worker builds a :class:`KernelDecoding` (picklable): the kernel library, the kernel folder
    (its ``kernel.json`` and weight blobs), the board it was generated for and, optionally, the board's modelled ms
    per kernel call by KV slot (:func:`board_ms_table`)."""
    library: str
    kernel_dir: str
    board: str
    board_ms: tuple[float, ...] = ()
    kind: str = "kernel"

    def build(self, spec) -> KernelDecoding:
        """The decoding for ``spec`` (a draft role); one line when the kernel was made for another draft."""
        from heterospec.hls.codegen import export_digest

        if spec.temperature > 0:
            raise UserError(f"algorithm.temperature={spec.temperature}: the kernel draft samples greedily; "
                            f"set it to 0 or draft with torch (collect.draft=model)")
        man_path = Path(self.kernel_dir) / "kernel.json"
        if not man_path.is_file():
            raise UserError(f"{man_path}: no kernel manifest; generate the kernel (python -m heterospec.hls codegen "
                            f"--board {self.board})")
        man = json.loads(man_path.read_text())
        export = Path(spec.path)
        export = export.parent if export.is_file() else export
        want = man.get("export_sha1")
        have = export_digest(export) if (export / "quantized.json").is_file() else None
        if want is None or have != want:
            raise UserError(f"{man_path}: the kernel was generated from {man.get('export')} (export sha1 {want}), not "
                            f"from the run's W8A8 draft {export} (sha1 {have}): another model or quantisation; "
                            f"regenerate it for this run (python -m heterospec.hls codegen --board {self.board})")
        if man.get("board") != self.board:
            raise UserError(f"{man_path}: generated for board {man.get('board')!r}, the run asks for {self.board!r}")
        return KernelDecoding(KernelInstance(Path(self.library), Path(self.kernel_dir)), str(self.kernel_dir),
                              self.board_ms)


def kernel_recipe(cfg, paths, board: str) -> tuple[str, KernelRecipe]:
    """(the W8A8 export the kernel drafts from, the recipe) for a run whose draft is ``board``'s generated kernel
    (``collect.draft``); the library is built here, once, before any worker starts. One line for each
    missing piece, naming the stage that makes it."""
    from heterospec.hls.kernel_lib import build_library

    if board not in cfg.hls.boards:
        raise UserError(f"collect.draft={board}: expected model, w8a8 or one of hls.boards {list(cfg.hls.boards)}")
    export = Path(paths.quantized_draft)
    if not export.exists():
        raise UserError(f"collect.draft={board} drafts with the W8A8 export, but {export} does not exist; "
                        f"run the quantize stage first (python -m heterospec.quantize)")
    kernel = Path(paths.hls_codegen(board))
    if not kernel.exists():
        raise UserError(f"collect.draft={board}: no generated kernel at {kernel}; run "
                        f"python -m heterospec.hls codegen --board {board}")
    lib = build_library(kernel.parent, cxx=cfg.hls.cxx)
    table = board_ms_table(cfg, board, json.loads(kernel.read_text()))
    return str(export.parent.resolve()), KernelRecipe(str(lib), str(kernel.parent.resolve()), board, table)


def board_ms_table(cfg, board: str, manifest: dict) -> tuple[float, ...]:
    """The perf model's ms for one kernel call that writes KV slot i (context i), i < CAPACITY, on ``board`` at its
    own clock, for the generated kernel (``manifest``: its shape and engines) and the run's ``hls.pipeline`` design.
    Every call runs the LM head: this kernel samples after host tokens too."""
    from heterospec.config.hardware import device
    from heterospec.hls.perf import Arch, Design, token_ms

    dev = device(board, cfg)
    clock = dev.clock_mhz if dev.clock_mhz is not None else dev.kernel_clocks()[-1]
    arch, design = Arch.of(manifest["arch"]), Design.of(dict(cfg.hls.pipeline))
    return tuple(token_ms(arch, manifest["rows"], manifest["cols"], dev, clock, design, ctx)[0]
                 for ctx in range(int(manifest["capacity"])))
