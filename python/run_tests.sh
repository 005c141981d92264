#!/bin/sh
# The Python package's tests: a fresh virtual environment, `pip install
# ./python` into it, then pytest on python/tests against BUILD_DIR's library
# and CLI.  Usage: sh python/run_tests.sh BUILD_DIR   (e.g. build)
# The venv sees Debian's python3-numpy and python3-pytest
# (--system-site-packages) and pip builds with Debian's setuptools
# (--no-build-isolation), so nothing is fetched from the network; missing
# Debian packages are installed as tools/deps.sh installs the others.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
build=$(cd "${1:?usage: python/run_tests.sh BUILD_DIR}" && pwd)
[ -e "$build/libgraphfuse.so" ] || { echo "python/run_tests.sh: no $build/libgraphfuse.so (run make)" >&2; exit 1; }
# Debian's interpreter: its site-packages hold the Debian packages
py=/usr/bin/python3
tools/deps.sh python3 python3-venv python3-setuptools python3-wheel python3-numpy python3-pytest
venv=$(mktemp -d "${TMPDIR:-/tmp}/graphfuse-venv.XXXXXX")
trap 'rm -rf "$venv"' EXIT INT TERM
"$py" -m venv --system-site-packages "$venv"
# a copy of python/: pip's build leaves build/ and *.egg-info beside the sources
src="$venv/src"
mkdir -p "$src" && cp -r python/pyproject.toml python/README.md python/graphfuse "$src/"
"$venv/bin/pip" install -q --no-build-isolation --no-index --no-deps "$src"
# run from outside python/ so the installed package is the one imported
cd "$venv"
GRAPHFUSE_LIB="$build/libgraphfuse.so" GRAPHFUSE_CLI="$build/graphfuse" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
