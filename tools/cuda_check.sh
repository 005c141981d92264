#!/bin/sh
# The CUDA backend on the GPU machine (issue 14): builds graphfuse with CUDA,
# then runs, each as one check of the summary printed at the end:
#   - `graphfuse backends`: cuda available, the default (--backend auto)
#   - tests/test_cuda_backend: open, devices, memory (no test may skip but
#     test_without_device, which a machine with a GPU skips)
#   - the cross-backend tests, every tests/test_backend_*.c (the harness
#     test_backend_ops and the per-family tests), each one check, with
#     GRAPHFUSE_TEST_BACKEND=cuda: every comparison against the CPU passes
#     (a case without a CUDA kernel is "not supported", listed, not failed)
#   - the bundled models, fused and unfused, with `graphfuse test --backend
#     cuda` against PyTorch's recorded outputs (--atol 1e-5, as make test
#     does on the CPU), and the nodes left to the CPU listed
#   - 20 AdamW training steps of each model on cuda and on the cpu: the
#     losses agree within 1e-4 relative; on cuda with --no-cuda-graph too:
#     the same losses, bit for bit, as with the step captured and replayed
#   - CUDA Graphs: `run --repeat 3 --profile` reports the graph replay, and
#     llama_tiny's step time with and without capture (`train --profile`)
#   - tools/cuda_train_check.sh: the training step (forward, backward, the
#     optimizer) is one graph, the same losses with --no-cuda-graph and on
#     the CPU, a bad token id or label stops training with the CPU's message
#   - tests/run_hf.sh with RUN_HF_DEVICES=cuda: the Hugging Face exports
#     tested against PyTorch and trained 5 steps on cuda, no node on the CPU
# Exit status 0 when every check passed.
#
# Usage (repository root, GPU machine):
#   . tools/gpu_env.sh && tools/cuda_check.sh [--no-build] [BUILD_DIR]
set -u
cd "$(dirname "$0")/.."
build=1
if [ "${1:-}" = --no-build ]; then
    build=0
    shift
fi
B=${1:-build}
gf=$B/graphfuse
TOL=1e-5
TRAIN_TOL=1e-4
ADAMW="--optimizer adamw --lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
summary=$tmp/summary
: >"$summary"
fails=0

result() { # result PASS|FAIL|SKIP what [detail]
    printf '%-4s  %s\n' "$1" "$2" >>"$summary"
    [ -n "${3:-}" ] && printf '        %s\n' "$3" >>"$summary"
    [ "$1" = FAIL ] && fails=$((fails + 1))
    echo "== $1: $2"
    return 0
}

# ---- build ------------------------------------------------------------------
harness=""
for t in tests/test_backend_*.c; do
    [ -f "$t" ] && harness="$harness $B/tests/$(basename "$t" .c)"
done
if [ $build = 1 ]; then
    echo "== building in $B (GF_CUDA=1)"
    # shellcheck disable=SC2086
    if ! make -j"$(nproc)" BUILD="$B" GF_CUDA=1 "$gf" "$B/tests/test_cuda_backend" $harness \
        >"$tmp/build.log" 2>&1; then
        tail -30 "$tmp/build.log"
        echo "cuda_check: FAIL: the build failed (log above)"
        exit 1
    fi
fi
if [ ! -x "$gf" ]; then
    echo "cuda_check: FAIL: no $gf (build first, or drop --no-build)"
    exit 1
fi

# ---- graphfuse backends -------------------------------------------------------
"$gf" backends >"$tmp/backends" 2>&1
cat "$tmp/backends"
if ! grep -q '^cuda: ' "$tmp/backends"; then
    echo "cuda_check: FAIL: graphfuse lists no cuda backend: kernels/registry.c's BACKENDS"
    echo "lacks X(GF_CUDA, gf_cuda_backend, \"cuda\", ...) before opencl's line"
    exit 1
fi
if grep -q '^cuda: available' "$tmp/backends"; then
    result PASS "graphfuse backends lists cuda with devices"
else
    result FAIL "graphfuse backends lists cuda with devices" "$(grep '^cuda' "$tmp/backends")"
fi
if grep -q '^default (--backend auto): cuda' "$tmp/backends"; then
    result PASS "--backend auto picks cuda"
else
    result FAIL "--backend auto picks cuda" "$(grep '^default' "$tmp/backends")"
fi
if grep -A1 '^opencl: available' "$tmp/backends" | grep -q 'GPU, default'; then
    result FAIL "opencl is opt-in on the GPU cuda takes" \
        "$(grep -A1 '^opencl: available' "$tmp/backends" | tail -1)"
