"""The ``models`` stage: train a tiny role on the synthetic task, or resolve a real checkpoint.

    python -m heterospec.models train --role target experiment=ci
    python -m heterospec.models quality experiment=ci

Either way the stage ends by writing ``models/<role>/manifest.json``, the file the rest of
the workflow reads to find a role's checkpoint. It is written last and atomically, so a
killed run never leaves a manifest pointing at a half-written model. It lists the checkpoint's
files with their sizes and sha256 (sizes only for a checkpoint given by path), checked on load. A trained role's
manifest records the machine and commit that trained it (``machine``, :mod:`heterospec.store.machines`): training
is deterministic on one kind of CPU, not across kinds (docs/models.md, Reproducibility).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from heterospec import stage
from heterospec.manifests import digest_files, portable
from heterospec.config import dataset_config
from heterospec.errors import UserError
from heterospec.models.role_manifest import read_manifest, record_training_machine, write_manifest
from heterospec.paths import ROLES, RunPaths, prm_learns_from
from heterospec.store.machines import this_machine

log = logging.getLogger("heterospec.models")


def resolve_checkpoint(role: str, role_cfg: DictConfig) -> Path:
    """Local directory of a hub-sourced role: a local path, or a Hugging Face id already in the cache."""
    path = role_cfg.path
    if not path:
        raise UserError(f"models.{role}.path is empty; give a Hugging Face id or a local directory")
    if Path(path).expanduser().is_dir():
        local = Path(path).expanduser().resolve()
        if not (local / "config.json").exists():
            raise UserError(f"models.{role}.path={path}: directory has no config.json (not a Hugging Face checkpoint)")
        return local
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise UserError(f"models.{role}.path={path}: no such directory")
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(path, local_files_only=True))
    except Exception:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("1", "true", "True") and os.environ.get("HETEROSPEC_DOWNLOAD") == "1":
        try:
            return Path(snapshot_download(path))
        except Exception as e:
            raise UserError(f"models.{role}: downloading '{path}' failed ({type(e).__name__})") from None
    raise UserError(f"models.{role}: '{path}' is not in the local Hugging Face cache; download it "
                    f"(huggingface-cli download {path}) or point at a local copy with models.{role}.path=/dir "
                    f"(HETEROSPEC_DOWNLOAD=1 lets this stage download it)")


def prepare_role(cfg: DictConfig, paths: RunPaths, role: str, overrides: list[str], out: Path) -> dict:
    """Train (source=train) or resolve (source=hub) one role and write its manifest to ``out``."""
    if role not in ROLES:
        raise UserError(f"--role {role}: expected one of {list(ROLES)}")
    role_cfg = cfg.models[role]
    manifest = {"role": role, "models": cfg.models.name, "source": role_cfg.source,
                "dtype": role_cfg.dtype, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if role_cfg.source == "train":
        from heterospec.models.train import train_role
        manifest["machine"] = this_machine()   # the run's page names it (heterospec.store.machines)
        record_training_machine(paths.root, str(cfg.name), manifest)
        synthetic = dataset_config(cfg, "synthetic", overrides)
        ckpt = paths.model_checkpoint(role)
        # the PRM learns from the trained draft's steps and may start from the draft's or the target's weights
        # named from the working directory, so the training log holds no path of the checkout
        trained = {f"{r}_dir": Path(os.path.relpath(read_manifest(paths.model_manifest(r))["path"]))
                   for r in (prm_learns_from(role_cfg) if role == "prm" else ())}
        metrics = train_role(cfg.models, synthetic, role, ckpt, **trained)
        # relative to the manifest when both lie in the results tree (it moves whole); every file hashed
        manifest.update(path=portable(ckpt, Path(out).parent, paths.root.parent), files=digest_files(ckpt),
                        train=metrics, config=OmegaConf.to_container(role_cfg, resolve=True))
        where = ckpt
    elif role_cfg.source == "hub":
        # a checkpoint of the user's (gigabytes): recorded as given, its files checked by size on each load
        where = resolve_checkpoint(role, role_cfg)
        manifest.update(path=str(where), files=digest_files(where, sha256=False), hub_id=role_cfg.path)
    else:
        raise UserError(f"models.{role}.source={role_cfg.source}: expected 'train' or 'hub'")
    write_manifest(out, manifest)
    log.info("%s: %s", role, where)
    return manifest


def main(argv: list[str]) -> None:
    p = stage.parser("python -m heterospec.models", "Train or resolve the draft / PRM / target trio.")
    p.add_argument("command", choices=["train", "quality"], help="train: one role; quality: the trio's quality report")
    p.add_argument("--role", default="target", help="draft | prm | target (train only)")
    p.add_argument("--out", type=Path, help="output file (default: inside results/<run>/models/)")
    args = stage.parse(p, argv)
    cfg, paths = stage.compose(args, record=args.command != "train")   # a training job records in its manifest
    if args.command == "train":
        prepare_role(cfg, paths, args.role, args.overrides, args.out or paths.model_manifest(args.role))
    else:
        from heterospec.models.quality_report import quality_report, print_quality
        table = quality_report(cfg, paths, args.overrides, args.out or paths.model_quality)
        print_quality(table)
