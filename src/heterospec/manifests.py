"""Files one stage writes and another loads, listed with their size and sha256 in the writing stage's manifest and
checked when loaded; and paths recorded inside ``results/`` kept relative, so a results tree can move.

A listing is ``{relative path: {"bytes": n, "sha256": hex}}`` relative to the folder the files sit in. A listing
without ``sha256`` (a real checkpoint given by path, not written here: gigabytes) is checked by size only.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from heterospec.errors import UserError

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path, skip: tuple[str, ...]) -> list[str]:
    """Every file under ``folder`` (symlinks followed, as a hub cache's snapshot is made of them), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            rel = Path(dirpath, name).relative_to(folder).as_posix()
            if not name.startswith(".") and rel not in skip:
                out.append(rel)
    return sorted(out)


def digest_files(folder: str | Path, skip: tuple[str, ...] = (), sha256: bool = True) -> dict[str, dict]:
    """``{relpath: {"bytes", "sha256"}}`` of every file under ``folder`` but ``skip`` and hidden ones; sizes only
    when ``sha256`` is false."""
    folder = Path(folder)
    listing = {}
    for rel in _files(folder, skip):
        entry = {"bytes": (folder / rel).stat().st_size}
        if sha256:
            entry["sha256"] = sha256_of(folder / rel)
        listing[rel] = entry
    return listing


def problems(folder: str | Path, listing: dict[str, dict]) -> list[str]:
    """One line per listed file that is missing, of another size, or of another sha256 (empty: all intact)."""
    folder = Path(folder)
    found = []
    for rel, want in sorted(listing.items()):
        path = folder / rel
        if not path.is_file():
            found.append(f"{path}: missing")
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            what = "truncated" if size < want["bytes"] else "grown"
            found.append(f"{path}: {what}, {size:,} bytes where the manifest lists {want['bytes']:,}")
        elif "sha256" in want and sha256_of(path) != want["sha256"]:
            found.append(f"{path}: sha256 differs from the manifest's (the file changed after it was written)")
    return found


def verify(folder: str | Path, listing: dict[str, dict] | None, rebuild_hint: str) -> None:
    """Stop with one line naming the first damaged file of ``listing`` and how to rebuild it; an absent listing (a
    manifest written before listings existed) is not checked."""
    bad = problems(folder, listing or {})
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UserError(f"{bad[0]}{more}; rebuild it: {rebuild_hint}")


def listed_folder(manifest: Path, data: dict) -> Path:
    """The folder a manifest's ``files`` are relative to: the checkpoint its ``path`` names (a model's manifest),
    else the manifest's own folder (the W8A8 export's, a kernel's). A model manifest written before paths were
    relative holds the checkpoint's absolute path in the checkout that trained it; a trained checkpoint always sits
    beside its manifest, so the copy beside it wins (a moved tree reads its own files, not the original's)."""
    if not data.get("path"):
        return Path(manifest).parent
    recorded = Path(data["path"])
    if recorded.is_absolute() and data.get("source") == "train" and (Path(manifest).parent / recorded.name).is_dir():
        return Path(os.path.abspath(Path(manifest).parent / recorded.name))
    return resolve(recorded, Path(manifest).parent)


def damage(manifest: Path, sha256: bool = True) -> tuple[int, list[str]]:
    """(files listed, one line per missing, truncated or changed one) of a manifest; ``sha256=False`` checks sizes
    only (cheap enough to run on every Snakemake plan)."""
    manifest = Path(manifest)
    try:
        data = json.loads(manifest.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return 0, [f"{manifest}: unreadable manifest ({type(e).__name__})"]
    listing = data.get("files")
    if not isinstance(listing, dict):
        return 0, [f"{manifest}: lists no files (written before manifests held sizes and sha256); rebuild it"]
    folder = listed_folder(manifest, data)
    if not folder.is_dir():
        return len(listing), [f"{folder}: missing (named by {manifest})"]
    if not sha256:
        listing = {rel: {"bytes": want["bytes"]} for rel, want in listing.items()}
    return len(listing), problems(folder, listing)


def rebuild_command(manifest: str | Path) -> str:
    """The commands that rebuild what a manifest describes and rerun everything that read it: Snakemake does not
    rerun a job for a missing intermediate file alone, so the manifest is named to --forcerun, and its folder goes
    first so that the plan's size check (:func:`check_sizes`) does not stop on it."""
    return f"rm -r {Path(manifest).parent} && snakemake --cores all --forcerun {manifest}"


def check_sizes(manifests: list[Path]) -> None:
    """Stop with one line at the first manifest whose files are missing or of another size than it lists (a
    manifest that lists none is passed over)."""
    for m in manifests:
        _, bad = damage(m, sha256=False)
        bad = [b for b in bad if "lists no files" not in b]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise UserError(f"{bad[0]}{more}; rebuild it: {rebuild_command(m)}")


def portable(path: str | Path, folder: str | Path, tree: str | Path) -> str:
    """``path`` as recorded in a file in ``folder``: relative to ``folder`` when both lie inside the results
    ``tree`` (so the tree can move whole), else absolute (a checkpoint of the user's, a hub cache)."""
    absolute, folder, tree = (Path(os.path.abspath(p)) for p in (path, folder, tree))
    if all(p == tree or tree in p.parents for p in (absolute, folder)):
        return Path(os.path.relpath(absolute, folder)).as_posix()
    return str(absolute)


def resolve(recorded: str | Path, folder: str | Path) -> Path:
    """A path read from a file in ``folder``: a relative one is taken from ``folder``, an absolute one as is."""
    p = Path(recorded).expanduser()
    return p if p.is_absolute() else Path(os.path.abspath(Path(folder) / p))
