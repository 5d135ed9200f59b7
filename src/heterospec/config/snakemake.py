"""What the Snakefile needs from the package: its ``--config`` checked against the workflow's JSON schema, and
turned into the run's Hydra overrides. Kept here, not in ``common.smk``, so it is tested."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from heterospec.errors import UserError


def validate_config(config: dict, schema_path: str | Path) -> None:
    """Check Snakemake's ``config`` (defaults from the schema filled in); one line naming a bad key."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    accepted = list(yaml.safe_load(Path(schema_path).read_text())["properties"])
    unknown = [k for k in config if k not in accepted]
    if unknown:
        raise UserError(f"unknown --config key '{unknown[0]}'; accepted keys: {', '.join(accepted)} "
                        f"(Hydra parameters go in overrides=\"key=value ...\")")
    try:
        validate(config, str(Path(schema_path).resolve()))
    except WorkflowError as e:
        text = str(e)
        detail = next((ln.strip() for ln in text.splitlines()[1:] if ln.strip()), text.strip())
        key = re.search(r"schema\['properties'\]\['(\w+)'\]", text)
        raise UserError(f"--config {key.group(1) if key else ''}: {detail.removeprefix('ValidationError: ')}"
                        .replace(" :", ":")) from None


def run_overrides(config: dict) -> list[str]:
    """The Hydra overrides of a Snakemake run: its experiment, the ``overrides`` string, then its ``name``."""
    out = [f"experiment={config['experiment']}"] + parse_overrides(config.get("overrides"))
    return out + [f"name={config['name']}"] if config.get("name") else out


def parse_overrides(value) -> list[str]:
    """Hydra overrides from ``--config overrides=...``: space-separated, or one bracketed comma-separated list
    (commas inside brackets or braces stay with their value)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value or "").strip()
    if not (text.startswith("[") and text.endswith("]")):
        return shlex.split(text)
    items, depth, cur = [], 0, ""
    for ch in text[1:-1]:
        depth += 1 if ch in "[{(" else -1 if ch in "]})" else 0
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [i for i in [*items, cur.strip()] if i]
