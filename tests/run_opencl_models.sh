#!/bin/sh
# The bundled models on OpenCL against the CPU (issue 6): each model and
# export, fused and unfused, passes its test data sets on OpenCL within 1e-4,
# and 20 AdamW training steps on OpenCL log the same losses as on the CPU
# within 1e-6 relative (training stays on the device: the optimizer runs
# there as on the CPU), with no node left to the CPU.  Skipped (exit 0)
# without an OpenCL platform.
# Usage: tests/run_opencl_models.sh path/to/graphfuse
set -u
gf=${1:?usage: run_opencl_models.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
n=0
TOL=1e-4
TRAIN_TOL=1e-6
ADAMW="--optimizer adamw --lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01"

. "$(dirname "$0")/sanitizer.sh" # gfx: a run, repeated if LeakSanitizer itself fails

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

if ! "$gf" backends | grep -q '^opencl: available'; then
    echo "run_opencl_models: SKIP: no OpenCL platform"
    exit 0
fi

# max relative difference of the loss columns of two logs (step,loss,...)
maxrel() {
    awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
             FNR > 1 { if (!($1 in ref)) { print "missing"; exit }
                       d = $2 - ref[$1]; if (d < 0) d = -d
                       r = ref[$1] < 0 ? -ref[$1] : ref[$1]
                       if (d / r > m) m = d / r; k++ }
             END { if (k != 20) print "steps=" k; else printf "%.3g\n", m }' "$2" "$1"
}

# no "note: N nodes ran on the CPU" in FILE
all_on_device() {
    ! grep -q 'ran on the CPU' "$1"
}

printf "%-11s %-7s %-8s %-12s %s\n" model export fusion "test" "train (max rel. loss diff)"
for m in mlp llama_tiny gpt2_tiny; do
    for e in legacy dynamo; do
        extra=""
        [ "$m/$e" = llama_tiny/dynamo ] && extra="--freeze ^expand\$"
        for f in no-fuse fuse; do
            n=$((n + 1))
            tf=""
            [ $f = fuse ] && tf=--fuse
            # shellcheck disable=SC2086
            if gfx "$tmp/t" test "models/$m/$e" --backend opencl --atol $TOL $tf &&
                grep -q '^1 passed' "$tmp/t"; then
                tres=pass
                all_on_device "$tmp/t" || fail "$m/$e --$f: test: $(grep 'ran on the CPU' "$tmp/t")"
            else
                tres=FAIL
                fail "$m/$e --$f: test: $(tail -3 "$tmp/t")"
            fi
            for b in cpu opencl; do
                # shellcheck disable=SC2086
                gfx "$tmp/$b.out" train "models/$m/$e/model.onnx" --data "models/$m/train_data" \
                    --steps 20 $ADAMW $extra --$f --backend $b --log "$tmp/$b.csv" ||
                    fail "$m/$e --$f: train on $b failed: $(tail -2 "$tmp/$b.out")"
            done
            grep -q '^backend: opencl on ' "$tmp/opencl.out" ||
                fail "$m/$e --$f: train does not name the OpenCL backend"
            all_on_device "$tmp/opencl.out" ||
                fail "$m/$e --$f: train: $(grep 'ran on the CPU' "$tmp/opencl.out")"
            r=$(maxrel "$tmp/opencl.csv" "$tmp/cpu.csv")
            awk -v r="$r" -v t="$TRAIN_TOL" 'BEGIN { exit !(r + 0 == r && r <= t) }' ||
                fail "$m/$e --$f: OpenCL losses differ from the CPU's by $r (relative)"
            printf "%-11s %-7s %-8s %-12s %s\n" "$m" "$e" "$f" "$tres" "$r"
        done
    done
done
if [ $fails -ne 0 ]; then
    echo "run_opencl_models: $fails of $n checks failed"
    exit 1
fi
echo "run_opencl_models: ok ($n model/export/fusion runs)"
