#!/bin/sh
# --precision from the command line (docs/precision.md):
# 1. `test --precision bf16|fp16` on the bundled models against PyTorch's
#    recorded fp32 outputs: every element within 32u of it (u = 2^-9 bf16,
#    2^-12 fp16; the logits' rms is ~1, and tests/test_precision.c bounds
#    the largest error by 32u of the rms);
# 2. `optimize --precision bf16|fp16` writes a file with the weights
#    converted (a quarter smaller than the fp32 optimize's at least) that
#    graphfuse runs within the same bound; with python3 + onnxruntime, ORT
#    runs the fp16 file (ORT's CPU has no bf16 MatMul) and agrees with
#    graphfuse within 8u of the rms;
# 3. bad values: exit 2; train --precision fp16 reports its loss scale and skips.
# Usage: tests/run_precision.sh GRAPHFUSE
set -u
gf=${1:?usage: run_precision.sh path/to/graphfuse}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_precision.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
n=0

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

bound() { # 32u
    if [ "$1" = bf16 ]; then echo 0.0625; else echo 0.0078125; fi
}

dirs=""
for m in mlp gpt2_tiny llama_tiny; do
    for e in legacy dynamo; do
        dirs="$dirs models/$m/$e"
    done
done

for p in bf16 fp16; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    if ! "$gf" test --precision $p --rtol 0 --atol "$(bound $p)" $dirs >"$tmp/out" 2>&1; then
        fail "test --precision $p: $(grep -v '^PASS' "$tmp/out" | head -n 3)"
    fi
    for d in $dirs; do
        name=$(echo "$d" | tr / _)
        mkdir -p "$tmp/$name.$p" "$tmp/$name.fp32"
        ln -s "$(pwd)/$d/test_data_set_0" "$tmp/$name.$p/test_data_set_0"
        n=$((n + 1))
        if ! "$gf" optimize "$d/model.onnx" --precision $p -o "$tmp/$name.$p/model.onnx" \
            >/dev/null 2>"$tmp/err" ||
            ! "$gf" optimize "$d/model.onnx" -o "$tmp/$name.fp32/model.onnx" >/dev/null 2>&1; then
            fail "optimize --precision $p $d: $(cat "$tmp/err")"
            continue
        fi
        small=$(wc -c <"$tmp/$name.$p/model.onnx")
        big=$(wc -c <"$tmp/$name.fp32/model.onnx")
        [ $((small * 4)) -le $((big * 3)) ] ||
            fail "optimize --precision $p $d: $small bytes against fp32's $big: weights not converted"
        if ! "$gf" test --rtol 0 --atol "$(bound $p)" "$tmp/$name.$p" >"$tmp/out" 2>&1; then
            fail "optimize --precision $p $d, run: $(head -n 2 "$tmp/out")"
        fi
    done
done

if command -v python3 >/dev/null 2>&1 &&
    python3 -c 'import onnxruntime, onnx, numpy' >/dev/null 2>&1; then
    for d in $dirs; do
        name=$(echo "$d" | tr / _)
        f=$tmp/$name.fp16/model.onnx
        [ -f "$f" ] || continue
        n=$((n + 1))
        ins=""
        for i in "$d"/test_data_set_0/input_*.pb; do
            nm=$(python3 -c "import onnx, sys; print(onnx.load_tensor(sys.argv[1]).name)" "$i")
            ins="$ins --input $nm=$i"
        done
        # shellcheck disable=SC2086
        "$gf" run "$f" $ins --output-dir "$tmp/$name.gf" >/dev/null 2>&1 ||
            { fail "run $d fp16 file"; continue; }
        python3 - "$f" "$d/test_data_set_0" "$tmp/$name.gf" >"$tmp/ort" 2>&1 <<'EOF' ||
import glob, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper as nh
model, data, gf = sys.argv[1:4]
feeds = {}
for f in sorted(glob.glob(data + "/input_*.pb")):
    t = onnx.load_tensor(f)
    feeds[t.name] = nh.to_array(t)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
outs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
worst = 0.0
for i, o in enumerate(outs):
    g = nh.to_array(onnx.load_tensor("%s/output_%d.pb" % (gf, i))).astype(np.float64)
    o = o.astype(np.float64)
    rms = max(np.sqrt((g ** 2).mean()), 1e-30)
    worst = max(worst, np.sqrt(((o - g) ** 2).mean()) / rms)
print("%.3g" % (worst * 4096))
sys.exit(0 if worst <= 8 / 4096 else 1)
EOF
            fail "ORT on the fp16 file of $d: $(tail -n 2 "$tmp/ort")"
        echo "ort fp16 $d: rms difference from graphfuse $(tail -n 1 "$tmp/ort")u"
    done
else
    echo "precision: ORT check skipped (python3 cannot import onnxruntime, onnx and numpy)"
fi

n=$((n + 1))
"$gf" run models/mlp/legacy/model.onnx --random-inputs --precision half >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "precision" "$tmp/err"; then
    fail "run --precision half: exit $rc"
fi
n=$((n + 1))
"$gf" optimize models/mlp/legacy/model.onnx -o "$tmp/x.onnx" --precision fp8 >/dev/null 2>&1
rc=$?
if [ $rc -ne 2 ] || [ -e "$tmp/x.onnx" ]; then
    fail "optimize --precision fp8: exit $rc"
fi
n=$((n + 1))
"$gf" train models/mlp/legacy/model.onnx --data models/mlp/train_data --steps 2 \
    --precision fp16 --loss-scale 1099511627776 --loss-scale-window 1 \
    --log "$tmp/fp16.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
# 2^40 overflows the fp16 backward: the first step is skipped, S halved
if [ $rc -ne 0 ] || ! grep -q "scale 1.09951e+12  skipped 1 (this step" "$tmp/out" ||
   ! grep -q "^step,loss,grad_norm,lr,ms,tokens_per_s,loss_scale,skipped$" "$tmp/fp16.csv" ||
   ! grep -q "^1,.*,5.49755814e+11,2$\|^1,.*,5.49755814e+11,1$" "$tmp/fp16.csv"; then
    fail "train --precision fp16 (loss scaling): exit $rc: $(head -n 3 "$tmp/err" "$tmp/out")"
fi

echo "precision: $n checks, $fails failed"
[ $fails -eq 0 ]
