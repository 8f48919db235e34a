#!/bin/sh
# Makes a virtual environment for the Python package's tests and installs their dependencies from PyPI:
# numpy (required), ml_dtypes (FP8/bf16 numpy dtypes), pytest, setuptools (the package's build), matplotlib
# (python -m blockfp8.plot) and torch.
#
# torch's PyPI wheel for Linux imports only with its nvidia-* dependency wheels, about 3 GB in all (a --no-deps
# install fails on libcufile.so.0), so the first run downloads that much; later runs find everything installed
# and return at once. Set BFP8_NO_TORCH=1 to leave torch out (the torch tests then skip).
#
# usage: sh scripts/install-python-deps.sh [--check] VENV_DIR     (created with python3 -m venv if it does not exist)
#   --check: install nothing; exit 1 naming what is missing (what `make test` runs: only `make deps` installs).
set -eu
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
venv=${1:?usage: $0 [--check] VENV_DIR}
py="$venv/bin/python"

if [ ! -x "$py" ] && [ "$check" = 1 ]; then
    echo "install-python-deps: no virtual environment at $venv: run \`make deps\` first" >&2
    exit 1
fi
if [ ! -x "$py" ]; then
    echo "install-python-deps: python3 -m venv $venv" >&2
    python3 -m venv "$venv" || {
        echo "install-python-deps: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi

mods="numpy ml_dtypes pytest setuptools matplotlib"
if [ "${BFP8_NO_TORCH:-0}" = 0 ]; then
    mods="$mods torch"
fi

missing=""
for m in $mods; do
    "$py" -c "import $m" >/dev/null 2>&1 || missing="$missing $m"
done
[ -z "$missing" ] && exit 0
if [ "$check" = 1 ]; then
    echo "install-python-deps: $venv lacks$missing: run \`make deps\` first" >&2
    exit 1
fi

echo "install-python-deps: pip install$missing (torch brings ~3 GB of nvidia-* wheels)" >&2
# shellcheck disable=SC2086  # word splitting of the package list is meant
"$py" -m pip install --quiet --disable-pip-version-check $missing
for m in $mods; do
    "$py" -c "import $m" || { echo "install-python-deps: $m does not import after the install" >&2; exit 1; }
done
