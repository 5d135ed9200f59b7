"""The draft accelerator's ms/token table: Qwen2.5-0.5B W8A8 and the run's tiny draft on every configured board
and clock, beside the HBM roofline; the design point's share of the HBM bandwidth at contexts 0 and 512 next to
the previous (serial) point; where the time goes; the FlightLLM check; per-SLR resources; state-migration costs.

    python benchmarks/hls_perf.py [hydra overrides, e.g. hls=serial_u280 or hls.pipeline.port_bits=256]

Needs no weights: Qwen2.5-0.5B's published shape is in conf/hls/default.yaml; the tiny draft's shape comes from
its W8A8 export when the run has one (results/<run>/quantize/draft), else from the models config.
"""
from __future__ import annotations

import sys

from heterospec.config import compose_config, run_dir
from heterospec.config.hardware import System, device
from heterospec.hls.perf import Arch, Design, migration_ms, port_rate, roofline_ms
from heterospec.hls.published import flightllm_check
from heterospec.hls.report import print_breakdown, print_perf, print_resources
from heterospec.hls.tables import model_tables
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
    perf, breakdown, res = model_tables(cfg, export, shape)
    for ctx in sorted({r["context_len"] for r in perf})[:2]:
        print_perf(perf, ctx)
        print()
    qwen = "Qwen2.5-0.5B-Instruct"
    u280 = device("u280", cfg)
    clk = u280.clock_mhz
    old_ov = [o for o in overrides if not o.startswith("hls=")] + ["hls=serial_u280"]
    old = model_tables(compose_config(old_ov), None)[0] if cfg.hls.name != "serial_u280" else []
    print(f"{qwen} on U280 at {clk:.0f} MHz: share of the 460 GB/s HBM roofline")
    for name, rows in ((cfg.hls.name, perf), ("serial_u280", old)):
        pts = {r["context_len"]: r for r in rows if r["model"] == qwen and r["board"] == "u280" and r["clock_mhz"] == clk}
        if 0 in pts and 512 in pts:
            print(f"  {name:12} context 0: {pts[0]['ms_per_token']:.3f} ms/token = {100 * pts[0]['bandwidth_fraction']:.1f} % "
                  f"of HBM bandwidth (bar 75 %);  context 512: {pts[512]['ms_per_token']:.3f} ms = "
                  f"{100 * pts[512]['bandwidth_fraction']:.1f} % (bar 65 %);  closes at {clk:.0f} MHz: "
                  f"{'yes' if pts[0]['closes'] else 'no'}")
    print()
    if any(r["model"] == qwen for r in perf):
        print_breakdown(breakdown, "u280", clk, qwen, 0, roofline_ms(Arch.of(dict(cfg.hls.reference_models[qwen])), u280, 0))
        arch = Arch.of(dict(cfg.hls.reference_models[qwen]))
        d = Design.of(dict(cfg.hls.pipeline))
        print(f"  weights stream through {d.weight_ports} of 32 HBM pseudo-channels at "
              f"{port_rate(d, u280, clk) * clk * 1e6 / 1e9:.2f} GB/s each ({d.port_bits}-bit ports at {clk:.0f} MHz): "
              f"{d.weight_ports * port_rate(d, u280, clk) * clk * 1e6 / 1e9:.0f} GB/s of the card's 460")
        link = System.of(cfg.system).link.bandwidth_gbs
        for n in (128, 1024):
            m = migration_ms(arch, n, float(link))
            pre = sum(r["prefill_ms_per_token"] for r in perf if r["model"] == qwen and r["board"] == "u280"
                      and r["clock_mhz"] == clk and r["context_len"] == 0)
            print(f"  state migration of {n} tokens over {link:g} GB/s: token ids {m['token_ids_ms']:.3f} ms + "
                  f"prefill-by-decode ~{n * pre:.0f} ms, or the int8 KV cache {m['kv_state_ms']:.2f} ms")
    print()
    fl = flightllm_check(dict(cfg.hls.pipeline), u280)
    print(f"FlightLLM check (LLaMA-2-7B on U280 at {fl['clock_mhz']:.0f} MHz, measured {fl['measured_ms']:.1f} ms/token = "
          f"55 tokens/s; assumptions in docs/hls.md)")
    for p in fl["points"]:
        print(f"  context {p['context_len']:4}: model {p['ms_per_token']:.2f} ms/token ({100 * p['error']:+.1f} %), "
              f"roofline {p['roofline_ms']:.2f} ms")
    print(f"  worst error {100 * fl['worst_error']:.1f} % (bar 15 %): {'within' if fl['worst_error'] < 0.15 else 'OUTSIDE'}")
    print()
    print_resources(res)


if __name__ == "__main__":
    main(sys.argv[1:])
