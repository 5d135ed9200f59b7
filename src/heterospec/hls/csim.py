"""C simulation of the generated kernel with g++, checked bit for bit against the torch int8 reference.

Greedy runs: each prompt goes in through the KVMU's initialisation mode (prefill-by-decode, one token per
kernel call), then the kernel speculates on its own sampler's tokens. Every call's sampled token must equal
the torch reference's argmax at that position, and every integer accumulator vector (QKV, scores, p.v, O,
gate/up, down, LM head) must hash the same (``TapSink`` in draft_kernel.h; :func:`tap_hashes` here).

KVMU runs drive accept, rollback and re-initialisation after a backtrack through the C model and check the
tokens it then speculates against torch greedy decoding of the sequence the KV cache should hold, and its
pointer registers against :class:`heterospec.hls.kvmu.KvmuModel`.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from heterospec.errors import UserError
from heterospec.progress import progress
from heterospec.hls.kvmu import ACCEPT, INIT, ROLLBACK, SPEC, KvmuModel

log = logging.getLogger("heterospec.hls")
P_HASH, Q_HASH = 0x100000001B3, 0x9E3779B97F4A7C15
CXXFLAGS = ["-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math"]


def compile_kernel(src: Path, build: Path, cxx: str = "g++") -> Path:
    """Compile kernel + testbench; one line when the compiler is missing or the build fails."""
    exe = shutil.which(cxx)
    if exe is None:
        raise UserError(f"C++ compiler '{cxx}' not found (hls.cxx); install g++ or point hls.cxx at a compiler")
    build.mkdir(parents=True, exist_ok=True)
    out = build / "tb"
    vendor = [f"-I{Path(p)}/include" for p in filter(None, [shutil.os.environ.get("XILINX_HLS")])]
    cmd = [exe, *CXXFLAGS, *vendor, "-I", str(src), "-o", str(out), str(src / "tb.cpp"), str(src / "draft_kernel.cpp")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise UserError(f"compiling the kernel in {src} failed: {first}")
    return out


def run_script(tb: Path, src: Path, commands: list[tuple], workdir: Path, n_taps: int):
    """Run a command script; returns (rows of ints per command, tap hashes [written tokens, n_taps] uint64)."""
    script = workdir / "script.txt"
    lines = []
    for c in commands:
        lines.append("reset" if c == "reset" else "cmd " + " ".join(str(int(v)) for v in c))
    script.write_text("\n".join(lines) + "\n")
    out, taps = workdir / "out.txt", workdir / "taps.bin"
    r = subprocess.run([str(tb), str(src), str(script), str(out), str(taps)], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"C simulation failed (exit {r.returncode}): {r.stderr.strip()[:200]}")
    rows = [list(map(int, ln.split())) for ln in out.read_text().splitlines()]
    hashes = np.fromfile(taps, dtype=np.uint64).reshape(-1, n_taps)
    return rows, hashes


def _powers(base: int, n: int) -> np.ndarray:
    out, v = [], 1
    for _ in range(n):
        out.append(v)
        v = (v * base) % (1 << 64)
    return np.array(out, dtype=np.uint64)


def block_hash(block: np.ndarray) -> int:
    """sum_r (sum_j v[r, j] P^j) Q^r mod 2^64 of an integer block [rows, n], as the C TapSink computes it."""
    u = np.ascontiguousarray(block.astype(np.int64)).view(np.uint64)
    with np.errstate(over="ignore"):
        hr = (u * _powers(P_HASH, u.shape[1])[None, :]).sum(axis=1, dtype=np.uint64)
        return int((hr * _powers(Q_HASH, u.shape[0])).sum(dtype=np.uint64))


def tap_hashes(taps: dict, layers: int, heads: int) -> np.ndarray:
    """Per token of a B=1 reference forward, the hashes in the kernel's tap order."""
    T = taps["0.qkv"].shape[1]
    out = np.zeros((T, layers * 6 + 1), dtype=np.uint64)
    np_taps = {k: v.to(torch.int64).cpu().numpy() for k, v in taps.items()}
    for t in range(T):
        col = 0
        for li in range(layers):
            score = np_taps[f"{li}.score"][0, :, :, t, :t + 1].reshape(heads, t + 1)
            pv = np_taps[f"{li}.pv"][0, :, :, t, :].reshape(heads, -1)
            for block in (np_taps[f"{li}.qkv"][0, t][None], score, pv, np_taps[f"{li}.o"][0, t][None],
                          np_taps[f"{li}.gate_up"][0, t][None], np_taps[f"{li}.down"][0, t][None]):
                out[t, col] = block_hash(block)
                col += 1
        out[t, col] = block_hash(np_taps["lm_head"][0, t][None])
    return out


