"""What a faster draft buys in DFVG: the run's measured rounds replayed with the ``hls`` profile for each design
point, at the measured contexts and with the prompt made longer by a fixed offset (every round's KV lengths
shifted), FPGA+GPU (overlapped) against GPU-only speculative decoding.

    python -m heterospec.dfvg buys experiment=dfvg            # after the dfvg experiment's collect stage
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from heterospec.config import compose_config
from heterospec.errors import UserError
from heterospec.hls.perf_table import HLS_PERF_SCHEMA
from heterospec.hls.tables import model_tables
from heterospec.paths import RunPaths


def perf_table(overrides: list[str], design: str) -> pa.Table:
    """The HLS perf table of one hls config (no weights needed: the reference models' rows)."""
    ov = [o for o in overrides if not o.startswith("hls=")] + [f"hls={design}"]
    return pa.Table.from_pylist(model_tables(compose_config(ov), None)[0], schema=HLS_PERF_SCHEMA)


def _shift(t: pa.Table, cols: list[str], offset: int) -> pa.Table:
    for c in cols:
        i = t.schema.get_field_index(c)
        t = t.set_column(i, c, pc.cast(pc.add(t[c], offset), t.schema.field(c).type))
    return t


def dfvg_sweep(cfg, paths: RunPaths, overrides: list[str], designs: list[str], offsets: list[int]) -> list[dict]:
    """Per design x context offset x strategy: tokens/s of FPGA+GPU and GPU-only, and their ratio."""
    from heterospec.dfvg.replay import replay
    from heterospec.dfvg.schemas import DFVG_GENERATIONS_SCHEMA, DFVG_ROUNDS_SCHEMA
    from heterospec.store import read_parquet
    missing = [p for p in [paths.dfvg_generations("target_greedy"), *map(paths.dfvg_rounds, cfg.dfvg.strategies)]
               if not p.exists()]
    if missing:
        raise UserError(f"{missing[0]}: no DFVG rounds; run the dfvg experiment's collect stage first")
    rounds = pa.concat_tables([read_parquet(paths.dfvg_rounds(s), DFVG_ROUNDS_SCHEMA) for s in cfg.dfvg.strategies])
    gens = read_parquet(paths.dfvg_generations("target_greedy"), DFVG_GENERATIONS_SCHEMA)
    rcfg = compose_config([*overrides, "dfvg.replay.profiles=[hls]"])
    out = []
    for design in designs:
        perf = perf_table(overrides, design)
        for off in offsets:
            table = replay(_shift(rounds, ["kv_target", "kv_draft"], off), _shift(gens, ["prompt_tokens"], off),
                           rcfg, cfg.name, perf)
            rows = table.select(["strategy", "design", "tokens", "latency_ms"]).to_pylist()
            for strategy in cfg.dfvg.strategies:
                tps = {}
                for d in ("fpga_gpu", "gpu_only"):
                    sel = [r for r in rows if r["strategy"] == strategy and r["design"] == d]
                    tps[d] = 1e3 * sum(r["tokens"] for r in sel) / sum(r["latency_ms"] for r in sel)
                out.append({"hls": design, "context_offset": off, "strategy": strategy,
                            "fpga_gpu_tok_s": tps["fpga_gpu"], "gpu_only_tok_s": tps["gpu_only"],
                            "speedup_vs_gpu_only": tps["fpga_gpu"] / tps["gpu_only"]})
    return out


def print_sweep(rows: list[dict]) -> None:
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    print("DFVG replayed with the hls profile: FPGA+GPU (overlapped) speed over GPU-only speculative decoding")
    print(f"  {'hls design':12} {'+context':>8} " + " ".join(f"{s:>13}" for s in strategies))
    for (design, off) in dict.fromkeys((r["hls"], r["context_offset"]) for r in rows):
        cells = {r["strategy"]: r for r in rows if r["hls"] == design and r["context_offset"] == off}
        print(f"  {design:12} {off:8} " + " ".join(f"{cells[s]['speedup_vs_gpu_only']:12.2f}x" for s in strategies))
