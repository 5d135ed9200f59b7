"""A published FPGA decoder the performance model is checked against: FlightLLM on the Alveo U280.

FlightLLM (S. Zeng et al., "FlightLLM: Efficient Large Language Model Inference with a Complete Mapping Flow on
FPGAs", FPGA '24, arXiv:2401.03868) decodes LLaMA-2-7B at batch 1 on a U280 at 225 MHz from its HBM
(460 GB/s), 55 tokens/s measured (18.2 ms/token). What the paper does not give in the model's terms -- engine
sizes, port widths, stall behaviour, the context of the measurement -- is assumed below and listed in docs/hls.md.
"""
from __future__ import annotations

from typing import Any

from heterospec.config.hardware import Device
from heterospec.hls.perf import Arch, Design, check_parallelism, roofline_ms, token_ms

LLAMA2_7B = Arch(hidden=4096, layers=32, heads=32, kv_heads=32, head_dim=128, intermediate=11008, vocab=32000,
                 tied=False, mlp="swiglu")                           # the published config
FLIGHTLLM_U280 = {"clock_mhz": 225.0, "measured_ms": 1e3 / 55}      # published: 225 MHz, 55 tokens/s
# assumed: dense int8 weights with per-row fp16 scales, fp16 KV, every HBM pseudo-channel carrying both through a
# 512-bit port, the weight stream overlapping the rest (FlightLLM keeps decode activations on chip), engines large
# enough that the HBM bounds the token, a weight FIFO as deep as the default design's: the model's own dataflow design
# point with these changes (whatever design the run's pipeline is, so a serial one is checked the same way)
FLIGHTLLM_DESIGN = {"weight_bits": 8, "scale_bytes": 2, "kv_bits": 16, "memory": "hbm", "weight_ports": 32,
                    "kv_ports": 0, "ports": "shared", "port_bits": 512, "engines": "shared", "dataflow": True,
                    "prefetch_words": 4096}
FLIGHTLLM_ENGINE = (32, 128)                                         # assumed: 4,096 int8 MACs per cycle
FLIGHTLLM_CONTEXTS = (0, 512)                                        # assumed: the measurement's context lies between


def flightllm_check(pipeline: dict, board: Any) -> dict:
    """The model's ms/token for FlightLLM's U280 LLaMA-2-7B decode at the assumed contexts, against the measured."""
    design = Design.of({**dict(pipeline), **FLIGHTLLM_DESIGN}, "FlightLLM design")
    rows, cols = FLIGHTLLM_ENGINE
    check_parallelism(LLAMA2_7B, rows, cols, "FlightLLM engine")
    clk, measured = FLIGHTLLM_U280["clock_mhz"], FLIGHTLLM_U280["measured_ms"]
    out = {"clock_mhz": clk, "measured_ms": measured, "points": []}
    for ctx in FLIGHTLLM_CONTEXTS:
        ms, _ = token_ms(LLAMA2_7B, rows, cols, board, clk, design, ctx)
        out["points"].append({"context_len": ctx, "ms_per_token": ms, "error": ms / measured - 1,
                              "roofline_ms": roofline_ms(LLAMA2_7B, board, ctx, design)})
    out["worst_error"] = max(abs(p["error"]) for p in out["points"])
    return out


# Published U280 platform tables: what the shell leaves a kernel. AMD's Vitis HPC Library 2021.2 benchmark page
# (xilinx.github.io/Vitis_Libraries/hpc/2021.2/benchmark.html, SPMV-based CG kernel, "User Budget" row; a U280:
# 9,020 of its 9,024 DSPs; the platform version is not named) and RapidStream's virtual device of
# xilinx_u280_gen3x16_xdma_1_202211_1 (u280_device.json in github.com/Crazy-James26/FlexLLM), whose per-SLR figures
# conf/hardware/u280.yaml carries as fpga.slr_available.
U280_USER_BUDGET = {"lut": 1104369, "ff": 2217989, "bram36": 1693, "uram": 896, "dsp": 9020}


def platform_check(board: Device) -> list[dict]:
    """Per resource: the device, what the model gives the kernel (sum of ``fpga.slr_available``) and AMD's
    published user budget."""
    fab = board.fabric
    slrs = fab.slr_available
    return [{"resource": r, "device": float(fab.total(r)), "model": float(sum(s[r] for s in slrs)),
             "user_budget": float(U280_USER_BUDGET[r])} for r in ("lut", "ff", "bram36", "dsp", "uram")]
