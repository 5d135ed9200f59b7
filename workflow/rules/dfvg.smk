# dfvg: token-level speculative decoding with the run's draft + target (experiment=dfvg): plain target greedy
# decoding (the reference every strategy must reproduce), Hugging Face assisted generation, each drafting
# strategy with its round traces, then the rounds replayed on draft-on-FPGA / verify-on-GPU designs.


rule dfvg_collect:
    input:
        unpack(dfvg_inputs),
    output:
        generations=PATHS.dfvg_generations("{dfvg_method}"),
        rounds=PATHS.dfvg_rounds("{dfvg_method}"),
    log:
        PATHS.log("dfvg_{dfvg_method}"),
    benchmark:
        PATHS.benchmark("dfvg_{dfvg_method}")
    conda:
        "../envs/heterospec.yaml"
    threads: need("dfvg_collect", "threads")
    resources:
        gpu=need("dfvg_collect", "gpu"),
        mem_mb=need("dfvg_collect", "mem_mb"),
        runtime=need("dfvg_collect", "runtime"),
    params:
        spec=spec("dfvg_collect"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.dfvg collect --method {wildcards.dfvg_method} {params.hydra} 2>&1 | tee {log}"


rule dfvg_replay:
    input:
        dfvg_replay_inputs(),
    output:
        PATHS.dfvg_replay,
    log:
        PATHS.log("dfvg_replay"),
    benchmark:
        PATHS.benchmark("dfvg_replay")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("dfvg_replay", "mem_mb"),
        runtime=need("dfvg_replay", "runtime"),
    params:
        spec=spec("dfvg_replay"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.dfvg replay {params.hydra} 2>&1 | tee {log}"