else
    result PASS "opencl is opt-in on the GPU cuda takes (or has no GPU)"
fi

# ---- test_cuda_backend ----------------------------------------------------------
if "$B/tests/test_cuda_backend" >"$tmp/core" 2>&1 &&
    ! grep '^\[  SKIPPED \]' "$tmp/core" | grep -v -q 'test_without_device\|SKIPPED \] [0-9]'; then
    result PASS "tests/test_cuda_backend" "$(grep '^cuda: ' "$tmp/core")"
else
    cat "$tmp/core"
    result FAIL "tests/test_cuda_backend (failed, or skipped tests)"
fi

# ---- the cross-backend tests ---------------------------------------------------------
# Each against the CPU on cuda only (an unavailable cuda is a failure there);
# the detail: what they found no CUDA kernel for.
[ -z "$harness" ] && result SKIP "tests/test_backend_*.c (none exist yet)"
for h in $harness; do
    name=$(basename "$h")
    if GRAPHFUSE_TEST_BACKEND=cuda "$h" >"$tmp/$name" 2>&1; then
        tail -3 "$tmp/$name"
        result PASS "$name on cuda" "$(grep -E '^backend ops on cuda:|comparisons not supported on cuda' \
            "$tmp/$name" | tr '\n' ' ' | cut -c1-300)"
    else
        tail -40 "$tmp/$name"
        result FAIL "$name on cuda (its last lines above)" \
            "$(grep -E '^\[  FAILED  \] [^0-9]|^\[  ERROR   \]' "$tmp/$name" | tr '\n' ' ' |
                cut -c1-300)"
    fi
done

# ---- the bundled models -------------------------------------------------------------
# "note: N nodes ran on the CPU (...)": what the CUDA tables still lack
cpu_nodes() {
    grep 'ran on the CPU' "$1" | head -1 | cut -c1-300
}
maxrel() { # max relative difference of the loss columns of two train logs
    awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
             FNR > 1 { if (!($1 in ref)) { print "missing"; exit }
                       d = $2 - ref[$1]; if (d < 0) d = -d
                       r = ref[$1] < 0 ? -ref[$1] : ref[$1]
                       if (d / r > m) m = d / r; k++ }
             END { if (k != 20) print "steps=" k; else printf "%.3g\n", m }' "$2" "$1"
}
for m in mlp llama_tiny gpt2_tiny; do
    for e in legacy dynamo; do
        extra=""
        [ "$m/$e" = llama_tiny/dynamo ] && extra="--freeze ^expand\$"
        for f in no-fuse fuse; do
            tf=""
            [ $f = fuse ] && tf=--fuse
            # shellcheck disable=SC2086
            if "$gf" test "models/$m/$e" --backend cuda --atol $TOL $tf >"$tmp/t" 2>&1 &&
                grep -q '^1 passed' "$tmp/t"; then
                result PASS "test $m/$e --$f on cuda" "$(cpu_nodes "$tmp/t")"
            else
                result FAIL "test $m/$e --$f on cuda" "$(tail -3 "$tmp/t" | tr '\n' ' ')"
            fi
            ok=1
            for b in cpu cuda cuda-nograph; do
                ng=""
                [ $b = cuda-nograph ] && ng=--no-cuda-graph
                # shellcheck disable=SC2086
                "$gf" train "models/$m/$e/model.onnx" --data "models/$m/train_data" \
                    --steps 20 $ADAMW $extra --$f --backend ${b%-nograph} $ng \
                    --log "$tmp/$b.csv" >"$tmp/$b.out" 2>&1 || ok=0
            done
            if [ $ok = 0 ]; then
                result FAIL "train $m/$e --$f on cuda" "$(tail -2 "$tmp/cuda.out" "$tmp/cpu.out" |
                    tr '\n' ' ')"
                continue
            fi
            r=$(maxrel "$tmp/cuda.csv" "$tmp/cpu.csv")
            if awk -v r="$r" -v t="$TRAIN_TOL" 'BEGIN { exit !(r + 0 == r && r <= t) }'; then
                result PASS "train $m/$e --$f: 20 AdamW steps, losses within $r of the cpu's" \
                    "$(cpu_nodes "$tmp/cuda.out")"
            else
                result FAIL "train $m/$e --$f: losses differ from the cpu's by $r (relative)" \
                    "$(cpu_nodes "$tmp/cuda.out")"
            fi
            # step, loss, grad_norm, lr: bit for bit with and without CUDA Graphs
            cut -d, -f1-4 "$tmp/cuda.csv" >"$tmp/g.csv"
            cut -d, -f1-4 "$tmp/cuda-nograph.csv" >"$tmp/ng.csv"
            if cmp -s "$tmp/g.csv" "$tmp/ng.csv"; then
                result PASS "train $m/$e --$f on cuda: same losses with --no-cuda-graph"
            else
                result FAIL "train $m/$e --$f on cuda: losses differ with --no-cuda-graph" \
                    "$(diff "$tmp/g.csv" "$tmp/ng.csv" | head -4 | tr '\n' ' ')"
            fi
        done
    done
