#!/bin/sh
# ONNX Runtime on graphfuse's output: optimizes every bundled model and
# checks that ORT runs the optimized file (its fused nodes through the
# model-local functions) and gets the original file's outputs, on the
# recorded inputs (tests/ort_check.py).  Python and onnxruntime are
# optional: without them this prints why and passes.
# Usage: tests/run_ort.sh GRAPHFUSE
set -u
gf=${1:?usage: run_ort.sh path/to/graphfuse}
here=$(dirname "$0")
if ! command -v python3 >/dev/null 2>&1 ||
    ! python3 -c 'import onnxruntime, onnx, numpy' >/dev/null 2>&1; then
    echo "ort: skipped (python3 cannot import onnxruntime, onnx and numpy:" \
        "pip install onnxruntime onnx numpy)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_ort.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
n=0
python3 "$here/ort_check.py" --make-models "$tmp/synthetic" || {
    echo "FAIL ort: could not write the synthetic models"
    exit 1
}
for dir in models/*/legacy models/*/dynamo "$tmp"/synthetic/*; do
    n=$((n + 1))
    out="$tmp/$(basename "$(dirname "$dir")")_$(basename "$dir").onnx"
    if ! "$gf" optimize "$dir/model.onnx" -o "$out" >"$tmp/report" 2>"$tmp/err"; then
        echo "FAIL ort $dir: optimize failed: $(cat "$tmp/err")"
        fails=$((fails + 1))
        continue
    fi
    data="$dir/test_data_set_0"
    [ -d "$data" ] || data=
    if python3 "$here/ort_check.py" "$dir/model.onnx" "$out" $data >"$tmp/log" 2>&1; then
        echo "ok   ort $dir ($(grep -o 'graphfuse\.[A-Za-z]*' "$tmp/report" | sort -u | tr '\n' ' '))"
    else
        echo "FAIL ort $dir:"
        sed 's/^/  | /' "$tmp/log" | tail -8
        fails=$((fails + 1))
    fi
done
echo "ort: $n models, $fails failed"
[ "$fails" = 0 ]
