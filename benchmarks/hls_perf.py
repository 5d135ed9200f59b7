"""The draft accelerator's ms/token table: Qwen2.5-0.5B W8A8 and the run's tiny draft on every configured board
and clock, beside the HBM roofline; the design point's share of the HBM bandwidth at contexts 0 and 512 next to
the previous (serial) point; where the time goes; why the V80 is slower with that point, and a V80-sized one; the
FlightLLM check; per-SLR resources; the U280's per-SLR capacities beside AMD's published user budget.

    python benchmarks/hls_perf.py [hydra overrides, e.g. hls=serial_u280 or hls.pipeline.port_bits=256]

Needs no weights: Qwen2.5-0.5B's published shape is in conf/hls/default.yaml; the tiny draft's shape comes from
its W8A8 export when the run has one (results/<run>/quantize/draft), else from the models config.
"""
from __future__ import annotations

import sys

from heterospec.config import compose_config, run_dir
from heterospec.config.hardware import System, device
from heterospec.hls.perf import Arch, Design, migration_ms, port_rate, roofline_ms
from heterospec.hls.published import flightllm_check, platform_check
from heterospec.hls.printout import print_breakdown, print_perf, print_resources
from heterospec.hls.tables import model_tables
from heterospec.paths import RunPaths


# The V80 sized for its own memory: 60 + 4 of its 64 HBM ports, an engine and attention twice the U280 point's.
V80_SIZED = ["hls.boards=[v80]", "hls.pipeline.weight_ports=60", "hls.pipeline.kv_ports=4", "hls.design.rows=64",
             "hls.pipeline.attention_macs=1024", "hls.pipeline.softmax_lanes=64", "hls.pipeline.vector_lanes=128"]


def print_v80(cfg, overrides: list[str], perf: list[dict], qwen: str) -> None:
    """Why the U280 design point is slower on the V80, and the V80 with a design sized for it."""
    d = Design.of(dict(cfg.hls.pipeline))
    print(f"{qwen} on V80 at 200 MHz (820 GB/s HBM2e as 64 ports of 12.8 GB/s, conf/hardware/v80.yaml)")
    for board in ("u280", "v80"):
        b = device(board, cfg)
        gbs = d.weight_ports * port_rate(d, b, 200.0) * 0.2
        print(f"  {cfg.hls.name} design on {board}: {d.weight_ports} weight ports x {gbs / d.weight_ports:.2f} GB/s "
              f"= {gbs:.0f} GB/s of weights")
    ov = [o for o in overrides if not o.startswith("hls=")] + V80_SIZED         # always from the dataflow point
    sized = model_tables(compose_config(ov), None)
    for name, rows in ((cfg.hls.name, perf), ("V80-sized", sized[0])):
        pts = {r["context_len"]: r for r in rows if r["model"] == qwen and r["board"] == "v80" and r["clock_mhz"] == 200}
        if 0 in pts and 512 in pts:
            print(f"  {name:12} context 0: {pts[0]['ms_per_token']:.3f} ms/token = "
                  f"{100 * pts[0]['bandwidth_fraction']:.1f} % of HBM;  context 512: {pts[512]['ms_per_token']:.3f} ms "
                  f"= {100 * pts[512]['bandwidth_fraction']:.1f} %")
    dev = [r for r in sized[2] if r["model"] == qwen and r["board"] == "v80" and r["slr"] == "device"]
    for r in dev:
        print(f"  V80-sized ({' '.join(o.split('.')[-1] for o in V80_SIZED[1:])}): {r['dsp']:,} DSP58 "
              f"({100 * r['dsp_util']:.1f} %); {r['uram']:,} URAM (V80 total not in its config); timing: {r['timing']}")


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
        print_breakdown(breakdown, "u280", clk, qwen, 0, roofline_ms(Arch.published(qwen), u280, 0))
        arch = Arch.published(qwen)
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
    if any(r["board"] == "v80" and r["model"] == qwen for r in perf):
        print_v80(cfg, overrides, perf, qwen)
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
    print()
    print_platform(platform_check(u280))


def print_platform(rows: list[dict]) -> None:
    """The kernel's share of the U280 as the model takes it, beside the published platform tables."""
    print("U280: what the shell leaves the kernel (the model's per-SLR figures vs published platform tables)")
    print(f"  {'':8} {'device':>10} {'model (sum of SLRs)':>20} {'AMD user budget':>16}")
    for r in rows:
        print(f"  {r['resource']:8} {r['device']:10,.0f} {r['model']:20,.0f} {r['user_budget']:16,.0f}"
              f" ({100 * (r['model'] / r['user_budget'] - 1):+.1f} %)")


if __name__ == "__main__":
    main(sys.argv[1:])