@torch.no_grad()
def greedy(model, ids: list[int], n: int, eos: int | None) -> list[int]:
    """Torch greedy continuation of ``ids`` (stops after eos)."""
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, eos_token_id=eos)
    return out[0, len(ids):].tolist()


def check_greedy(tb, src, model, prompts: list[list[int]], max_new: int, eos, workdir: Path) -> list[dict]:
    """Each prompt: prefill-by-decode, then speculation; tokens and accumulator hashes vs the torch reference."""
    layers, heads = model.arch["layers"], model.arch["heads"]
    rows = []
    for i, ids in enumerate(progress(prompts, desc="csim greedy", unit="prompt")):
        t0 = time.time()
        gen = greedy(model, ids, max_new, eos)
        seq = ids + gen[:-1]                                   # what the kernel processes
        taps: dict = {}
        logits = model(input_ids=torch.tensor([seq]), use_cache=False, taps=taps).logits[0]
        want_tokens = logits.argmax(-1).tolist()
        want_hashes = tap_hashes(taps, layers, heads)
        cmds = ["reset"] + [(INIT, 0, 0, 0, t) for t in ids] + [(SPEC, 0, 0, 0, 0)] * (len(gen) - 1)
        out, hashes = run_script(tb, src, cmds, workdir, layers * 6 + 1)
        got_tokens = [r[4] for r in out]
        fed = [r[3] for r in out]
        rows.append({"scenario": "greedy", "prompt": i, "tokens_in": len(seq), "tokens_generated": len(gen),
                     "tokens_match": got_tokens == want_tokens and got_tokens[len(ids) - 1:] == gen and fed == seq,
                     "taps_compared": int(want_hashes.size), "taps_match": int((hashes == want_hashes).sum())
                     if hashes.shape == want_hashes.shape else 0,
                     "pointers_match": True, "wall_s": time.time() - t0})
        log.info("csim prompt %d: %d tokens, tokens %s, %d/%d accumulators match (%.1fs)", i, len(gen),
                 "match" if rows[-1]["tokens_match"] else "DIFFER", rows[-1]["taps_match"], rows[-1]["taps_compared"],
                 rows[-1]["wall_s"])
    return rows


def kvmu_scenarios(model, ids: list[int], eos) -> list[tuple[str, list, list[int]]]:
    """(name, commands, expected sampled tokens of the final speculation) for accept/rollback and re-init."""
    s = greedy(model, ids, 13, None)                            # s1..s13, the prompt's greedy continuation
    P, X, Z = len(ids), ids[-1], ids[1]                          # host tokens: stand-ins for a target's rewrite
    base = [(INIT, 0, 0, 0, t) for t in ids] + [(SPEC, 0, 0, 0, 0)] * 7 + [(SPEC, 1, 0, 0, 0)] \
        + [(SPEC, 0, 0, 0, 0)] * 4 + [(ACCEPT, 0, 0, 0, 0), (ROLLBACK, 0, 0, 0, 0)]
    # accept the first step [P, P+8), drop the step-ahead, host writes X, speculate 10
    a_cmds = base + [(INIT, 0, 0, 0, X)] + [(SPEC, 0, 0, 0, 0)] * 10
    a_want = greedy(model, ids + s[:8] + [X], 11, None)
    # then backtrack into the accepted step: re-initialise at P+4 with Z, speculate 6
    b_cmds = a_cmds + [(INIT, 0, 1, P + 4, Z)] + [(SPEC, 0, 0, 0, 0)] * 6
    b_want = greedy(model, ids + s[:4] + [Z], 7, None)
    return [("kvmu_accept_rollback", a_cmds, s[:13] + a_want), ("kvmu_reinit", b_cmds, b_want)]


