"""(slow) The README's test command's install, run in a fresh virtual environment, puts on that environment's PATH
every tool the documented commands call, so a newcomer who copies it can run them (issue 47: ``ruff: command not
found`` on a fresh machine, where .ci/run had installed the lint tools on its own).

The install is the README's ``<!-- newcomer: test -->`` command (tests/test_dependencies.py's ``readme_command``,
what .ci/run copies) up to its last ``&& pytest``, run with ``bash -euo pipefail`` from the checkout's root in a new
``python -m venv`` (no system site-packages). The tools are the program of every command in each block that
tests/test_documented_commands.py runs (README.md and docs/**/*.md marked runnable, plan or ci) and of the test
command's own run (pytest). A tool must be in the venv's bin/ unless it is a shell builtin or keyword, or a system
command: one that no installed Python distribution provides as a script (as ruff, snakefmt and pytest are) and that
is found on the PATH with every Python environment's bin/ left out (virtual environments, conda, pyenv's shims and
versions, ~/.local/bin, pipx). So git or sqlite3 may come from the machine; ruff must come from the install.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path, PurePath

import pytest

from conftest import ROOT, run_cmd
from test_dependencies import readme_command
from test_documented_commands import RUN, collect

INSTALL_TIMEOUT_S = 1800       # torch and the tree from the machine's wheels took ~55 s on a newcomer's machine
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PREFIXES = {"!", "{", "(", "do", "then", "else", "elif", "if", "while", "until", "time", "exec", "command",
            "nohup", "builtin"}     # words before the program a command runs
NO_PROGRAM = {"for", "case", "select", "function", "}", ")", "done", "fi", "esac", "in", ";;"}


def commands(script: str) -> list[str]:
    """A shell script cut into its simple commands: at newlines, ``;``, ``&``, ``&&``, ``|``, ``||`` outside quotes
    (a quoted string may span lines), ``\\``-newline joined, comments dropped; ``2>&1``, ``>|``, ``&>`` kept."""
    out, cur, quote, i = [], "", None, 0

    def cut():
        nonlocal cur
        if cur.strip():
            out.append(cur.strip())
        cur = ""

    while i < len(script):
        c = script[i]
        nxt = script[i + 1] if i + 1 < len(script) else ""
        if quote:
            if c == "\\" and quote == '"' and nxt:
                cur, i = cur + c + nxt, i + 2
                continue
            quote = None if c == quote else quote
        elif c == "\\" and nxt:
            cur, i = cur + (" " if nxt == "\n" else c + nxt), i + 2
            continue
        elif c in "'\"":
            quote = c
        elif c == "#" and (not cur or cur[-1].isspace()):
            end = script.find("\n", i)
            i = len(script) if end < 0 else end
            continue
        elif c in "\n;" or (c in "&|" and not cur.endswith((">", "<")) and not (c == "&" and nxt == ">")):
            cut()
            i += 2 if c != "\n" and nxt == c else 1
            continue
        cur += c
        i += 1
    cut()
    return out


def program(command: str) -> str | None:
    """The program a simple command runs: past ``X=y`` assignments, ``env [-i] [X=y]``, ``time``, ``do``, ``!``,
    ``(``/``{``; None for a command that runs none (``for H in ...``, ``done``, ``O="..."`` alone)."""
    try:
        words = shlex.split(command)
    except ValueError:                     # an unbalanced quote: the plain words will do for the first one
        words = command.split()
    i = 0
    while i < len(words):
        word = words[i].lstrip("({")
        if not word or word in PREFIXES or ASSIGNMENT.match(word):
            i += 1
        elif word == "env":
            i += 1
            while i < len(words) and (ASSIGNMENT.match(words[i]) or words[i].startswith("-")):
                i += 1
        elif word in NO_PROGRAM:
            return None
        else:
            return word.rstrip(")}") or None
    return None


def documented_tools(test_run: str) -> dict[str, list[str]]:
    """Each tool (a program looked up on the PATH, not a path such as benchmarks/x.py) the documented runnable
    blocks call, with the blocks (file:line) that call it; the README's test run counts as one such block."""
    blocks, _ = collect()
    sources = [(b.id, b.text) for b in blocks if b.mark in RUN] + [("README.md newcomer: test", test_run)]
    tools: dict[str, list[str]] = {}
    for where, text in sources:
        for command in commands(text):
            tool = program(command)
            if tool and "/" not in tool and "$" not in tool and where not in tools.get(tool, []):
                tools.setdefault(tool, []).append(where)
    return tools


def split_test_command(cmd: str) -> tuple[str, str]:
    """The README's test command as (its install, its test run), cut at its last ``&& pytest`` (as .ci/run)."""
    install, sep, run = cmd.rpartition("&& pytest")
    assert sep and install.strip(), f"the README's test command does not end in '&& pytest ...': {cmd}"
    return install.strip(), "pytest" + run


def python_scripts() -> set[str]:
    """Names of the scripts this interpreter's installed distributions put in a bin/ (console and GUI entry
    points, and scripts shipped as files, as ruff's binary is)."""
    names = set()
    for dist in distributions():
        names |= {ep.name for ep in dist.entry_points if ep.group in ("console_scripts", "gui_scripts")}
        names |= {PurePath(str(f)).name for f in dist.files or ()
                  if str(f).startswith("..") and PurePath(str(f)).parent.name in ("bin", "Scripts")}
    return names


def python_env_dir(d: Path) -> bool:
    """Whether a PATH entry is a Python environment's bin/ (its programs are packages' scripts, not the system's)."""
    return ((d.parent / "pyvenv.cfg").is_file() or (d.parent / "conda-meta").is_dir()
            or ".pyenv" in d.parts or "pipx" in d.parts or d == Path.home() / ".local" / "bin"
            or (d.name == "shims" and (d.parent / "versions").is_dir()))


def shell_words() -> set[str]:
    r = subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True, check=True)
    return set(r.stdout.split())


def missing(tools, venv_bin: Path, path: str, scripts: set[str], shell: set[str]) -> dict[str, str]:
    """The tools the venv does not provide and must: each with why."""
    system = os.pathsep.join(d for d in path.split(os.pathsep) if d and not python_env_dir(Path(d)))
    lacking = {}
    for tool in tools:
        if shutil.which(tool, path=str(venv_bin)) or tool in shell:
            continue
        if tool in scripts:
            lacking[tool] = "a Python package's script, not in the venv's bin/"
        elif not shutil.which(tool, path=system):
            lacking[tool] = "not in the venv's bin/, and no system command"
    return lacking


def newcomer_env(venv: Path) -> dict[str, str]:
    """The environment of a newcomer's shell with the venv activated: nothing of this interpreter's on its path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV", "PIP_USER", "CONDA_PREFIX")}
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


# --- fast: the commands' programs, and which ones the venv must provide -----------------------------------------

def test_commands_and_their_programs():
    script = ("X=1 env -i Y=2 ruff check . && snakefmt --check . 2>&1 | tee log   # ruff's 'note\n"
              "heterospec query \"SELECT a\n  FROM b; -- c\" >| out &\n"
              "for H in a b; do O=\"x=$H\"\n  python -m heterospec.hls model $O; done\n"
              "time pytest -q \\\n  -x || ! git diff --quiet\n(cd src && sqlite3 db .tables)\n")
    cmds = commands(script)
    assert cmds[:3] == ["X=1 env -i Y=2 ruff check .", "snakefmt --check . 2>&1", "tee log"]
    assert cmds[3] == "heterospec query \"SELECT a\n  FROM b; -- c\" >| out"
    assert [program(c) for c in cmds] == ["ruff", "snakefmt", "tee", "heterospec", None, None, "python", None,
                                          "pytest", "git", "cd", "sqlite3"]


def test_the_documented_tools_are_found():
    install, run = split_test_command(readme_command("test"))
    assert "pip install" in install and run.startswith("pytest ")
    tools = documented_tools(run)
    assert {"pytest", "ruff", "snakefmt", "heterospec", "snakemake", "python"} <= set(tools), sorted(tools)
    assert "docs/testing.md" in " ".join(tools["ruff"]) and "FROM" not in tools and "done" not in tools


def _exe(d: Path, name: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("#!/bin/sh\n")
    (d / name).chmod(0o755)


def test_a_package_script_must_come_from_the_venv_and_a_system_command_need_not(tmp_path):
    venv, other, system = tmp_path / "venv" / "bin", tmp_path / "other-venv" / "bin", tmp_path / "usr" / "bin"
    (tmp_path / "other-venv" / "pyvenv.cfg").parent.mkdir()
    (tmp_path / "other-venv" / "pyvenv.cfg").write_text("home = /x\n")
    _exe(venv, "pytest")
    for name in ("ruff", "black"):
        _exe(other, name)                  # another environment's copies: they do not count
    for name in ("sqlite3", "snakefmt"):
        _exe(system, name)                 # snakefmt here, but a package's script: it must be the venv's
    path = os.pathsep.join([str(other), str(system)])
    tools = ["pytest", "ruff", "black", "sqlite3", "snakefmt", "cd", "nosuchtool"]
    assert missing(tools, venv, path, {"pytest", "ruff", "snakefmt"}, {"cd", "echo"}) == {
        "ruff": "a Python package's script, not in the venv's bin/",
        "black": "not in the venv's bin/, and no system command",
        "snakefmt": "a Python package's script, not in the venv's bin/",
        "nosuchtool": "not in the venv's bin/, and no system command"}
    assert python_env_dir(other) and not python_env_dir(system)


# --- slow: the README's install in a fresh venv ------------------------------------------------------------------

@pytest.mark.slow
def test_the_readme_test_install_provides_every_documented_tool(tmp_path):
    install, run = split_test_command(readme_command("test"))
    tools = documented_tools(run)
    venv = tmp_path / "venv"
    env = newcomer_env(venv)
    r = run_cmd([sys.executable, "-m", "venv", str(venv)], base_env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        r = run_cmd(["bash", "-euo", "pipefail", "-c", install], cwd=ROOT, base_env=env, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the README's install ran past {INSTALL_TIMEOUT_S} s: {install}")
    assert r.returncode == 0, \
        f"the README's install failed, rc {r.returncode}: {install}\n{(r.stdout + r.stderr)[-4000:]}"
    lacking = missing(tools, venv / "bin", os.environ["PATH"], python_scripts(), shell_words())
    assert not lacking, (
        f"the README's test install ({install}) leaves out {len(lacking)} tool(s) the documented commands call "
        "(add its package to the test extra in pyproject.toml and pin it in constraints.txt):\n"
        + "\n".join(f"  {tool}: {why}; called in {', '.join(tools[tool])}" for tool, why in sorted(lacking.items())))
