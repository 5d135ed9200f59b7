# aggregate: the run's resolved config, and one DuckDB catalogue with views over every run's
# Parquet (results/heterospec.duckdb).


rule config:
    output:
        PATHS.config,
    params:
        spec=spec("config"),
        hydra=HYDRA,
    resources:
        mem_mb=need("config", "mem_mb"),
        runtime=need("config", "runtime"),
    log:
        PATHS.log("config"),
    conda:
        "../envs/heterospec.yaml"
    shell:
        "python -m heterospec config {params.hydra} > {output} 2> {log}"


rule aggregate:
    input:
        stage_outputs(),
    output:
        DUCKDB_FILE,
    resources:
        mem_mb=need("aggregate", "mem_mb"),
        runtime=need("aggregate", "runtime"),
    log:
        PATHS.log("aggregate"),
    conda:
        "../envs/heterospec.yaml"
    shell:
        "python -m heterospec.aggregate --db {output} 2>&1 | tee {log}"


onsuccess:
    shell(f"python -m heterospec summary {shlex.quote(str(CFG.name))} || true")
