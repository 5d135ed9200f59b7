# models: train each tiny role on the synthetic task, or resolve a real checkpoint (source=hub).
from heterospec.manifests import check_sizes

# A checkpoint, export or kernel file truncated or deleted after its manifest (the rule's output) was written would
# leave the plan at "Nothing to be done": stop it with one line naming the file and the commands that rebuild it.
# Sizes only, so planning stays cheap; the stages compare sha256 when they load the files. Jobs re-read this file
# in a process of their own: the plan has checked already.
if workflow.is_main_process:
    try:
        check_sizes(PATHS.manifests(CFG.hls.boards))
    except UserError as e:
        print(f"heterospec: {e}", file=sys.stderr)
        sys.exit(2)


# Output keyed by the role's model settings (heterospec.paths.model_key), not by the run: runs that differ only
# elsewhere (a threshold sweep) share the model. The run's overrides stay out of params and of the command's
# text (a run: block, whose source is what Snakemake compares), so they never trigger retraining.
# The PRM's job waits for the draft (prm_draft_samples) and for the LM it starts from (prm_init_from).
rule train_model:
    input:
        prm_needs,
    output:
        manifest=f"{MODEL_DIR}/manifest.json",
    log:
        f"{MODEL_DIR}/train.log",
    benchmark:
        f"{MODEL_DIR}/train.tsv"
    priority: job_priority("train_model")
    threads: need("train_model", "threads")
    resources:
        mem_mb=need("train_model", "mem_mb"),
        runtime=need("train_model", "runtime"),
    run:
        shell(
            f"python -m heterospec.models train --role {{wildcards.role}} --out {{output.manifest}} {HYDRA_SHELL}"
            " 2>&1 | tee {log}"
        )


rule model_quality:
    input:
        [PATHS.model_manifest(role) for role in ROLES],
        collections(plain=True),  # after the timed collects: on a small machine it would hold a core they wait for
    output:
        report(PATHS.model_quality, caption="../report/model_quality.rst", category="Models"),
    log:
        PATHS.log("model_quality"),
    benchmark:
        PATHS.benchmark("model_quality")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("model_quality", "mem_mb"),
        runtime=need("model_quality", "runtime"),
    params:
        spec=digest(CFG.models),
        hydra=HYDRA,
    shell:
        "python -m heterospec.models quality --out {output} {params.hydra} 2>&1 | tee {log}"
