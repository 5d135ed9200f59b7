# aggregate: the run's resolved config, and one DuckDB catalogue with views over every run's
# Parquet (results/heterospec.duckdb).


rule config:
    output:
        PATHS.config,
    log:
        PATHS.log("config"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("config", "mem_mb"),
        runtime=need("config", "runtime"),
    params:
        spec=spec("config"),
        hydra=HYDRA,
    shell:
        "python -m heterospec config {params.hydra} > {output} 2> {log}"


rule aggregate:
    input:
        stage_outputs(),
    output:
        DUCKDB_FILE,
    log:
        PATHS.log("aggregate"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("aggregate", "mem_mb"),
        runtime=need("aggregate", "runtime"),
    shell:
        "python -m heterospec.aggregate --db {output} 2>&1 | tee {log}"


onsuccess:
    shell(f"python -m heterospec summary {shlex.quote(str(CFG.name))} || true")
