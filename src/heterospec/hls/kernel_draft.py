"""The generated draft kernel as the draft role's :class:`~heterospec.models.decoding.Decoding`: one kernel call per
token, through the kernel's own command interface (KVMU mode, mark, re-init, base, host token).

The kernel's KVMU (:mod:`heterospec.hls.kvmu`) moves its pointers one token per command: INIT writes a host token at
``ahead`` and commits it (valid = current = ahead), with ``reinit`` it first truncates to ``base`` <= valid; SPEC
writes the sampler's token at ``ahead`` (with ``mark`` it closes a step: current = ahead); ACCEPT sets valid =
current; ROLLBACK sets current = ahead = valid. The Python twin (:class:`heterospec.reasoning.kvcache.KVMU`) moves
by the same modes, a row per transition. :class:`KernelKVMU` takes the twin's calls from the
:class:`~heterospec.reasoning.roles.StepWriter` and turns each into the commands below, writing a token only where
the torch draft would feed one; each log row is read from the kernel's registers after its commands:

* **draft** (a step for the PRM): SPEC per token, the last one marked when the step ends (current = its end).
* **step ahead** (a step drafted while the PRM verifies the one before it): SPEC per token, unmarked; when the step
  ends (delimiter, EOS or the token limit) its last token is held back: it stays in the sampler's register, unwritten.
* **accept**: ACCEPT (valid = current); then, if a step drafted ahead holds its last token back, SPEC with ``mark``
  writes it: current = ahead = that step's end, and the step drafted ahead is the one under verification, none of
  it written twice. (Were its last token written at once, only a re-write of the whole step could mark its end.)
* **reject**, the rewrite sharing nothing with the rejected step: ROLLBACK (to valid), then the host tokens.
* **re-initialise** (a backtrack below valid, or a reject whose rewrite shares the rejected step's first tokens):
  one INIT with ``reinit`` at the first slot that differs, carrying the rewrite's token there, then the rest by INIT.
  A re-init may not start past valid, so a reject first sends ACCEPT, committing the step under verification up to
  where the re-init truncates it: its shared prefix is kept, not written again. With no token left to write (the
  rewrite is the rejected step itself, and only a cancelled step drafted ahead goes), the re-init writes the last
  kept token again.
* **host tokens in** (the prompt, shadow synchronisation, the target's step still under verification): INIT, one
  command per token; each is committed as it is written, the twin's rows say the same.

Only two writes are not the torch draft's: a step's last token is written at once when the step goes to the PRM
(the mark needs a write; the torch draft feeds it with the next step, so a rejected step's last token costs the
kernel one pass and torch none), and after a rollback or re-init that leaves no host token to write, the last kept
token is written again for the sampler (torch re-feeds one token there too).
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
        self.held_back = False
        self.log: list[tuple[int, str, int, int, int, str]] = []
        self.queue: list[tuple[str, int, str]] = []
        self.in_use = False     # a writer drives it (its reset was called): mark steps, hold back last tokens

    def reset(self) -> None:
        """A new problem: every pointer at 0, the log empty."""
        self.valid = self.current = self.step_ahead = 0
        self.held_back = False
        self.log, self.queue = [], []
        self.in_use = True

    def rollback(self, why: str) -> None:
        """Drop the step under verification and any step drafted ahead (queued: a reject)."""
        self.queue.append(("rollback", 0, why))
        self.current = self.step_ahead = self.valid
        self.held_back = False

    def initialise(self, length: int, why: str) -> None:
        """Hold and commit the context up to ``length`` (queued: its tokens come with the decoding's ``start``)."""
        self.queue.append(("initialise", length, why))
        self.valid = self.current = self.step_ahead = length
        self.held_back = False

    def accept(self, why: str = "prm") -> None:
        """The step under verification is accepted; a step drafted ahead of it goes to verification (queued)."""
        self.queue.append(("accept", 0, why))
        self.valid = self.current
        if self.held_back:
            self.current = self.step_ahead = self.step_ahead + 1
            self.held_back = False

    def speculate(self, start: int, length: int, ahead: bool, held_back: bool = False) -> None:
        """The write ended: a step for the PRM has its last token written, marked; one drafted ahead holds it back."""
        if ahead:
            if held_back != self.decoding.pending:
                raise RuntimeError(f"the writer says the step drafted ahead ended={held_back}, the kernel "
                                   f"holds a token back={self.decoding.pending}")
        else:
            self.decoding._end_step()
        self.held_back = ahead and held_back
        self._row(kvcache.SPECULATION, "step_ahead" if ahead else "draft")

    def _row(self, mode: str, why: str) -> None:
        r = self.decoding.regs
        self.valid, self.current, self.step_ahead = r["valid"], r["current"], r["ahead"]
        self.log.append((time.perf_counter_ns(), mode, r["valid"], r["current"], r["ahead"], why))

    def run(self, context: list[int]) -> None:
        """Carry out the queued moves for a write after ``context``."""
        dec = self.decoding
        queue, self.queue = self.queue, []
        for op, length, why in queue:
            if op == "rollback":
                dec._cmd(ROLLBACK)
                dec.pending = False
                self._row(kvcache.ROLLBACK, why)
            elif op == "initialise":
                dec._hold(context[:length])
                self._row(kvcache.INIT, why)
            else:
                if dec.regs["current"] > dec.regs["valid"]:
                    dec._cmd(ACCEPT)
                dec._end_step()     # the held-back token of the step drafted ahead, marked
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
        self.pending = False            # the sample was handed out as a step's token but is not written yet
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

    def _hold(self, tokens: list[int]) -> None:
        """Hold exactly ``tokens``, every slot committed, keeping what it holds of them (module docstring:
        re-initialise, host tokens in). A held-back token they continue with comes in as a host token."""
        self.pending = False
        keep = common_prefix(self.ids, tokens)
        if keep == 0 and self.ids:
            self._clear()
        elif keep < len(self.ids) or (keep == len(tokens) and self.regs["valid"] < keep):   # drop, or commit
            if keep > self.regs["valid"] and self.regs["current"] > self.regs["valid"]:
                self._cmd(ACCEPT)       # a re-init may not start past valid: commit up to the slot it truncates to
            base = min(keep, self.regs["valid"], len(tokens) - 1)
            self._cmd(INIT, reinit=1, base=base, host=tokens[base])
            keep = base + 1
        for t in tokens[keep:]:
            self._cmd(INIT, host=t)

    def _end_step(self, mark: bool = True) -> None:
        """Write the step's last token, handed out and not written yet (marked: the step goes to the PRM)."""
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
        if self.kvmu.in_use:
            self.kvmu.run(context)
            if self.ids != context:
                raise RuntimeError(f"the KVMU moves left the kernel holding {len(self.ids)} tokens "
                                   f"({common_prefix(self.ids, context)} of them the context's), not the "
                                   f"{len(context)}-token context")
        else:                   # no writer's KVMU: a step's last token, never written, comes in as a host token
            self._hold(context)
        if self.sample is None:     # a rollback left no host token to write: write the last one again, for the sampler
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
            return              # the step's last token: written when the step ends or goes to the PRM (KernelKVMU)
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
    batch_library: str = ""        # a serving run's draft: the batch kernel's library (kernel_lib.build_batch_library)

    def build(self, spec) -> KernelDecoding:
        """The decoding for ``spec`` (a draft role); one line when the kernel was made for another draft."""
        self._check(spec)
        return KernelDecoding(KernelInstance(Path(self.library), Path(self.kernel_dir)), str(self.kernel_dir),
                              self.board_ms)

    def serving_role(self, spec):
        """A serving worker's draft (:mod:`heterospec.hls.kernel_serving`): every request in flight a slot of the
        batch kernel, up to ``spec.serving`` commands a pass."""
        from heterospec.hls.kernel_lib import BatchKernel
        from heterospec.hls.kernel_serving import KernelBatchWriter
        from heterospec.models.loading import load_tokenizer
        from heterospec.reasoning.roles import StepWriter

        self._check(spec)
        if not self.batch_library:
            raise UserError(f"the kernel draft ({self.kernel_dir}) has no batch library for serving; serve through "
                            f"python -m heterospec.serve, which builds it")
        kernel = BatchKernel(Path(self.batch_library), Path(self.kernel_dir))
        tokenizer = load_tokenizer(spec.path, spec.role)

        def make(slot) -> StepWriter:
            dec = KernelDecoding(slot, str(self.kernel_dir), self.board_ms)
            return StepWriter(dec, tokenizer, spec.delimiter, dec.kvmu)

        return KernelBatchWriter(kernel, make, max(1, int(spec.serving)))

    def _check(self, spec) -> None:
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
