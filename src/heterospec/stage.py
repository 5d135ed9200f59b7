"""What every ``python -m heterospec.<stage>`` entry point shares: argument parsing and error reporting.

A stage takes its own ``--flags`` (paths, chosen by Snakemake) followed by Hydra overrides
(``key=value``, chosen by the user), composes the run config, and reports a
:class:`~heterospec.errors.UserError` as one line on stderr with exit status 2. A stage run as a command
(:func:`run`) records its job's machine and commit in ``results/<run>/machines/`` when it composes the run config
(:mod:`heterospec.store.machines`); the ``heterospec`` command and the benchmark download do not.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable

from omegaconf import DictConfig

from heterospec.config import compose_config, to_yaml
from heterospec.errors import UserError
from heterospec.paths import RunPaths


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description)


def parse(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse the stage's own flags and positionals, then the trailing Hydra overrides."""
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=ci models.target.train.steps=100")
    return p.parse_intermixed_args(argv)


# the module a command runs (set by :func:`run`), and its arguments; None in-process (tests, the workflow's plan)
_ENTRY: tuple[str, list[str]] | None = None
# commands that make no number of a run: their jobs are not recorded (heterospec.store.machines)
UNRECORDED = ("heterospec.cli", "heterospec.tasks.download")


def compose(args: argparse.Namespace, record: bool = True) -> tuple[DictConfig, RunPaths]:
    """The run config and its output paths for the parsed command line; a stage's command records its job's
    machine and commit (``record=False``: the stage records it itself, as the models stage in a manifest)."""
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise UserError(f"'{bad[0]}' is not a Hydra override; write key=value (e.g. experiment=ci)")
    cfg = compose_config(args.overrides)
    paths = RunPaths.for_run(cfg, args.overrides)
    if record and recorded_job(args.overrides) is not None:
        from heterospec.store.machines import record as record_machine
        record_machine(paths.root, str(cfg.name), *recorded_job(args.overrides))
    return cfg, paths


def recorded_job(overrides: list[str]) -> tuple[str, str] | None:
    """(stage, job) of the command this process runs, ``collect`` and ``collect run --dataset synthetic ...`` (the
    run's overrides left out); None when it runs no stage's command."""
    if _ENTRY is None:
        return None
    module, argv = _ENTRY
    if not module.startswith("heterospec.") or module in UNRECORDED:
        return None
    name = module.removeprefix("heterospec.").removesuffix(".__main__").removesuffix(".stage")
    return name.split(".")[0], " ".join([name, *(a for a in argv if a not in overrides)])


def _entry_module(main: Callable) -> str:
    """The module ``python -m`` runs (``heterospec.collect``), or the one that defines ``main``."""
    if main.__module__ != "__main__":
        return main.__module__
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else "__main__"


def write_config(cfg: DictConfig, paths: RunPaths) -> None:
    """Record the fully resolved config next to the run's results."""
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.config.write_text(to_yaml(cfg))


def run(main: Callable[[list[str]], None], argv: list[str] | None = None) -> None:
    """Call ``main(argv)`` with progress logged to stderr (a rule's log file); UserError is one line, exit status 2."""
    global _ENTRY
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    argv = sys.argv[1:] if argv is None else argv
    _ENTRY = (_entry_module(main), list(argv))
    try:
        main(argv)
    except UserError as e:
        print(f"heterospec: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("heterospec: interrupted; finished outputs are kept, rerun to resume", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:   # whoever read the output stopped (``| head``): what it read is what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error as Python flushes stdout
        sys.exit(141)         # as a shell reports a command that SIGPIPE ended
    finally:
        _ENTRY = None