def check_kvmu(tb, src, model, ids: list[int], eos, workdir: Path, pointer_bits: int) -> list[dict]:
    """KVMU modes through the C model: tokens afterwards vs torch greedy, pointers vs the golden model."""
    layers = model.arch["layers"]
    rows = []
    for name, cmds, want in kvmu_scenarios(model, ids, eos):
        t0 = time.time()
        out, _ = run_script(tb, src, ["reset", *cmds], workdir, layers * 6 + 1)
        gold, ptr_ok = KvmuModel(pointer_bits), True
        for c, r in zip(cmds, out):
            g = gold.step(c[0], host_token=c[4], mark=bool(c[1]), reinit=bool(c[2]), base=c[3])
            ptr_ok &= (r[0], r[1], r[2], r[5], r[6], r[7]) == (g["error"], g["wr_en"], g["wr_addr"], gold.valid,
                                                                 gold.current, gold.ahead)
        sampled = [r[4] for c, r in zip(cmds, out) if r[1] == 1][len(ids) - 1:]
        if name == "kvmu_reinit":
            sampled = sampled[-len(want):]
        rows.append({"scenario": name, "prompt": 0, "tokens_in": sum(r[1] for r in out),
                     "tokens_generated": len(want), "tokens_match": sampled == want, "taps_compared": 0,
                     "taps_match": 0, "pointers_match": bool(ptr_ok), "wall_s": time.time() - t0})
        log.info("csim %s: tokens %s, pointers %s (%.1fs)", name, "match" if sampled == want else "DIFFER",
                 "match" if ptr_ok else "DIFFER", rows[-1]["wall_s"])
    return rows


