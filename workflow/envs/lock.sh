#!/usr/bin/env bash
# Refresh constraints.txt, the lock every install goes through: builds a throwaway virtual environment, installs
# the project as the README says (the CPU build of torch first, then every extra) without the old lock, and
# writes down every version pip chose. Run from anywhere: bash workflow/envs/lock.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
. "$tmp/venv/bin/activate"
torch=$(sed -nE 's/^pip install (torch==[^ ]+).*/\1/p' README.md | head -1)
pip install --quiet "${torch:?README has no pip install torch==... line}"
extras=$(python3 -c 'import tomllib; print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]))')
pip install --quiet -e ".[$extras]"
{
  echo "# The whole dependency tree, pinned: what CI installs and tests (CPU build of torch, Python $(python3 -c 'import platform; print(platform.python_version())'), $(uname -m))."
  echo "# Made by workflow/envs/lock.sh on $(date -u +%Y-%m-%d); rerun it to refresh. Used as pip -c constraints.txt."
  pip freeze --exclude-editable | sed -E 's/^(torch==[0-9.]+)\+cpu$/\1/'
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages pinned"
