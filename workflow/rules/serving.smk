# serving: several problems in flight through the collect's three workers (the PRM and the target batching), measured
# at each load point, then the load replay validated against it (docs/serving.md).


rule serve:
    input:
        manifests=[str(PATHS.model_manifest(r)) for r in ROLES],
        quantized_draft=[str(PATHS.quantized_draft)] if draft_implementation(CFG) == "w8a8" else [],
        after=collections(plain=True),  # after the timed collects: a measurement runs alone
    output:
        requests=PATHS.serving_table("requests"),
        calls=PATHS.serving_table("calls"),
        steps=PATHS.serving_table("steps"),
        passes=PATHS.serving_table("passes"),
    log:
        PATHS.log("serve"),
    benchmark:
        PATHS.benchmark("serve")
    priority: job_priority("serve")
    conda:
        "../envs/heterospec.yaml"
    threads: need("serve", "threads")
    resources:
        gpu=need("serve", "gpu"),
        mem_mb=need("serve", "mem_mb"),
        runtime=need("serve", "runtime"),
    params:
        spec=spec("serve"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.serve {params.hydra} 2>&1 | tee {log}"


rule serving_validate:
    input:
        serving=[str(PATHS.serving_table(t)) for t in ("requests", "calls", "steps", "passes")],
        reference=serving_reference(),
    output:
        validation=PATHS.serving_validation,
        outputs=PATHS.serving_outputs,
        prices=PATHS.serving_table("batch_prices"),
        replayed=PATHS.serving_table("replayed"),
        errors=PATHS.serving_table("errors"),
    log:
        PATHS.log("serving_validate"),
    benchmark:
        PATHS.benchmark("serving_validate")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("serving_validate", "mem_mb"),
        runtime=need("serving_validate", "runtime"),
    params:
        spec=spec("serving_validate"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay.validation.against_serving {params.hydra} 2>&1 | tee {log}"
