#!/bin/sh
# ONNX Runtime on graphfuse's output: optimizes every bundled model, and
# small models in the other exporter forms (tests/ort_check.py
# --make-models), for each target (graphfuse, ort, onnx), and checks that
# ORT runs the optimized file (fused nodes through the model-local
# functions, ORT's contrib ops or the standard ops the target wrote) and
# gets the original file's outputs on the recorded inputs; and that
# graphfuse itself runs the optimized file and gets the recorded outputs
# (graphfuse test --atol 1e-5; the small models' outputs are ORT's on the
# original; the LayerNormalization node tests' are ONNX's recorded ones).
# Prints the worst difference per target.  Python and
# onnxruntime are optional: without them this prints why and passes.
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
skipped=0
python3 "$here/ort_check.py" --make-models "$tmp/synthetic" || {
    echo "FAIL ort: could not write the synthetic models"
    exit 1
}
: >"$tmp/diffs"
# LayerNormalization with Mean and InvStdDev read, as the op and as its
# function body (2-D forms whose Flatten / Reshape cleanup removes, 3-D, 4-D)
node=/usr/share/libonnx-testdata/data/node
lnorm=
for t in 3d_axis1_epsilon 3d_axis1_epsilon_expanded 2d_axis1_expanded 2d_axis0_expanded \
    4d_axis_negative_2_expanded; do
    [ -d "$node/test_layer_normalization_$t" ] && lnorm="$lnorm $node/test_layer_normalization_$t"
done
for dir in models/*/legacy models/*/dynamo "$tmp"/synthetic/* $lnorm; do
    label=$(echo "$dir" | sed "s|^$tmp/||")
    for target in graphfuse ort onnx; do
        n=$((n + 1))
        case=$(basename "$(dirname "$dir")")_$(basename "$dir")_$target
        out="$tmp/out/$case"
        mkdir -p "$out"
        if ! "$gf" optimize "$dir/model.onnx" -o "$out/model.onnx" --target $target \
            >"$tmp/report" 2>"$tmp/err"; then
            echo "FAIL ort $label --target $target: optimize failed: $(cat "$tmp/err")"
            fails=$((fails + 1))
            continue
        fi
        # op types the file has and the input had not (report rows "OP 0 N")
        ops=$(awk '$2 == "0" && $3 ~ /^[1-9]/ && NF == 3 {print $1}' "$tmp/report" | tr '\n' ' ')
        data="$dir/test_data_set_0"
        python3 "$here/ort_check.py" --target $target "$dir/model.onnx" "$out/model.onnx" \
            "$data" >"$tmp/log" 2>&1
        rc=$?
        if [ $rc = 77 ]; then
            echo "skip ort $label --target $target: $(cat "$tmp/log")"
            skipped=$((skipped + 1))
        elif [ $rc != 0 ]; then
            echo "FAIL ort $label --target $target:"
            sed 's/^/  | /' "$tmp/log" | tail -8
            fails=$((fails + 1))
            continue
        fi
        sed -n "s/.*max abs diff \([^)]*\)).*/$target \1/p" "$tmp/log" >>"$tmp/diffs"
        # graphfuse runs the written file too
        cp -r "$data" "$out/"
        if ! "$gf" test --atol 1e-5 "$out" >"$tmp/log" 2>&1 || ! grep -q '^PASS' "$tmp/log"; then
            echo "FAIL graphfuse test $label --target $target: $(head -3 "$tmp/log")"
            fails=$((fails + 1))
            continue
        fi
        sed -n "s/^PASS .*worst error \([^ ]*\).*/gf_$target \1/p" "$tmp/log" >>"$tmp/diffs"
        [ $rc = 77 ] || echo "ok   ort $label --target $target ($ops)"
    done
done
worst() {
    awk -v t="$1" '$1 == t && $2 + 0 > w {w = $2 + 0} END {printf "%.3g", w}' "$tmp/diffs"
}
for target in graphfuse ort onnx; do
    echo "ort: --target $target: worst difference from the original in ORT $(worst $target)," \
        "graphfuse test on the written file: worst error $(worst gf_$target)"
done
echo "ort: $n model files, $fails failed, $skipped skipped (onnxruntime too old)"
[ "$fails" = 0 ]
