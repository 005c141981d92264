#!/bin/sh
# Installs the Debian packages graphfuse needs to build and test, when missing.
# Usage: tools/deps.sh PACKAGE...   (the Makefile passes its list)
# As root it runs apt-get; otherwise it prints the exact command and fails.
# GF_SKIP_DEPS=1 skips the check, for machines that bring the libraries
# another way (e.g. Debian packages unpacked into a private sysroot, with
# CPATH / LIBRARY_PATH pointing there: see README.md, "GPU machine").
set -e
[ "${GF_SKIP_DEPS:-0}" = 1 ] && exit 0
missing=""
for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "graphfuse: missing packages:$missing" >&2
    echo "run: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "graphfuse: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q $missing >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q $missing
}
