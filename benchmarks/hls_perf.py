"""The draft accelerator's ms/token table: Qwen2.5-0.5B W8A8 and the run's tiny draft on every configured board
and clock, beside the HBM roofline, where the time goes at the paper's design point, and state-migration costs.

    python benchmarks/hls_perf.py [hydra overrides, e.g. hls.design.cols=128 hls.pipeline.port_bits=512]

Needs no weights: Qwen2.5-0.5B's published shape is in conf/hls/default.yaml; the tiny draft's shape comes from
its W8A8 export when the run has one (results/<run>/quantize/draft), else from the models config.
"""
from __future__ import annotations

import sys

from heterospec.config import compose_config, run_dir
from heterospec.hls.perf import Arch, migration_ms, roofline_ms
from heterospec.hls.report import print_breakdown, print_perf, print_resources
from heterospec.hls.stage import board_config, model_tables
from heterospec.paths import RunPaths


def main(overrides: list[str]) -> None:
    cfg = compose_config(overrides)
    paths = RunPaths(run_dir(cfg))
    export = paths.quantized_draft if paths.quantized_draft.exists() else None
    shape = None
    if export is None and cfg.models.draft.source == "train":     # shape from the config; vocab from the tokenizer
        from heterospec.models.tokenizer import build_tokenizer
        a = cfg.models.draft.arch
        shape = dict(hidden=a.hidden_size, layers=a.num_hidden_layers, heads=a.num_attention_heads,
                     kv_heads=a.num_key_value_heads, head_dim=a.hidden_size // a.num_attention_heads,
                     intermediate=a.intermediate_size, vocab=len(build_tokenizer()), tied=True)
    perf, breakdown, res = model_tables(cfg, paths, export, overrides, shape)
    for ctx in sorted({r["context_len"] for r in perf})[:2]:
        print_perf(perf, ctx)
        print()
    qwen = "Qwen2.5-0.5B-Instruct"
    point = [r for r in perf if r["model"] == qwen and r["board"] == "u280" and r["clock_mhz"] == 200.0
             and r["context_len"] == 0]
    if point:
        print_breakdown(breakdown, "u280", 200.0, qwen, 0, point[0]["roofline_ms"])
        arch = Arch.of(dict(cfg.hls.reference_models[qwen]))
        pipe = cfg.hls.pipeline
        stream_gbs = pipe.weight_ports * min(pipe.port_bits / 8 * 200e6, 14.375e9 * pipe.hbm_efficiency) / 1e9
        print(f"  the gap: weights stream through {pipe.weight_ports:.0f} of 32 HBM pseudo-channels, each capped by its "
              f"{pipe.port_bits:.0f}-bit AXI port at 200 MHz: {stream_gbs:.1f} GB/s of the board's 460 GB/s; "
              f"the roofline assumes all 460")
        link = cfg.system.link.bandwidth_gbs if "link" in cfg.system else 16.0
        for n in (128, 1024):
            m = migration_ms(arch, n, float(link))
            pre = sum(r["prefill_ms_per_token"] for r in perf if r["model"] == qwen and r["board"] == "u280"
                      and r["clock_mhz"] == 200.0 and r["context_len"] == 0)
            print(f"  state migration of {n} tokens over {link:g} GB/s: token ids {m['token_ids_ms']:.3f} ms + "
                  f"prefill-by-decode ~{n * pre:.0f} ms, or the int8 KV cache {m['kv_state_ms']:.2f} ms")
        print(f"  roofline check: {roofline_ms(arch, board_config(overrides, 'u280'), 0):.3f} ms/token on U280")
    print()
    print_resources(res)


if __name__ == "__main__":
    main(sys.argv[1:])
