# quantize: W8A8 (SmoothQuant-style) draft, its int8 export (safetensors + manifest) and quality report.


rule quantize:
    input:
        PATHS.model_manifest("draft"),
    output:
        export=PATHS.quantized_draft,
        quality=PATHS.quantize_quality,
    log:
        PATHS.log("quantize"),
    benchmark:
        PATHS.benchmark("quantize")
    conda:
        "../envs/heterospec.yaml"
    resources:
        gpu=need("quantize", "gpu"),
        mem_mb=need("quantize", "mem_mb"),
        runtime=need("quantize", "runtime"),
    params:
        spec=spec("quantize"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.quantize --draft {input} --out {output.export} --quality {output.quality}"
        " {params.hydra} 2>&1 | tee {log}"
