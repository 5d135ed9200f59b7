"""``python -m heterospec.replay import|run|validate|load|load-point|design-space|ours|tau-sweep [flags] [Hydra
overrides]`` (see heterospec.replay.grid.stage, heterospec.replay.grid.ours, heterospec.replay.grid.tau_sweep,
heterospec.replay.load.stage and heterospec.replay.load.design_space)."""
from __future__ import annotations

from heterospec import stage


def main(argv: list[str]) -> None:
    from heterospec.replay.grid.stage import import_stage, run_stage
    from heterospec.replay.validation.against_collect import validate

    p = stage.parser("python -m heterospec.replay", "Trace replay on modelled heterogeneous systems.")
    p.add_argument("action", choices=["import", "run", "validate", "load", "load-point", "design-space", "ours", "tau-sweep"],
                   help="import: artifact traces -> events table; run: replay the grid; validate: against collect "
                        "runs; load: latency under load and capacity at the SLO; load-point: one load.arrivals point; "
                        "design-space: the FPGA draft's design points under load (conf/design_space); "
                        "ours: our collect traces on the paper's systems; tau-sweep: token-level speculation over "
                        "tau on the paper's systems")
    p.add_argument("--trace-set", help="import: the trace set (a folder under replay.traces, e.g. with_bt)")
    p.add_argument("--fit-on", metavar="TRACES", help="validate: fit the measured profile on this trace set's "
                   "sequential calls only (e.g. brsd) and predict the others: a held-out check; saves nothing")
    p.add_argument("--workers", type=int, help="load, design-space: worker processes (default load.workers)")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args)
    if args.action == "import":
        sets = [args.trace_set] if args.trace_set else list(cfg.replay.trace_sets)
        for ts in sets:
            import_stage(cfg, paths, ts)
    elif args.action == "run":
        run_stage(cfg, paths, args.overrides)
    elif args.action == "ours":
        from heterospec.replay.grid.ours import replay_ours
        replay_ours(cfg, paths, args.overrides)
    elif args.action == "tau-sweep":
        from heterospec.replay.grid.tau_sweep import tau_sweep
        tau_sweep(cfg, paths, args.overrides)
    elif args.action == "design-space":
        from heterospec.replay.load.design_space import run_design_space
        run_design_space(cfg, paths, args.overrides, workers=args.workers)
    elif args.action in ("load", "load-point"):
        from heterospec.replay.load.stage import point_stage, run_stage as load_stage
        if args.action == "load":
            load_stage(cfg, paths, args.overrides, workers=args.workers)
        else:
            point_stage(cfg, paths, args.overrides)
    else:
        validate(cfg, paths, args.overrides, fit_on=args.fit_on)


if __name__ == "__main__":
    stage.run(main)
