"""The generated draft kernel as a shared library, and a handle on one kernel instance through its C ABI.

The library is built with g++ from the generated sources (the same C++ the vendor flow takes, compiled as the C
simulation compiles it: no fused multiply-add, so it stays bit-exact with the torch int8 reference) plus
``templates/draft_lib.cpp``, a small C ABI of ours: create an instance holding the weights and KV buffers, reset its
KVMU, run one command (one ``draft_step`` call). It is cached by a digest of its sources, the compiler and the flags:
a kernel regenerated with other constants or another template gets a library of its own.

The batch-B kernel (``draft_batch.cpp``) builds the same way with ``templates/draft_batch_lib.cpp``
(:func:`build_batch_library`, :class:`BatchKernel`): B slots, one weight pass per call over the live ones.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from heterospec.errors import UserError
from heterospec.hls.codegen import TEMPLATES

SOURCES = ("draft_config.h", "hs_types.h", "draft_kernel.h", "draft_kernel.cpp")   # from the kernel folder
LIB_SOURCE = "draft_lib.cpp"                                                        # from the templates
LIBFLAGS = ["-std=c++17", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math"]
OUT_FIELDS = ("error", "wr_en", "wr_addr", "token_in", "token_out", "valid", "current", "ahead", "sampled")
BATCH_SOURCES = ("draft_batch.h", "draft_batch.cpp")          # the design's own (batch-B design), else the templates'
BATCH_LIB_SOURCE = "draft_batch_lib.cpp"


def find_compiler(cxx: str) -> str:
    """The compiler's path, or one line naming what to install."""
    exe = shutil.which(cxx)
    if exe is None:
        raise UserError(f"C++ compiler '{cxx}' not found (hls.cxx): the kernel draft is built from its generated "
                        f"sources; install g++ (apt-get install g++) or point hls.cxx at a compiler")
    return exe


def library_digest(src: Path, cxx: str) -> str:
    """sha1 over the kernel's sources, the C ABI template, the compiler and the flags (16 hex digits)."""
    h = hashlib.sha1()
    for name in SOURCES:
        path = Path(src) / name
        if not path.is_file():
            raise UserError(f"{src}: no {name}; generate the kernel first (python -m heterospec.hls codegen)")
        h.update(name.encode() + b"\0" + path.read_bytes())
    h.update((TEMPLATES / LIB_SOURCE).read_bytes())
    h.update(" ".join([cxx, *LIBFLAGS]).encode())
    return h.hexdigest()[:16]


def build_library(src: Path, build: Path | None = None, cxx: str = "g++") -> Path:
    """``<build>/draft_<digest>.so`` from the kernel sources in ``src`` (default build folder: ``src/../lib``);
    compiled only when no library of that digest exists yet."""
    src = Path(src)
    exe = find_compiler(cxx)
    build = Path(build) if build is not None else src.parent / "lib"
    lib = build / f"draft_{library_digest(src, cxx)}.so"
    if lib.is_file():
        return lib
    build.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f".{lib.name}.tmp{os.getpid()}")
    vendor = [f"-I{Path(p)}/include" for p in filter(None, [os.environ.get("XILINX_HLS")])]
    cmd = [exe, *LIBFLAGS, *vendor, "-I", str(src), "-o", str(tmp), str(TEMPLATES / LIB_SOURCE),
           str(src / "draft_kernel.cpp")]
    _compile(cmd, src, tmp, lib)
    return lib


def _compile(cmd: list[str], src: Path, tmp: Path, lib: Path) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise UserError(f"building the kernel library from {src} failed: {first}")
    os.replace(tmp, lib)      # atomic: a concurrent builder of the same digest writes the same bytes


