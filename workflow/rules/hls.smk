# hls: the draft accelerator per board -- HLS C++ generated from the W8A8 export, its g++ C simulation
# (bit-exact against the int8 reference), performance and resource models, the KVMU as RTL synthesised with
# Yosys, and the vendor flow where Vitis HLS is installed (otherwise a "skipped" status).


rule hls_codegen:
    input:
        PATHS.quantized_draft,
    output:
        PATHS.hls_codegen("{board}"),
    log:
        PATHS.log("hls_codegen_{board}"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("hls_codegen", "mem_mb"),
        runtime=need("hls_codegen", "runtime"),
    params:
        spec=spec("hls_codegen"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls codegen --board {wildcards.board} --export {input} --out {output}"
        " {params.hydra} 2>&1 | tee {log}"


rule hls_lib:
    input:
        PATHS.hls_codegen("{board}"),
    output:
        PATHS.hls_lib("{board}"),
    log:
        PATHS.log("hls_lib_{board}"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("hls_lib", "mem_mb"),
        runtime=need("hls_lib", "runtime"),
    params:
        spec=spec("hls_lib"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls lib --board {wildcards.board} --kernel {input} --out {output}"
        " {params.hydra} 2>&1 | tee {log}"


rule hls_csim:
    input:
        PATHS.hls_codegen("{board}"),
    output:
        PATHS.hls_csim("{board}"),
    log:
        PATHS.log("hls_csim_{board}"),
    benchmark:
        PATHS.benchmark("hls_csim_{board}")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("hls_csim", "mem_mb"),
        runtime=need("hls_csim", "runtime"),
    params:
        spec=spec("hls_csim"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls csim --board {wildcards.board} --kernel {input} --out {output}"
        " {params.hydra} 2>&1 | tee {log}"


rule hls_model:
    input:
        PATHS.quantized_draft,
    output:
        perf=PATHS.hls_perf,
        breakdown=PATHS.hls_breakdown,
        resources=PATHS.hls_resources,
    log:
        PATHS.log("hls_model"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("hls_model", "mem_mb"),
        runtime=need("hls_model", "runtime"),
    params:
        spec=spec("hls_model"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls model --export {input} --out {output.perf} --breakdown {output.breakdown}"
        " --resources {output.resources} {params.hydra} 2>&1 | tee {log}"


rule kvmu_rtl:
    output:
        PATHS.kvmu_synth,
    log:
        PATHS.log("kvmu_rtl"),
    benchmark:
        PATHS.benchmark("kvmu_rtl")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("kvmu_rtl", "mem_mb"),
        runtime=need("kvmu_rtl", "runtime"),
    params:
        spec=spec("kvmu_rtl"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls kvmu --out {output} {params.hydra} 2>&1 | tee {log}"


rule hls_vendor:
    input:
        kernel=PATHS.hls_codegen("{board}"),
        resources=PATHS.hls_resources,
    output:
        PATHS.hls_vendor("{board}"),
    log:
        PATHS.log("hls_vendor_{board}"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("hls_vendor", "mem_mb"),
        runtime=need("hls_vendor", "runtime"),
    params:
        spec=spec("hls_vendor"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.hls vendor --board {wildcards.board} --kernel {input.kernel}"
        " --resources {input.resources} --out {output} {params.hydra} 2>&1 | tee {log}"
