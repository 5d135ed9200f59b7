# evaluate: draft-only and target-only greedy decoding, the single-model rows of Table III, and the target alone with
# token-level speculation (target_sd).


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        PATHS.evaluation("{dataset}", "{method}"),
    log:
        PATHS.log("evaluate_{dataset}_{method}"),
    benchmark:
        PATHS.benchmark("evaluate_{dataset}_{method}")
    conda:
        "../envs/heterospec.yaml"
    resources:
        gpu=need("evaluate", "gpu"),
        mem_mb=need("evaluate", "mem_mb"),
        runtime=need("evaluate", "runtime"),
    params:
        spec=eval_spec,
        hydra=HYDRA,
    shell:
        "python -m heterospec.evaluate --dataset {wildcards.dataset} --method {wildcards.method}"
        " --out {output} {params.hydra} 2>&1 | tee {log}"