def batch_build_sources(src: Path, folder: Path, batch: int, extra: tuple[str, ...] = ()) -> tuple[Path, list[str]]:
    """Where the batch kernel's sources are and the defines it needs: a batch-B design point's own (its header sets
    ``HS_BATCH``; ``batch`` must be its B), else the templates' copied into ``folder`` (beside no kernel source, so
    that ``draft_kernel.cpp`` and ``.h`` come from the design in ``src``) at ``-DHS_BATCH=batch``. ``extra``:
    templates copied in either case (a testbench, the C ABI)."""
    if batch < 1:
        raise UserError(f"batch={batch}: expected sequences per weight pass, at least 1")
    folder.mkdir(parents=True, exist_ok=True)
    for name in extra:
        shutil.copy(TEMPLATES / name, folder / name)
    own = (Path(src) / "draft_batch.cpp").is_file()
    if own:
        design = json.loads((Path(src) / "kernel.json").read_text()).get("batch", 1) \
            if (Path(src) / "kernel.json").is_file() else None
        if design is not None and design != batch:
            raise UserError(f"{src} is a batch-{design} design point; its kernel runs {design} slots, not {batch}")
        return Path(src), []
    for name in BATCH_SOURCES:
        shutil.copy(TEMPLATES / name, folder / name)
    return folder, [f"-DHS_BATCH={batch}"]


def build_batch_library(src: Path, batch: int, build: Path | None = None, cxx: str = "g++") -> Path:
    """``<build>/draft_b<B>_<digest>.so``: the batch-B kernel against the design in ``src`` with the C ABI of
    ``templates/draft_batch_lib.cpp``; compiled only when no library of that digest exists yet."""
    src = Path(src)
    exe = find_compiler(cxx)
    build = Path(build) if build is not None else src.parent / "lib"
    h = hashlib.sha1(library_digest(src, cxx).encode() + f"batch={batch}".encode())
    for name in (BATCH_SOURCES + (BATCH_LIB_SOURCE,)):
        own = src / name
        h.update(name.encode() + b"\0" + (own if own.is_file() else TEMPLATES / name).read_bytes())
    lib = build / f"draft_b{batch}_{h.hexdigest()[:16]}.so"
    if lib.is_file():
        return lib
    folder = build / f".batch_{batch}_sources{os.getpid()}"
    where, defines = batch_build_sources(src, folder, batch, (BATCH_LIB_SOURCE,))
    tmp = lib.with_name(f".{lib.name}.tmp{os.getpid()}")
    vendor = [f"-I{Path(p)}/include" for p in filter(None, [os.environ.get("XILINX_HLS")])]
    cmd = [exe, *LIBFLAGS, *defines, *vendor, "-I", str(src), "-o", str(tmp), str(folder / BATCH_LIB_SOURCE),
           str(where / "draft_batch.cpp")]
    try:
        _compile(cmd, src, tmp, lib)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return lib


@dataclass(frozen=True)
class Shape:
    """The kernel's compile-time constants a host needs."""
    capacity: int
    pointer_bits: int
    vocab: int
    hidden: int
    layers: int
    int8_bytes: int
    float_count: int