done

# ---- CUDA Graphs: the replay in the profile, and the step time it saves -------------
M=models/llama_tiny/legacy
"$gf" run $M/model.onnx --random-inputs --repeat 3 --profile --backend cuda >"$tmp/rp" 2>&1
grep -i 'cuda graph' "$tmp/rp"
if grep -q '^  CUDA graph (replay)' "$tmp/rp" && grep -q '^cuda graph: [0-9]* of' "$tmp/rp"; then
    result PASS "run --repeat 3 --profile on cuda reports the graph replay" \
        "$(grep '^cuda graph: [0-9]* of' "$tmp/rp" | cut -c1-200)"
else
    result FAIL "run --repeat 3 --profile on cuda reports no graph replay" \
        "$(grep -i 'cuda graph' "$tmp/rp" | tr '\n' ' ' | cut -c1-300)"
fi
for ng in "" --no-cuda-graph; do
    "$gf" train $M/model.onnx --data models/llama_tiny/train_data --steps 20 $ADAMW \
        --backend cuda --profile $ng --log "$tmp/p$ng.csv" >"$tmp/p$ng.out" 2>&1
    ms=$(awk -F, 'NR > 6 { s += $5; k++ } END { if (k) printf "%.3f", s / k }' "$tmp/p$ng.csv")
    echo "== llama_tiny/legacy train on cuda ${ng:-with CUDA Graphs}: mean step of steps 6-20" \
        "$ms ms"
    grep -i 'cuda graph\|train profile' "$tmp/p$ng.out" | cut -c1-240
    result INFO "llama_tiny train step ${ng:-(graphs)}: $ms ms (steps 6-20, --profile)" \
        "$(grep 'train profile' "$tmp/p$ng.out" | cut -c1-200)"
done
for ng in "" --no-cuda-graph; do # without --profile: no sync after each node
    "$gf" train $M/model.onnx --data models/llama_tiny/train_data --steps 50 $ADAMW \
        --backend cuda $ng --log "$tmp/q$ng.csv" >/dev/null 2>&1
    ms=$(awk -F, 'NR > 6 { s += $5; k++ } END { if (k) printf "%.3f", s / k }' "$tmp/q$ng.csv")
    result INFO "llama_tiny train step ${ng:-(graphs)}: $ms ms (steps 6-50, no --profile)"
done

# ---- the training step as one CUDA graph: tools/cuda_train_check.sh -------------------
# the profile says so; the same losses with --no-cuda-graph (bit for bit) and on
# the CPU (1e-4); a bad token id and a bad label stop training with the CPU's message
sh tools/cuda_train_check.sh "$gf" >"$tmp/tg" 2>&1
cat "$tmp/tg"
if tail -1 "$tmp/tg" | grep -q ' 0 failed'; then
    result PASS "tools/cuda_train_check.sh: $(tail -1 "$tmp/tg")"
else
    result FAIL "tools/cuda_train_check.sh: $(tail -1 "$tmp/tg")" \
        "$(grep '^FAIL' "$tmp/tg" | head -5 | cut -c1-200 | tr '\n' ' ')"
fi

# ---- the Hugging Face exports (models/hf) on cuda: tests/run_hf.sh --------------------
# graphfuse test against PyTorch's outputs and 5 AdamW training steps against
# PyTorch's losses, fused and unfused, no node left to the CPU
RUN_HF_DEVICES=cuda sh tests/run_hf.sh "$gf" >"$tmp/hf" 2>&1
if tail -1 "$tmp/hf" | grep -q ' 0 failed'; then
    result PASS "tests/run_hf.sh on cuda: $(tail -1 "$tmp/hf")"
else
    result FAIL "tests/run_hf.sh on cuda: $(tail -1 "$tmp/hf")" \
        "$(grep '^FAIL' "$tmp/hf" | head -5 | cut -c1-200 | tr '\n' ' ')"
fi

echo
echo "==== cuda_check summary ($(grep -c '^PASS' "$summary") passed, $fails failed," \
    "$(grep -c '^SKIP' "$summary") skipped)"
cat "$summary"
[ $fails -eq 0 ] && echo "cuda_check: PASS" || echo "cuda_check: FAIL"
[ $fails -eq 0 ]
