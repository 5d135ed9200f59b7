"""The bundle's one command on an offline GPU node (copied into the bundle as ``check.py``; standard library only):
check the bundle's files, install its wheels beside the node's own packages with no index (into ``site/`` here, the
node's environment untouched), then run ``heterospec gpu check`` on the bundle's models.

    python3 check.py                        the check on cuda:0, written to ./gpu-check
    python3 check.py --device cuda:1 --out /scratch/gpu-check
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(line: str) -> None:
    print(f"check.py: {line}", file=sys.stderr)
    sys.exit(2)


def damaged(files: dict) -> list[str]:
    """The bundle's files that are missing or differ from bundle.json."""
    bad = []
    for rel, want in sorted(files.items()):
        path = os.path.join(HERE, rel)
        if not os.path.isfile(path):
            bad.append(f"{rel}: missing")
            continue
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != want["sha256"]:
            bad.append(f"{rel}: differs from bundle.json")
    return bad


def site_dirs(prefix: str) -> list[str]:
    """Where pip --prefix put the packages (lib/pythonX.Y/site-packages, or dist-packages on Debian's Python)."""
    found = glob.glob(os.path.join(prefix, "lib*", "python*", "*-packages"))
    found += glob.glob(os.path.join(prefix, "local", "lib*", "python*", "*-packages"))
    return sorted(found)


def main(argv: list[str]) -> None:
    try:
        with open(os.path.join(HERE, "bundle.json")) as f:
            bundle = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{HERE}/bundle.json: unreadable ({e}); unpack the whole bundle")
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if have != bundle["python"]:
        fail(f"this bundle holds wheels for Python {bundle['python']}; {sys.executable} is Python {have} "
             f"(run check.py with the node's Python {bundle['python']}, or build a bundle for {have})")
    print(f"[check.py] checking {len(bundle['files'])} files of the bundle against bundle.json", flush=True)
    bad = damaged(bundle["files"])
    if bad:
        fail(f"{bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + "; copy the bundle again")
    prefix = os.path.join(HERE, "site")
    path = [os.path.join(HERE, "project", "src"), *site_dirs(prefix), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "HF_HUB_OFFLINE": "1",
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if bundle["requirements"]:
        print(f"[check.py] installing {len(bundle['requirements'])} requirements from the bundle's wheels, offline, "
              f"into {prefix} (the node's own packages are used where they satisfy)", flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links",
                            os.path.join(HERE, "wheels"), "--prefix", prefix, "--no-warn-script-location", "-q",
                            "-r", os.path.join(HERE, "requirements.txt")], env=env)
        if r.returncode:
            fail("pip could not install the bundle's wheels (above); the bundle may be for another node "
                 "(heterospec gpu bundle --node-has <the node's pip list --format=freeze>)")
        path = [os.path.join(HERE, "project", "src"), *site_dirs(prefix), os.environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    args = list(argv)
    given = {a.split("=", 1)[0] for a in args}
    if "--out" not in given:
        args += ["--out", os.path.join(os.getcwd(), "gpu-check")]
    if "--device" not in given:
        args += ["--device", "cuda:0"]
    cmd = [sys.executable, "-m", "heterospec", "gpu", "check", "--models", os.path.join(HERE, "models", "_models"),
           "--run", bundle["run"], *args]
    print(f"[check.py] {' '.join(cmd[1:])}", flush=True)
    sys.exit(subprocess.run(cmd, env=env).returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
