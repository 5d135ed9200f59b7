"""Generate the draft decoder's HLS C++ from a W8A8 export: constants header, kernel, testbench, weight blobs.

The kernel itself is a template in ``heterospec/hls/templates/`` written against compile-time constants; the
generator fills ``draft_config.h`` (shape, engine parallelism, KV capacity, blob offsets, the exp polynomial
as exact hex-float literals) and lays out the int8 and float32 weight blobs the kernel reads from HBM.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from heterospec.manifests import digest_files, portable
from heterospec.errors import UserError
from heterospec.hls.perf import Arch, check_parallelism
from heterospec.quantize.intmath import EXP2_POLY, LOG2E, f32
from heterospec.quantize.w8a8 import MANIFEST_FILE, WEIGHTS_FILE, load_export

TEMPLATES = Path(__file__).parent / "templates"
STATIC = ("hs_types.h", "draft_kernel.h", "draft_kernel.cpp", "tb.cpp")
BATCH_STATIC = ("draft_batch.h", "draft_batch.cpp", "tb_batch.cpp")   # a design point with batch > 1 adds these
KERNEL_FILES = ("draft_config.h", *STATIC, "weights_i8.bin", "weights_f32.bin")


def cfloat(x: float) -> str:
    """A float32 value as an exact C++ hex-float literal."""
    return f"{f32(x).hex()}f"


def _blob_order(info: dict) -> list[str]:
    a = info["arch"]
    names = ["embed.weight", "embed.scale", "norm.weight", "rope.cos", "rope.sin"]
    if not a["tied"]:
        names += ["lm_head.weight", "lm_head.scale"]
    for i in range(a["layers"]):
        names += [f"layers.{i}.{n}" for n in ("attn_norm", "qkv.weight", "qkv.scale", "qkv.bias", "o.weight", "o.scale",
                                              "mlp_norm", "gate_up.weight", "gate_up.scale", "down.weight",
                                              "down.scale", "v_scale")]
    return names


def export_digest(export_dir: Path) -> str:
    """sha1 of a W8A8 export's manifest and weights (16 hex digits): which model, quantised how, a kernel is for."""
    h = hashlib.sha1()
    for name in (MANIFEST_FILE, WEIGHTS_FILE):
        h.update((Path(export_dir) / name).read_bytes())
    return h.hexdigest()[:16]


def generate(export_dir: Path, out: Path, board: str, rows: int, cols: int, pointer_bits: int, port_bits: int = 256,
             dataflow: bool = False, prefetch_words: int = 2, tree: Path | None = None, batch: int = 1) -> dict:
    """Write the kernel sources for ``board`` into ``out``'s folder; ``out`` (kernel.json) is written last, listing
    each file's size and sha256. ``port_bits``, ``dataflow`` and ``prefetch_words`` are the design's
    (``hls.pipeline``); the export is recorded relative to the sources when both lie in the results ``tree``.
    ``batch`` > 1 adds the batch-B kernel (``draft_batch.cpp``: that many sequences per weight pass, top
    ``draft::draft_step_batch``); at 1 the sources are the batch-1 design's alone."""
    if port_bits < 8 or port_bits % 8 or port_bits & (port_bits - 1):
        raise UserError(f"hls.pipeline.port_bits={port_bits}: expected a power of two, at least 8")
    if batch < 1:
        raise UserError(f"hls.kernel.batch={batch}: expected sequences per weight pass, at least 1")
    tensors, info = load_export(export_dir)
    a = info["arch"]
    arch = Arch.of(a)
    check_parallelism(arch, rows, cols, f"hls.kernel (draft {a['hidden']}x{a['layers']})")
    capacity = int(tensors["rope.cos"].shape[0])
    if capacity > (1 << pointer_bits) - 1:
        raise UserError(f"hls.kvmu_pointer_bits={pointer_bits} addresses {(1 << pointer_bits) - 1} KV slots, fewer "
                        f"than the export's {capacity} positions; raise it or lower quantize.rope_positions")
    src = Path(out).parent
    export = portable(export_dir, src, tree) if tree is not None else str(Path(export_dir).resolve())
    tmp = src.with_name(f".{src.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    o8, of, n8, nf = {}, {}, 0, 0
    with open(tmp / "weights_i8.bin", "wb") as f8, open(tmp / "weights_f32.bin", "wb") as ff:
        for name in _blob_order(info):
            t = tensors[name].contiguous()
            if t.dtype == torch.int8:
                o8[name] = n8
                f8.write(t.numpy().tobytes())
                n8 += t.numel()
            else:
                of[name] = nf
                ff.write(t.to(torch.float32).numpy().astype("<f4").tobytes())
                nf += t.numel()
    lm_head = "embed" if a["tied"] else "lm_head"
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True)
    header = env.get_template("draft_config.h.j2").render(
        source=export, format=info["format"], board=board, rows=rows, cols=cols, a=a, capacity=capacity,
        pointer_bits=pointer_bits, eps=cfloat(a["rms_norm_eps"]), inv_sqrt_d=cfloat(1.0 / np.sqrt(a["head_dim"])),
        log2e=cfloat(LOG2E), poly=[cfloat(c) for c in EXP2_POLY], o8=o8, of=of, n8=n8, nf=nf, lm_head=lm_head,
        port_bits=port_bits, dataflow=dataflow, prefetch_words=max(2, prefetch_words), batch=batch)
    (tmp / "draft_config.h").write_text(header)
    static = STATIC + (BATCH_STATIC if batch > 1 else ())
    for name in static:
        shutil.copy(TEMPLATES / name, tmp / name)
    files = KERNEL_FILES + (BATCH_STATIC if batch > 1 else ())
    digest = hashlib.sha1(b"".join((tmp / n).read_bytes() for n in files)).hexdigest()[:16]
    manifest = {"board": board, "export": export, "arch": a, "rows": rows, "cols": cols,
                "capacity": capacity, "pointer_bits": pointer_bits, "port_bits": port_bits, "dataflow": dataflow,
                "prefetch_words": max(2, prefetch_words), "int8_bytes": n8, "float_count": nf,
                "files": digest_files(tmp, skip=(Path(out).name,)), "top": "draft::draft_step", "sha1": digest,
                "export_sha1": export_digest(export_dir)}
    if batch > 1:                                       # a batch-1 design's manifest stays as it was
        manifest.update(batch=batch, top="draft::draft_step_batch")
    (tmp / Path(out).name).write_text(json.dumps(manifest, indent=2))
    if src.exists():
        shutil.rmtree(src)
    os.replace(tmp, src)
    return manifest
