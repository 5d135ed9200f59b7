"""The generated draft kernel as a shared library, and a handle on one kernel instance through its C ABI.

The library is built with g++ from the generated sources (the same C++ the vendor flow takes, compiled as the C
simulation compiles it: no fused multiply-add, so it stays bit-exact with the torch int8 reference) plus
``templates/draft_lib.cpp``, a small C ABI of ours: create an instance holding the weights and KV buffers, reset its
KVMU, run one command (one ``draft_step`` call). It is cached by a digest of its sources, the compiler and the flags:
a kernel regenerated with other constants or another template gets a library of its own.
"""
from __future__ import annotations

import ctypes
import hashlib
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
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise UserError(f"building the kernel library from {src} failed: {first}")
    os.replace(tmp, lib)      # atomic: a concurrent builder of the same digest writes the same bytes
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


class KernelInstance:
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

    def close(self) -> None:
        if self.handle:
            self.dll.hs_destroy(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:       # interpreter shutdown: ctypes may already be gone, and the process frees it all
            pass
