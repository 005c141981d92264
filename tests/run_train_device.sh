#!/bin/sh
# Training stays on the device: `train --profile` on OpenCL (PoCL in
# `make test`) reports what a step copied between host and device, and a
# step copies the batch in and a few scalars out (the loss of each
# micro-batch and the gradient norm), with every node on the device: plain,
# with two micro-batches, with clipping and a tied (transposed) lm head.
# The CPU copies nothing.  The profile line also splits the step's time
# into kernels and the host's time outside them.  Skipped (exit 0) without
# an OpenCL platform (the CPU check still runs).
# Usage: tests/run_train_device.sh path/to/graphfuse
set -u
gf=${1:?usage: run_train_device.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
n=0
ADAMW="--optimizer adamw --lr 0.001"

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

# profile FILE: the numbers of its "train profile:" line into ms (the step),
# pct (outside kernels, %), h2d, batch, d2h (bytes); false when none
profile() {
    set -- $(sed -n 's/^train profile: step [0-9]*: \([0-9.]*\) ms, kernels [0-9.]* ms .*outside kernels [0-9.]* ms (\([0-9.]*\)%); copied host->device \([0-9]*\) bytes (batch \([0-9]*\)), device->host \([0-9]*\) bytes$/\1 \2 \3 \4 \5/p' "$1")
    [ $# = 5 ] || return 1
    ms=$1 pct=$2 h2d=$3 batch=$4 d2h=$5
}

# check NAME BACKEND MICRO -- TRAIN ARGS...: one run with --profile; a
# step copies the batch in and 4 bytes per micro-batch + 8 out (OpenCL),
# nothing at all (CPU)
check() {
    name=$1 be=$2 micro=$3
    shift 4
    n=$((n + 1))
    if ! "$gf" train "$@" --backend "$be" --profile >"$tmp/out" 2>&1; then
        fail "$name: train failed: $(tail -2 "$tmp/out")"
        return
    fi
    if ! grep -q '^train profile: ' "$tmp/out"; then
        fail "$name: no 'train profile:' line"
        return
    fi
    if ! profile "$tmp/out"; then
        fail "$name: cannot read: $(grep '^train profile: ' "$tmp/out")"
        return
    fi
    if [ "$be" = cpu ]; then
        want_in=0 want_out=0
    else
        want_in=$batch want_out=$((4 * micro + 8))
    fi
    [ "$h2d" = "$want_in" ] || fail "$name: a step copied $h2d bytes in, expected $want_in"
    [ "$d2h" = "$want_out" ] || fail "$name: a step copied $d2h bytes out, expected $want_out"
    ! grep -q 'ran on the CPU' "$tmp/out" || fail "$name: $(grep 'ran on the CPU' "$tmp/out")"
    printf "%-34s %-7s step %8s ms, outside kernels %5s%%, in %6s bytes (batch %6s), out %3s\n" \
        "$name" "$be" "$ms" "$pct" "$h2d" "$batch" "$d2h"
}

L=models/llama_tiny/legacy/model.onnx
LD=models/llama_tiny/train_data
G=models/gpt2_tiny/legacy/model.onnx
GD=models/gpt2_tiny/train_data
backends=cpu
if "$gf" backends | grep -q '^opencl: available'; then
    backends="cpu opencl"
else
    echo "run_train_device: no OpenCL platform: the CPU only"
fi
for be in $backends; do
    check "llama_tiny, fused" "$be" 1 -- $L --data $LD --steps 3 $ADAMW
    check "llama_tiny, 2 micro-batches" "$be" 2 -- $L --data $LD --steps 3 $ADAMW --accumulate 2
    check "llama_tiny unfused, sgd" "$be" 1 -- $L --data $LD --steps 3 --no-fuse \
        --optimizer sgd --lr 0.1 --momentum 0.9 --nesterov
    check "gpt2_tiny (tied), clip, 3 micro" "$be" 3 -- $G --data $GD --steps 3 $ADAMW \
        --clip-grad-norm 0.5 --accumulate 3
done
if [ $fails -ne 0 ]; then
    echo "run_train_device: $fails of $n checks failed"
    exit 1
fi
echo "run_train_device: ok ($n runs)"