class _Handle:
    """A kernel instance the C ABI allocated: freed once, by ``close`` or when collected (``_destroy``: its free)."""
    handle = None
    _destroy = "hs_destroy"

    def close(self) -> None:
        if self.handle:
            getattr(self.dll, self._destroy)(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:       # interpreter shutdown: ctypes may already be gone, and the process frees it all
            pass


class KernelInstance(_Handle):
    """One kernel with its weights, KV buffers and KVMU registers, loaded from a library built by
    :func:`build_library` and a kernel folder holding the weight blobs."""

    def __init__(self, lib: Path, kernel_dir: Path):
        self.dll = ctypes.CDLL(str(lib))
        self.dll.hs_create.restype = ctypes.c_void_p
        self.dll.hs_create.argtypes = [ctypes.c_char_p]
        self.dll.hs_destroy.argtypes = [ctypes.c_void_p]
        self.dll.hs_reset.argtypes = [ctypes.c_void_p]
        self.dll.hs_step.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 5 + [ctypes.POINTER(ctypes.c_int32)]
        self.dll.hs_shape.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        raw = (ctypes.c_int64 * 7)()
        self.dll.hs_shape(raw)
        self.shape = Shape(*map(int, raw))
        self.handle = self.dll.hs_create(str(kernel_dir).encode())
        if not self.handle:
            raise UserError(f"{kernel_dir}: weights_i8.bin / weights_f32.bin missing or not the sizes the kernel "
                            f"was generated for ({self.shape.int8_bytes} bytes, {self.shape.float_count} floats); "
                            f"regenerate it (python -m heterospec.hls codegen)")
        self._out = (ctypes.c_int32 * len(OUT_FIELDS))()
        self.calls = 0        # draft_step calls since this instance was made

    def reset(self) -> None:
        """A new sequence: the KVMU's pointers to zero."""
        self.dll.hs_reset(self.handle)

    def step(self, mode: int, mark: int = 0, reinit: int = 0, base: int = 0, host_token: int = 0) -> dict:
        """One command (one ``draft_step`` call): the KVMU's outputs, the sampled token and the registers after it."""
        self.dll.hs_step(self.handle, mode, mark, reinit, base, host_token, self._out)
        self.calls += 1
        return dict(zip(OUT_FIELDS, self._out))



class BatchKernel(_Handle):
    """The batch-B kernel with its weights, B KV regions and B sets of KVMU registers, from a library built by
    :func:`build_batch_library`: :meth:`join` a sequence to a slot, :meth:`run_pass` one weight pass over the live
    slots' commands."""
    _destroy = "hsb_destroy"

    def __init__(self, lib: Path, kernel_dir: Path):
        self.dll = ctypes.CDLL(str(lib))
        self.dll.hsb_create.restype = ctypes.c_void_p
        self.dll.hsb_create.argtypes = [ctypes.c_char_p]
        self.dll.hsb_destroy.argtypes = [ctypes.c_void_p]
        self.dll.hsb_reset.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.dll.hsb_pass.restype = ctypes.c_long
        self.dll.hsb_pass.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int32),
                                      ctypes.POINTER(ctypes.c_int32)]
        self.dll.hsb_shape.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        raw = (ctypes.c_int64 * 8)()
        self.dll.hsb_shape(raw)
        self.shape, self.batch = Shape(*map(int, raw[:7])), int(raw[7])
        self.handle = self.dll.hsb_create(str(kernel_dir).encode())
        if not self.handle:
            raise UserError(f"{kernel_dir}: weights_i8.bin / weights_f32.bin missing or not the sizes the kernel "
                            f"was generated for ({self.shape.int8_bytes} bytes, {self.shape.float_count} floats); "
                            f"regenerate it (python -m heterospec.hls codegen)")
        self._cmds = (ctypes.c_int32 * (6 * self.batch))()
        self._out = (ctypes.c_int32 * (len(OUT_FIELDS) * self.batch))()
        self.passes = 0           # weight passes run (a pass with no slot writing streams nothing and counts 0)
        self.weight_words = 0     # port words those passes streamed

    def join(self, slot: int) -> None:
        """A sequence takes ``slot``: its KVMU's pointers to zero."""
        if self.dll.hsb_reset(self.handle, slot) != 0:
            raise UserError(f"slot {slot}: the kernel has slots 0 to {self.batch - 1}")

    def run_pass(self, commands: dict[int, tuple]) -> dict[int, dict]:
        """One pass: {slot: (mode, mark, reinit, base, host_token)} for the live slots; per slot the KVMU's outputs,
        the sampled token and the registers after it (the fields of :meth:`KernelInstance.step`)."""
        if len(commands) > self.batch:
            raise UserError(f"{len(commands)} commands in one pass of a batch-{self.batch} kernel")
        order = sorted(commands)
        for i, slot in enumerate(order):
            c = tuple(commands[slot]) + (0,) * (5 - len(commands[slot]))
            self._cmds[6 * i:6 * i + 6] = [slot, *map(int, c)]
        words = self.dll.hsb_pass(self.handle, len(order), self._cmds, self._out)
        if words < 0:
            raise UserError(f"slots {order}: the kernel has slots 0 to {self.batch - 1}")
        self.passes += words > 0
        self.weight_words += words
        n = len(OUT_FIELDS)
        return {slot: dict(zip(OUT_FIELDS, self._out[n * i:n * i + n])) for i, slot in enumerate(order)}

