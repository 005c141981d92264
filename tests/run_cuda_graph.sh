#!/bin/sh
# --no-cuda-graph (CUDA Graphs off, for debugging) is accepted by run, test
# and train and changes nothing where no backend can capture (the CPU, here):
# same outputs, same losses; run --repeat N runs N times (profile: the
# last).  The capture itself needs a GPU: tools/cuda_check.sh checks it.
# Usage: tests/run_cuda_graph.sh path/to/graphfuse
set -u
gf=${1:?usage: run_cuda_graph.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
M=models/llama_tiny/legacy

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

for flag in "" --no-cuda-graph; do
    if ! "$gf" run $M/model.onnx --random-inputs --repeat 3 --profile $flag \
        >"$tmp/run$flag" 2>"$tmp/err"; then
        fail "run --repeat 3 $flag: $(cat "$tmp/err")"
    fi
    if ! "$gf" test --atol 1e-5 $M $flag >"$tmp/test$flag" 2>"$tmp/err"; then
        fail "test $flag: $(cat "$tmp/err")"
    fi
    if ! "$gf" train $M/model.onnx --data models/llama_tiny/train_data --steps 3 \
        --optimizer adamw $flag --log "$tmp/log$flag.csv" >/dev/null 2>"$tmp/err"; then
        fail "train $flag: $(cat "$tmp/err")"
    fi
done
grep -q "cuda graph" "$tmp/run" && fail "run --profile on the CPU mentions a cuda graph"
sed -n '/^outputs:/,/^profile/p' "$tmp/run" | grep -v '^profile' >"$tmp/a"
sed -n '/^outputs:/,/^profile/p' "$tmp/run--no-cuda-graph" | grep -v '^profile' >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || fail "run: outputs differ with --no-cuda-graph"
# step, loss, grad_norm, lr (not the times)
cut -d, -f1-4 "$tmp/log.csv" >"$tmp/la"
cut -d, -f1-4 "$tmp/log--no-cuda-graph.csv" >"$tmp/lb"
[ -s "$tmp/la" ] && cmp -s "$tmp/la" "$tmp/lb" || fail "train: losses differ with --no-cuda-graph"
grep -q "PASS" "$tmp/test--no-cuda-graph" || fail "test --no-cuda-graph: no PASS"
if "$gf" run $M/model.onnx --random-inputs --repeat 0 >/dev/null 2>"$tmp/err"; then
    fail "run --repeat 0 accepted"
fi
grep -q "repeat" "$tmp/err" || fail "run --repeat 0: no message naming --repeat"

if [ $fails -ne 0 ]; then
    echo "run_cuda_graph: $fails failure(s)"
    exit 1
fi
echo "run_cuda_graph: ok (--no-cuda-graph accepted by run, test, train; same results)"
