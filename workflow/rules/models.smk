# models: train each tiny role on the synthetic task, or resolve a real checkpoint (source=hub).


rule train_model:
    output:
        manifest=PATHS.model_manifest("{role}"),
    params:
        spec=model_spec,
        hydra=HYDRA,
    threads: need("train_model", "threads")
    resources:
        mem_mb=need("train_model", "mem_mb"),
        runtime=need("train_model", "runtime"),
    log:
        PATHS.log("models_{role}"),
    benchmark:
        PATHS.benchmark("models_{role}")
    conda:
        "../envs/heterospec.yaml"
    shell:
        "python -m heterospec.models train --role {wildcards.role} --out {output.manifest} {params.hydra} 2>&1 | tee {log}"


rule model_quality:
    input:
        [PATHS.model_manifest(role) for role in ROLES],
    output:
        report(PATHS.model_quality, caption="../report/model_quality.rst", category="Models"),
    params:
        spec=digest(CFG.models),
        hydra=HYDRA,
    resources:
        mem_mb=need("model_quality", "mem_mb"),
        runtime=need("model_quality", "runtime"),
    log:
        PATHS.log("model_quality"),
    benchmark:
        PATHS.benchmark("model_quality")
    conda:
        "../envs/heterospec.yaml"
    shell:
        "python -m heterospec.models quality --out {output} {params.hydra} 2>&1 | tee {log}"
