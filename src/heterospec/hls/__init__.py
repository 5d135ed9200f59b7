"""The HLS build of the draft accelerator: kernel generation, C simulation, performance and resource models,
and the KVMU as RTL (Amaranth -> Verilog -> Yosys)."""
