#!/bin/sh
# The CUDA training step as one graph (issue 14), on the GPU machine:
#   1. llama_tiny (fused, AdamW; unfused, SGD with momentum and clipping)
#      and gpt2_tiny (a tied, transposed lm head; AdamW, clipping) train 8
#      steps on cuda with --profile: the profile says the whole step is one
#      CUDA graph (forward, backward, GradNorm, the update, the tied copies:
#      "cuda graph: the whole step is one graph", no node outside);
#   2. the same steps with --no-cuda-graph: the same losses, gradient norms
#      and learning rates, bit for bit;
#   3. on the CPU: losses and norms within 1e-4 (relative, at least 1e-4
#      absolute) of cuda's;
#   4. a token id out of range (input_ids) and a label out of range
#      (labels), fused and unfused, graphs on and off: training stops with
#      the CPU's message (node, tensor, element, value) and exit status.
# Prints PASS / FAIL lines and a summary; exit status 0 when all passed.
#
# Usage (repository root, GPU machine, graphfuse built with CUDA):
#   tools/cuda_train_check.sh [path/to/graphfuse]      (default build/graphfuse)
# tools/cuda_check.sh runs it too.
set -u
cd "$(dirname "$0")/.."
gf=${1:-build/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
TOL=1e-4
ADAMW="--optimizer adamw --lr 0.001"
L="models/llama_tiny/legacy/model.onnx --data models/llama_tiny/train_data"
G="models/gpt2_tiny/legacy/model.onnx --data models/gpt2_tiny/train_data"

pass() {
    echo "PASS  $*"
    passes=$((passes + 1))
}

fail() {
    echo "FAIL  $*"
    fails=$((fails + 1))
}

if ! "$gf" backends 2>/dev/null | grep -q '^cuda: available'; then
    echo "FAIL  no CUDA device: $("$gf" backends 2>&1 | grep '^cuda' | head -1)"
    exit 1
fi

# close A B: the loss and grad_norm columns of two logs within TOL (relative,
# at least TOL absolute), the same number of steps
close() {
    awk -F, -v tol=$TOL 'NR == FNR { l[FNR] = $2; g[FNR] = $3; n = FNR; next }
        FNR > 1 { m = FNR
                  for (k = 2; k <= 3; k++) {
                      w = k == 2 ? l[FNR] : g[FNR]; d = $k - w; if (d < 0) d = -d
                      s = w < 0 ? -w : w; if (s < 1) s = 1
                      if (!(d <= tol * s)) { print "step " $1 ": " $k " vs " w; bad = 1 }
                  } }
        END { if (m != n) { print m " rows vs " n; bad = 1 } exit bad }' "$1" "$2"
}

# train_check NAME -- TRAIN ARGS...: checks 1-3
train_check() {
    name=$1
    shift 2
    if ! "$gf" train "$@" --steps 8 --backend cuda --profile --log "$tmp/g.csv" \
        >"$tmp/g.out" 2>&1; then
        fail "$name: train on cuda: $(tail -2 "$tmp/g.out" | tr '\n' ' ')"
        return
    fi
    if grep -q '^cuda graph: the whole step is one graph' "$tmp/g.out"; then
        pass "$name: the whole step is one CUDA graph"
    else
        fail "$name: the step is not one graph:" \
            "$(grep -i 'cuda graph\|ran on the CPU' "$tmp/g.out" | tr '\n' ' ' | cut -c1-400)"
    fi
    grep -i 'cuda graph\|train profile\|epilogue' "$tmp/g.out" | sed 's/^/        /' | cut -c1-240
    if ! "$gf" train "$@" --steps 8 --backend cuda --no-cuda-graph --log "$tmp/n.csv" \
        >"$tmp/n.out" 2>&1; then
        fail "$name: train on cuda --no-cuda-graph: $(tail -2 "$tmp/n.out" | tr '\n' ' ')"
        return
    fi
    cut -d, -f1-4 "$tmp/g.csv" >"$tmp/ga"
    cut -d, -f1-4 "$tmp/n.csv" >"$tmp/na"
    if cmp -s "$tmp/ga" "$tmp/na"; then
        pass "$name: --no-cuda-graph gives the same losses, bit for bit ($(tail -1 "$tmp/ga"))"
    else
        fail "$name: losses differ with --no-cuda-graph: $(diff "$tmp/ga" "$tmp/na" | head -4 |
            tr '\n' ' ')"
    fi
    if ! "$gf" train "$@" --steps 8 --backend cpu --log "$tmp/c.csv" >"$tmp/c.out" 2>&1; then
        fail "$name: train on the cpu: $(tail -2 "$tmp/c.out" | tr '\n' ' ')"
        return
    fi
    if why=$(close "$tmp/c.csv" "$tmp/g.csv"); then
        pass "$name: losses and norms within $TOL of the CPU's ($(tail -1 "$tmp/c.csv" |
            cut -d, -f1-3) on the cpu)"
    else
        fail "$name: cuda's losses are not the CPU's: $(echo "$why" | head -3 | tr '\n' ' ')"
    fi
}

train_check "llama_tiny fused adamw" -- $L $ADAMW
train_check "llama_tiny unfused sgd, momentum, clip" -- $L --no-fuse --optimizer sgd \
    --lr 0.05 --momentum 0.9 --clip-grad-norm 0.5
train_check "gpt2_tiny tied, adamw, clip" -- $G $ADAMW --clip-grad-norm 0.5

# ---- 4. bad data: a token id and a label out of range ---------------------------------
# input_0.pb / input_1.pb of llama_tiny's batch 0 hold raw int64 data from
# byte 20 / 17 on: element 37 of input_ids and element 5 of labels become 1000
# (the vocabulary has 64 entries)
for d in ids lab; do
    mkdir -p "$tmp/bad_$d"
    cp -r models/llama_tiny/train_data/test_data_set_0 "$tmp/bad_$d/"
done
printf '\350\003' | dd of="$tmp/bad_ids/test_data_set_0/input_0.pb" bs=1 seek=$((20 + 8 * 37)) \
    conv=notrunc 2>/dev/null
printf '\350\003' | dd of="$tmp/bad_lab/test_data_set_0/input_1.pb" bs=1 seek=$((17 + 8 * 5)) \
    conv=notrunc 2>/dev/null
for d in ids lab; do
    for fuse in "" --no-fuse; do
        M="models/llama_tiny/legacy/model.onnx --data $tmp/bad_$d --steps 3 $ADAMW $fuse"
        "$gf" train $M --backend cpu >/dev/null 2>"$tmp/cpu.err"
        want_rc=$?
        want=$(head -1 "$tmp/cpu.err")
        for ng in "" --no-cuda-graph; do
            what="bad $([ $d = ids ] && echo "token id" || echo label) ${fuse:-fused}${ng:+ $ng}"
            "$gf" train $M --backend cuda $ng >/dev/null 2>"$tmp/cu.err"
            rc=$?
            got=$(head -1 "$tmp/cu.err")
            if [ $rc -ne 0 ] && [ $rc = $want_rc ] && [ "$got" = "$want" ]; then
                pass "$what on cuda: exit $rc, $got"
            else
                fail "$what on cuda: exit $rc ($want_rc on the cpu): '$got'; the cpu: '$want'"
            fi
        done
    done
done

echo "cuda_train_check: $passes passed, $fails failed"
[ $fails -eq 0 ]
