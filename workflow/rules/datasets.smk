# datasets: fetch a real benchmark's test set when it is missing under paths.datasets
# (needs internet; otherwise put the file there by hand or point paths.datasets at a copy).


rule download_dataset:
    output:
        DOWNLOADED,
    log:
        PATHS.log("download_{bench}"),
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("download_dataset", "mem_mb"),
        runtime=need("download_dataset", "runtime"),
    params:
        hydra=HYDRA,
    shell:
        "python -m heterospec.tasks.download --dataset {wildcards.bench} --out {output} {params.hydra} 2>&1 | tee {log}"
