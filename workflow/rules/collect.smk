# collect: RSD / BRSD run for real with every model call and every step of the controller traced, sharded by
# problem range, then merged. The timed collects (every algorithm config under every executor, whose timings the
# replay fits and validates) run in one job per shard, interleaved problem by problem in rounds of repeats; each
# collect variant runs in a job of its own, after them, its executors interleaved problem by problem the same way
# (rule collect_variant; a variant of one executor: rule collect_shard).

if TIMED:

    ruleorder: collect_timed > collect_shard

    rule collect_timed:
        input:
            unpack(timed_inputs),
        output:
            timed_outputs(),
        log:
            PATHS.log("collect_{dataset}_timed_{shard}"),
        benchmark:
            PATHS.benchmark("collect_{dataset}_timed_{shard}")
        priority: job_priority("collect_timed")
        conda:
            "../envs/heterospec.yaml"
        threads: need("collect_timed", "threads")
        resources:
            gpu=need("collect_timed", "gpu"),
            mem_mb=need("collect_timed", "mem_mb"),
            runtime=need("collect_timed", "runtime"),
        params:
            spec=spec("collect_timed"),
            hydra=HYDRA,
        shell:
            "python -m heterospec.collect timed --dataset {wildcards.dataset} --shard {wildcards.shard}"
            " {params.hydra} 2>&1 | tee {log}"


if PAIRED:

    ruleorder: collect_variant > collect_shard

    rule collect_variant:
        input:
            unpack(collect_inputs),
        output:
            variant_outputs(),
        log:
            PATHS.log("collect_{dataset}_{algorithm}_{shard}"),
        benchmark:
            PATHS.benchmark("collect_{dataset}_{algorithm}_{shard}")
        wildcard_constraints:
            algorithm="|".join(PAIRED),
        priority: job_priority("collect_shard")
        conda:
            "../envs/heterospec.yaml"
        threads: need("collect_variant", "threads")
        resources:
            gpu=need("collect_variant", "gpu"),
            mem_mb=need("collect_variant", "mem_mb"),
            runtime=need("collect_variant", "runtime"),
        params:
            spec=spec("collect_shard"),
            hydra=HYDRA,
        shell:
            "python -m heterospec.collect variant --dataset {wildcards.dataset} --algorithm {wildcards.algorithm}"
            " --shard {wildcards.shard} {params.hydra} 2>&1 | tee {log}"


rule collect_shard:
    input:
        unpack(collect_inputs),
    output:
        calls=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "calls"),
        steps=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "steps"),
        problems=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "problems"),
        kvmu=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "kvmu"),
        repeats=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "repeats"),
        rounds=PATHS.collect_shard("{dataset}", "{algorithm}", "{executor}", "{shard}", "rounds"),
    log:
        PATHS.log("collect_{dataset}_{algorithm}_{executor}_{shard}"),
    benchmark:
        PATHS.benchmark("collect_{dataset}_{algorithm}_{executor}_{shard}")
    priority: job_priority("collect_shard")
    conda:
        "../envs/heterospec.yaml"
    threads: need("collect_shard", "threads")
    resources:
        gpu=need("collect_shard", "gpu"),
        mem_mb=need("collect_shard", "mem_mb"),
        runtime=need("collect_shard", "runtime"),
    params:
        spec=spec("collect_shard"),
        hydra=HYDRA,
    shell:
        "python -m heterospec.collect run --dataset {wildcards.dataset} --algorithm {wildcards.algorithm}"
        " --executor {wildcards.executor} --shard {wildcards.shard} {params.hydra} 2>&1 | tee {log}"


rule collect_merge:
    input:
        collect_shards,
    output:
        calls=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "calls"),
        steps=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "steps"),
        problems=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "problems"),
        kvmu=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "kvmu"),
        repeats=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "repeats"),
        rounds=PATHS.collect_table("{dataset}", "{algorithm}", "{executor}", "rounds"),
    log:
        PATHS.log("collect_{dataset}_{algorithm}_{executor}_merge"),
    priority: job_priority("collect_merge")
    conda:
        "../envs/heterospec.yaml"
    resources:
        mem_mb=need("collect_merge", "mem_mb"),
        runtime=need("collect_merge", "runtime"),
    params:
        hydra=HYDRA,
    shell:
        "python -m heterospec.collect merge --dataset {wildcards.dataset} --algorithm {wildcards.algorithm}"
        " --executor {wildcards.executor} {params.hydra} 2>&1 | tee {log}"