# ----------------------------------------------------------------------------- the batch-B kernel
def compile_batch(src: Path, build: Path, batch: int, cxx: str = "g++") -> Path:
    """The batch-B testbench against the design in ``src``: its own batch sources when it is a batch design point
    (``HS_BATCH`` in its header), else the templates' at ``HS_BATCH=batch`` (the batch-1 design's sources are the
    kernel's tasks both run)."""
    from heterospec.hls.kernel_lib import batch_build_sources
    exe = shutil.which(cxx)
    if exe is None:
        raise UserError(f"C++ compiler '{cxx}' not found (hls.cxx); install g++ or point hls.cxx at a compiler")
    folder = Path(build) / f"batch_{batch}"
    where, defines = batch_build_sources(src, folder, batch, ("tb_batch.cpp",))
    out = folder / "tb_batch"
    cmd = [exe, *CXXFLAGS, *defines, "-I", str(src), "-o", str(out), str(folder / "tb_batch.cpp"),
           str(where / "draft_batch.cpp")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise UserError(f"compiling the batch-{batch} kernel against {src} failed: {first}")
    return out


def weight_words(arch: dict, port_bits: int) -> int:
    """Port words one pass streams: each matrix once, its tail word padded (the loader's rule), by hand from the
    shape."""
    a, b = arch, port_bits // 8
    qkv = (a["heads"] + 2 * a["kv_heads"]) * a["head_dim"]
    per_layer = [qkv * a["hidden"], a["hidden"] * a["heads"] * a["head_dim"], 2 * a["intermediate"] * a["hidden"],
                 a["hidden"] * a["intermediate"]]
    return a["layers"] * sum(-(-n // b) for n in per_layer) + -(-a["vocab"] * a["hidden"] // b)


def batch_schedule(sequences: list[list[tuple]], batch: int, stagger: int = 2) -> list:
    """A script of passes over ``batch`` slots: slot b first takes a sequence at pass stagger * b; a sequence runs
    one command a pass and leaves its slot after its last, and the next waiting one joins that slot at the next
    pass. Returns script items: ("reset", slot) or [(slot, sequence, command index), ...] (one pass)."""
    waiting = list(range(len(sequences)))
    slots: list[list[int] | None] = [None] * batch        # [sequence, next command] per slot
    script, p = [], 0
    while waiting or any(slots):
        for b in range(batch):
            if slots[b] is None and waiting and p >= stagger * b:
                slots[b] = [waiting.pop(0), 0]
                script.append(("reset", b))
        step = []
        for b, s in enumerate(slots):
            if s is not None:
                step.append((b, s[0], s[1]))
                s[1] += 1
                if s[1] == len(sequences[s[0]]):
                    slots[b] = None
        script.append(step)
        p += 1
    return script


def run_batch_script(tb: Path, src: Path, sequences: list[list[tuple]], script: list, workdir: Path, n_taps: int):
    """Run a pass script through the batch testbench. Returns (rows per (sequence, command): the batch-1
    testbench's columns, taps per (sequence, command) that wrote, (writers, words) per pass)."""
    lines = []
    for item in script:
        if isinstance(item, tuple):
            lines.append(f"reset {item[1]}")
        else:
            lines.append(f"pass {len(item)}")
            lines += [f"{b} " + " ".join(str(int(v)) for v in sequences[s][i]) for b, s, i in item]
    (workdir / "batch_script.txt").write_text("\n".join(lines) + "\n")
    out, passes, taps = workdir / "batch_out.txt", workdir / "batch_passes.txt", workdir / "batch_taps.bin"
    r = subprocess.run([str(tb), str(src), str(workdir / "batch_script.txt"), str(out), str(passes), str(taps)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"batch C simulation failed (exit {r.returncode}): {r.stderr.strip()[:200]}")
    emitted = [(b, s, i) for item in script if not isinstance(item, tuple) for b, s, i in item]
    raw = [list(map(int, ln.split())) for ln in out.read_text().splitlines()]
    records = np.fromfile(taps, dtype=np.uint64).reshape(-1, n_taps + 1)
    rows, hashes, k = {}, {}, 0
    for (b, s, i), row in zip(emitted, raw, strict=True):
        if row[0] != b:
            raise UserError(f"batch C simulation: a row of slot {row[0]} where slot {b} was expected")
        rows[s, i] = row[1:]
        if row[2] == 1:                                          # wr_en: the token went through the weight pass
            if int(records[k, 0]) != b:
                raise UserError(f"batch C simulation: taps of slot {int(records[k, 0])} where slot {b} was expected")
            hashes[s, i] = records[k, 1:]
            k += 1
    pass_rows = [tuple(map(int, ln.split())) for ln in passes.read_text().splitlines()]
    return rows, hashes, pass_rows


def check_batch(tb_batch, tb, src, sequences: list[list[tuple]], batch: int, words_per_pass: int, workdir: Path,
                n_taps: int, stagger: int = 2) -> dict:
    """``sequences`` (command lists) through the batch-B kernel, joining and leaving its slots between passes, each
    row and accumulator hash against the batch-1 kernel running the same sequence alone; every pass that writes
    streams the weights once (``words_per_pass``), whatever its number of sequences."""
    t0 = time.time()
    script = batch_schedule(sequences, batch, stagger)
    rows, hashes, passes = run_batch_script(tb_batch, src, sequences, script, workdir, n_taps)
    solo: list[tuple[list, np.ndarray]] = []
    for cmds in sequences:                                       # the reference: each sequence alone, batch 1
        out, h = run_script(tb, src, ["reset", *cmds], workdir, n_taps)
        solo.append((out, h))
    tokens_ok = pointers_ok = True
    taps_compared = taps_match = 0
    for s, (out, h) in enumerate(solo):
        written = 0
        for i, want in enumerate(out):
            got = rows[s, i]
            tokens_ok &= (got[3], got[4]) == (want[3], want[4])
            pointers_ok &= (got[0], got[1], got[2], got[5], got[6], got[7]) == (want[0], want[1], want[2], want[5],
                                                                                  want[6], want[7])
            if want[1] == 1:
                taps_compared += n_taps
                if (s, i) in hashes:
                    taps_match += int((hashes[s, i] == h[written]).sum())
                written += 1
    occupancy = [w for w, _ in passes]
    weights_once = all(words == (words_per_pass if w else 0) for w, words in passes)
    row = {"scenario": "batch", "prompt": -1, "batch": batch, "passes": sum(1 for w in occupancy if w),
           "max_sequences": max(occupancy, default=0), "sequences": len(sequences),
           "tokens_in": sum(occupancy), "tokens_generated": sum(1 for cmds in sequences for c in cmds if c[0] == SPEC),
           "tokens_match": bool(tokens_ok), "taps_compared": taps_compared, "taps_match": taps_match,
           "pointers_match": bool(pointers_ok), "weights_once": bool(weights_once), "wall_s": time.time() - t0}
    log.info("csim batch %d: %d sequences in %d passes (up to %d a pass), tokens %s, %d/%d accumulators, pointers %s, "
             "weights once a pass %s (%.1fs)", batch, len(sequences), row["passes"], row["max_sequences"],
             "match" if tokens_ok else "DIFFER", taps_match, taps_compared, "match" if pointers_ok else "DIFFER",
             "yes" if weights_once else "NO", row["wall_s"])
    return row


def batch_sequences(model, prompts: list[list[int]], batch: int, eos, max_new: int) -> list[list[tuple]]:
    """Command lists for a batch check: 2 x batch greedy sequences of different prompts and lengths (prefill by
    decode, then speculation) with the two KVMU scenarios among them (accept, rollback, re-initialisation after a
    backtrack), so that sequences roll back while others continue."""
    seqs = []
    for i in range(2 * batch):
        ids = prompts[i % len(prompts)][: len(prompts[i % len(prompts)]) - (i // len(prompts)) % 3]
        new = 2 + (7 * i) % max(3, max_new)
        seqs.append([(INIT, 0, 0, 0, t) for t in ids] + [(SPEC, 0, 0, 0, 0)] * new)
    scenarios = [cmds for _, cmds, _ in kvmu_scenarios(model, prompts[0], eos)]
    seqs.insert(min(1, len(seqs)), scenarios[0])
    seqs.insert(len(seqs) // 2, scenarios[1])
    return seqs
