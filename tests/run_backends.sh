#!/bin/sh
# `graphfuse backends`: lists cpu and opencl, names the default, exits 0 with
# or without an OpenCL platform; rejects stray arguments.
# Usage: tests/run_backends.sh build/graphfuse
set -e
gf=${1:-build/graphfuse}
out=$("$gf" backends)
echo "$out" | grep -q '^cpu: available' || { echo "FAIL: cpu not listed"; exit 1; }
echo "$out" | grep -q '^opencl: ' || { echo "FAIL: opencl not listed"; exit 1; }
echo "$out" | grep -q '^default (--backend auto): ' || { echo "FAIL: no default"; exit 1; }
# no platform at all (or a build without OpenCL, GF_OPENCL=0): still exit 0,
# saying why
out=$(OCL_ICD_VENDORS=/nonexistent OCL_ICD_FILENAMES= "$gf" backends)
echo "$out" | grep -Eq '^opencl: not available: (no OpenCL platform|graphfuse was built without it)' ||
    { echo "FAIL: missing platform not reported: $out"; exit 1; }
echo "$out" | grep -q '^default (--backend auto): cpu' || { echo "FAIL: default not cpu"; exit 1; }
if "$gf" backends extra 2>/dev/null; then echo "FAIL: stray argument accepted"; exit 1; fi
echo "run_backends: ok"
