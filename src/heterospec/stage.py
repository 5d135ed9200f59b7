"""What every ``python -m heterospec.<stage>`` entry point shares: argument parsing and error reporting.

A stage takes its own ``--flags`` (paths, chosen by Snakemake) followed by Hydra overrides
(``key=value``, chosen by the user), composes the run config, and reports a
:class:`~heterospec.errors.UserError` as one line on stderr with exit status 2.
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


def compose(args: argparse.Namespace) -> tuple[DictConfig, RunPaths]:
    """The run config and its output paths for the parsed command line."""
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise UserError(f"'{bad[0]}' is not a Hydra override; write key=value (e.g. experiment=ci)")
    cfg = compose_config(args.overrides)
    return cfg, RunPaths.for_run(cfg, args.overrides)


def write_config(cfg: DictConfig, paths: RunPaths) -> None:
    """Record the fully resolved config next to the run's results."""
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.config.write_text(to_yaml(cfg))


def run(main: Callable[[list[str]], None], argv: list[str] | None = None) -> None:
    """Call ``main(argv)`` with progress logged to stderr (a rule's log file); UserError is one line, exit status 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    try:
        main(sys.argv[1:] if argv is None else argv)
    except UserError as e:
        print(f"heterospec: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("heterospec: interrupted; finished outputs are kept, rerun to resume", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:   # whoever read the output stopped (``| head``): what it read is what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error as Python flushes stdout
        sys.exit(141)         # as a shell reports a command that SIGPIPE ended
