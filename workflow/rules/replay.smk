# replay: the HeteroReason artifact's published traces (paths.heteroreason_ae), imported per trace set and replayed
# on modelled systems: conf/replay's systems x schedules x latency profiles, plus the artifact's own formulas;
# and the simulator validated against the run's own collect traces (measured profile, replay.validate_system);
# the load replay (conf/load): many requests at once on the same systems, capacity at an SLO.


rule replay_import:
    input:
        replay_trace_files,
    output:
        events=PATHS.replay_events("{trace_set}"),
        target_events=PATHS.replay_target_events("{trace_set}"),
    log:
        PATHS.log("replay_import_{trace_set}"),
    benchmark:
        PATHS.benchmark("replay_import_{trace_set}")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("replay_import", "mem_mb"),
        runtime=need("replay_import", "runtime"),
    params:
        spec=spec("replay_import"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay import --trace-set {wildcards.trace_set} {params.hydra} 2>&1 | tee {log}"


rule replay:
    input:
        replay_inputs,
    output:
        results=PATHS.replay_results,
        artifact=PATHS.replay_artifact,
    log:
        PATHS.log("replay"),
    benchmark:
        PATHS.benchmark("replay")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("replay", "mem_mb"),
        runtime=need("replay", "runtime"),
    params:
        spec=spec("replay"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay run {params.hydra} 2>&1 | tee {log}"


rule replay_load:
    input:
        load_inputs,
    output:
        requests=PATHS.load_requests,
        points=PATHS.load_points,
        capacity=PATHS.load_capacity,
    log:
        PATHS.log("replay_load"),
    benchmark:
        PATHS.benchmark("replay_load")
    priority: job_priority("replay_load")
    conda:
        "../envs/heterospec.yaml"
    threads: need("replay_load", "threads")
    resources:
        mem_mb=need("replay_load", "mem_mb"),
        runtime=need("replay_load", "runtime"),
    params:
        spec=spec("replay_load"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay load --workers {threads} {params.hydra} 2>&1 | tee {log}"


rule replay_validate:
    input:
        collections(plain=True),
    output:
        validation=PATHS.replay_validation,
        aggregate=PATHS.replay_validation_aggregate,
        fit=PATHS.replay_fit,
    log:
        PATHS.log("replay_validate"),
    benchmark:
        PATHS.benchmark("replay_validate")
    priority: job_priority("replay_validate")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("replay_validate", "mem_mb"),
        runtime=need("replay_validate", "runtime"),
    params:
        spec=spec("replay_validate"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay validate {params.hydra} 2>&1 | tee {log}"


# The run's trio's batched call prices measured on this CPU at small batches (a few CPU-seconds); the load replay's
# measured profile fits its batching curve from them. A GPU's prices come from heterospec gpu check.
rule replay_batch_prices:
    input:
        [str(PATHS.model_manifest(r)) for r in ROLES],
    output:
        PATHS.batch_prices,
    log:
        PATHS.log("replay_batch_prices"),
    benchmark:
        PATHS.benchmark("replay_batch_prices")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("replay_batch_prices", "mem_mb"),
        runtime=need("replay_batch_prices", "runtime"),
    params:
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay.profiles.price_sweep --device cpu --batches 1,2,4 --contexts 32,96 --repeats 3"
        " --out {output} {params.hydra} 2>&1 | tee {log}"


# the replays the report draws: our collect traces on the paper's systems (Figure 8 for our traces, the sweep's
# latencies), and token-level speculation priced over tau (heterospec.replay.grid.ours, .tau_sweep)
rule report_ours:
    input:
        collections(plain=True),
        [str(PATHS.hls_perf)] if "hls" in ours_profiles(CFG) else [],
    output:
        ours_path(PATHS),
    log:
        PATHS.log("report_ours"),
    priority: job_priority("report_ours")
    conda:
        "../envs/heterospec.yaml"
    params:
        spec=spec("report_ours"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay ours {params.hydra} 2>&1 | tee {log}"


rule report_tau_sweep:
    input:
        tau_sweep_inputs,
    output:
        sweep_path(PATHS),
    log:
        PATHS.log("report_tau_sweep"),
    priority: job_priority("report_tau_sweep")
    conda:
        "../envs/heterospec.yaml"
    params:
        spec=spec("report_tau_sweep"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay tau-sweep {params.hydra} 2>&1 | tee {log}"


# the FPGA draft's design space under load (conf/design_space): capacity per design point, per watt and per dollar
rule replay_design_space:
    input:
        load_inputs,
    output:
        PATHS.load_design_space,
    log:
        PATHS.log("replay_design_space"),
    benchmark:
        PATHS.benchmark("replay_design_space")
    priority: job_priority("replay_design_space")
    conda:
        "../envs/heterospec.yaml"
    threads: need("replay_design_space", "threads")
    resources:
        mem_mb=need("replay_design_space", "mem_mb"),
        runtime=need("replay_design_space", "runtime"),
    params:
        spec=spec("replay_design_space"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.replay design-space --workers {threads} {params.hydra} 2>&1 | tee {log}"
