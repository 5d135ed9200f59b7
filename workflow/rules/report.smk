# report: the paper's figures drawn from the DuckDB views (heterospec.report.figures), each as PNG, SVG and the
# plotted rows as CSV, flagged for `snakemake --report results/report.html`; and, for --config sweep=..., the
# runs of the sweep and the record of which run holds which value. One input of the figures is made here: the
# paper's Table III read from the artifact's reference results (an empty table when no artifact checkout is
# configured); the replays they draw are the replay stage's (replay.smk: report_ours, report_tau_sweep).


rule paper_table3:
    input:
        [str(p) for p in [Path(str(CFG.paths.heteroreason_ae)) / PAPER_TABLE3] if p.is_file()],
    output:
        paper_table3_path(PATHS),
    log:
        PATHS.log("paper_table3"),
    conda:
        "../envs/heterospec.yaml"
    params:
        hydra=HYDRA,
    shell:
        "python -m heterospec.report paper-table3 {params.hydra} 2>&1 | tee {log}"


for _fig in FIGURES:

    rule:
        name:
            f"figure_{_fig}"
        input:
            DUCKDB_FILE,
        output:
            png=report(
                FIGURE_DIR / f"{_fig}.png",
                caption=f"../report/{_fig}.rst",
                category="Figures",
                subcategory=FIGURE_RUN,
                labels={"figure": _fig, "file": "PNG"},
            ),
            svg=FIGURE_DIR / f"{_fig}.svg",
            csv=report(
                FIGURE_DIR / f"{_fig}.csv",
                caption=f"../report/{_fig}.rst",
                category="Figures",
                subcategory=FIGURE_RUN,
                labels={"figure": _fig, "file": "rows (CSV)"},
            ),
        log:
            PATHS.root.parent / FIGURE_RUN / "logs" / f"figure_{_fig}.log",
        conda:
            "../envs/heterospec.yaml"
        params:
            figure=_fig,
            run=FIGURE_RUN,
        shell:
            "python -m heterospec.report figure {params.figure} --run {params.run} --db {input}"
            " --out $(dirname {output.png}) 2>&1 | tee {log}"


if SWEEP:

    rule sweep_point:
        output:
            PATHS.root.parent / SWEEP_RUN / "sweep" / "{point}.done",
        log:
            PATHS.root.parent / SWEEP_RUN / "logs" / "sweep_{point}.log",
        conda:
            "../envs/heterospec.yaml"
        threads: workflow.cores
        params:
            command=sweep_point_command,
        shell:
            "{params.command} 2>&1 | tee {log} && touch {output}"

    rule sweep_points:
        input:
            [PATHS.root.parent / SWEEP_RUN / "sweep" / f"{point}.done" for point in POINTS],
        output:
            SWEEP_POINTS,
        log:
            PATHS.root.parent / SWEEP_RUN / "logs" / "sweep_points.log",
        conda:
            "../envs/heterospec.yaml"
        params:
            points=" ".join(f"--point {p} {shlex.quote(v)}" for p, v in POINT_VALUES.items()),
        shell:
            "python -m heterospec.report sweep --out {output} {params.points} 2>&1 | tee {log}"
