#!/bin/sh
# The optimizer in the session's epilogue (executor/train.c, step_in_graph):
# what CUDA captures into the step's one graph (GradNorm, the update reading
# its scalars and the norm from memory, the tied copies) runs here after the
# last node, asked for with GRAPHFUSE_TRAIN_IN_GRAPH=1 on the CPU (and
# OpenCL when there is a platform).  It must change nothing: the same
# losses, gradient norms and learning rates as the host-driven update, bit
# for bit (AdamW, SGD with momentum and clipping, a tied lm head with
# clipping), the same checkpoint after a resume, and the same divergence
# message and exit status.  The capture itself needs a GPU:
# tools/cuda_check.sh.
# Usage: tests/run_train_in_graph.sh path/to/graphfuse
set -u
gf=${1:?usage: run_train_in_graph.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
n=0
L="models/llama_tiny/legacy/model.onnx --data models/llama_tiny/train_data"
G="models/gpt2_tiny/legacy/model.onnx --data models/gpt2_tiny/train_data"

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

# same NAME BACKEND -- TRAIN ARGS...: step, loss, grad_norm, lr identical
# with and without the epilogue
same() {
    name=$1 be=$2
    shift 3
    n=$((n + 1))
    for e in 0 1; do
        if ! GRAPHFUSE_TRAIN_IN_GRAPH=$e "$gf" train "$@" --backend "$be" \
            --log "$tmp/l$e.csv" >"$tmp/o$e" 2>&1; then
            fail "$name ($be, GRAPHFUSE_TRAIN_IN_GRAPH=$e): $(tail -2 "$tmp/o$e")"
            return
        fi
        cut -d, -f1-4 "$tmp/l$e.csv" >"$tmp/c$e"
    done
    if [ "$(wc -l <"$tmp/c1")" -lt 3 ] || ! cmp -s "$tmp/c0" "$tmp/c1"; then
        fail "$name ($be): the losses differ with the optimizer in the epilogue"
        diff "$tmp/c0" "$tmp/c1" | head -6
        return
    fi
    echo "ok   $name ($be): $(tail -1 "$tmp/c1")"
}

backends=cpu
if "$gf" backends | grep -q '^opencl: available'; then
    backends="cpu opencl"
fi
for be in $backends; do
    same "llama_tiny fused adamw" "$be" -- $L --steps 4 --optimizer adamw --lr 0.001
    same "llama_tiny unfused sgd, nesterov, clip" "$be" -- $L --steps 4 --no-fuse \
        --optimizer sgd --lr 0.1 --momentum 0.9 --nesterov --clip-grad-norm 0.1
    same "gpt2_tiny tied, adamw, clip, cosine" "$be" -- $G --steps 4 --optimizer adamw \
        --lr 0.001 --clip-grad-norm 0.5 --schedule cosine --warmup 1
done

# the epilogue's profile row, and nothing said about CUDA Graphs on the CPU
n=$((n + 1))
GRAPHFUSE_TRAIN_IN_GRAPH=1 "$gf" train $L --steps 2 --optimizer adamw --backend cpu \
    --profile >"$tmp/p" 2>&1 || fail "profile run: $(tail -2 "$tmp/p")"
grep -q '^  epilogue (optimizer) ' "$tmp/p" || fail "profile: no epilogue row"
! grep -qi 'cuda graph' "$tmp/p" || fail "profile on the CPU mentions a cuda graph"

# a checkpoint and a resume give the uninterrupted run's losses (the step
# count the staged hyper reads)
n=$((n + 1))
export GRAPHFUSE_TRAIN_IN_GRAPH=1
"$gf" train $L --steps 4 --optimizer adamw --lr 0.001 --backend cpu \
    --log "$tmp/full.csv" >/dev/null 2>&1 || fail "uninterrupted run"
"$gf" train $L --steps 2 --optimizer adamw --lr 0.001 --backend cpu \
    --checkpoint-every 2 --checkpoint "$tmp/ck.onnx" >/dev/null 2>"$tmp/e" || fail "first half: $(cat "$tmp/e")"
"$gf" train $L --steps 4 --optimizer adamw --lr 0.001 --backend cpu --resume "$tmp/ck.onnx" \
    --log "$tmp/half.csv" >/dev/null 2>"$tmp/e" || fail "resume: $(cat "$tmp/e")"
tail -2 "$tmp/full.csv" | cut -d, -f1-4 >"$tmp/a"
tail -2 "$tmp/half.csv" | cut -d, -f1-4 >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || fail "resume: steps 2-3 differ from the uninterrupted run"
unset GRAPHFUSE_TRAIN_IN_GRAPH

# divergence: the same message and exit status (1) either way
n=$((n + 1))
for e in 0 1; do
    GRAPHFUSE_TRAIN_IN_GRAPH=$e "$gf" train $L --steps 5 --optimizer sgd --lr 1e30 \
        --backend cpu >/dev/null 2>"$tmp/d$e"
    echo $? >"$tmp/rc$e"
done
[ "$(cat "$tmp/rc1")" = 1 ] || fail "divergence: exit $(cat "$tmp/rc1"), expected 1"
grep -q "is not finite" "$tmp/d1" || fail "divergence message: $(cat "$tmp/d1")"
cmp -s "$tmp/d0" "$tmp/d1" || fail "divergence: $(cat "$tmp/d1") / $(cat "$tmp/d0")"

if [ $fails -ne 0 ]; then
    echo "run_train_in_graph: $fails of $n checks failed"
    exit 1
fi
echo "run_train_in_graph: ok ($n checks)"
