#!/bin/sh
# Real Hugging Face exports (models/hf: 7 architectures x legacy/dynamo x
# with/without labels, made by models/hf_export.py) as a user brings them:
#  1. graphfuse test against PyTorch's outputs, unfused and --fuse, on the
#     CPU and (when an OpenCL platform is present) on OpenCL with no node
#     left to the CPU;
#  2. train --untie all: 5 SGD and 5 AdamW steps on every export with
#     labels, both exporters, fused and unfused, within 1e-5 relative of
#     PyTorch training its real (separate) parameters; the same on each
#     device backend present, OpenCL and CUDA (AdamW, fused and unfused,
#     within 1e-4, no node on the CPU);
#  3. without --untie, train warns about each parameter the exporter merged;
#  4. LinearCrossEntropy fires on every causal-LM export with labels, in
#     optimize --drop-output logits and in train.
# (tests/test_params.c checks the parameter set against initializers.txt and
# that -o leaves every folded constant byte-identical.)
# Usage: tests/run_hf.sh path/to/graphfuse
# RUN_HF_DEVICES="cuda" limits the device backends (default: every one that
# `graphfuse backends` lists as available, of opencl and cuda).
set -u
gf=${1:?usage: run_hf.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
n=0
ARCHS="llama qwen2 mistral gemma phi3 gpt2 bert"
CAUSAL="llama qwen2 mistral gemma phi3 gpt2"
SGD="--optimizer sgd --lr 0.1 --momentum 0.9"
ADAMW="--optimizer adamw --lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01"

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

. "$(dirname "$0")/sanitizer.sh" # gfx: a run, repeated if LeakSanitizer itself fails

devs=""
for b in ${RUN_HF_DEVICES:-opencl cuda}; do
    "$gf" backends 2>/dev/null | grep -q "^$b: available" && devs="$devs $b"
done

# max relative difference of the loss column of LOG against REF (step,loss)
maxrel() {
    awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
             FNR > 1 { if (!($1 in ref)) { print "missing"; exit }
                       d = $2 - ref[$1]; if (d < 0) d = -d
                       r = ref[$1] < 0 ? -ref[$1] : ref[$1]
                       if (d / r > m) m = d / r; k++ }
             END { if (k != 5) print "steps=" k; else printf "%.3g\n", m }' "$2" "$1"
}

within() { # within VALUE TOLERANCE
    awk -v r="$1" -v t="$2" 'BEGIN { exit !(r + 0 == r && r <= t) }'
}

echo "== models/hf: graphfuse test against PyTorch (cpu atol 1e-5, devices atol 1e-4:${devs:- none})"
for a in $ARCHS; do
    for d in models/hf/$a/*/; do
        for b in cpu $devs; do
            atol=1e-5
            [ $b != cpu ] && atol=1e-4
            for f in "" --fuse; do
                n=$((n + 1))
                # shellcheck disable=SC2086
                if ! gfx "$tmp/t" test "$d" --backend $b --atol $atol $f ||
                    ! grep -q '^1 passed' "$tmp/t"; then
                    fail "$d $b $f: $(tail -2 "$tmp/t")"
                elif grep -q 'ran on the CPU' "$tmp/t"; then
                    fail "$d $b $f: $(grep 'ran on the CPU' "$tmp/t")"
                fi
            done
        done
    done
done
echo "models/hf: $n test runs"

echo "== train --untie all: 5 steps against PyTorch (max relative loss difference)"
printf "%-8s %-7s %10s %10s %10s %10s\n" arch export sgd "sgd fused" adamw "adamw fused"
for a in $ARCHS; do
    for e in legacy dynamo; do
        d=models/hf/$a/$e-labels
        line=$(printf "%-8s %-7s" "$a" "$e")
        for o in sgd adamw; do
            hp=$SGD
            [ $o = adamw ] && hp=$ADAMW
            for f in no-fuse fuse; do
                n=$((n + 1))
                # shellcheck disable=SC2086
                if ! "$gf" train "$d/model.onnx" --data "$d" --steps 5 $hp --untie all --$f \
                    --log "$tmp/log.csv" >"$tmp/out" 2>"$tmp/err"; then
                    fail "$a/$e $o --$f: $(cat "$tmp/err")"
                    line="$line $(printf %10s error)"
                    continue
                fi
                r=$(maxrel "$tmp/log.csv" "models/hf/$a/train_$o.csv")
                line="$line $(printf %10s "$r")"
                within "$r" 1e-5 || fail "$a/$e $o --$f: losses differ from PyTorch's by $r"
            done
        done
        echo "$line"
    done
done

for b in $devs; do
    echo "== train --untie all on $b: 5 AdamW steps against PyTorch (tolerance 1e-4)"
    for a in $ARCHS; do
        line=$(printf "%-8s" "$a")
        for e in legacy dynamo; do
            d=models/hf/$a/$e-labels
            for f in no-fuse fuse; do
                n=$((n + 1))
                # shellcheck disable=SC2086
                if ! gfx "$tmp/out" train "$d/model.onnx" --data "$d" --steps 5 $ADAMW --untie all \
                    --$f --backend $b --log "$tmp/log.csv"; then
                    fail "$a/$e $b --$f: $(tail -3 "$tmp/out")"
                    continue
                fi
                grep -q 'ran on the CPU' "$tmp/out" &&
                    fail "$a/$e $b --$f: $(grep 'ran on the CPU' "$tmp/out")"
                r=$(maxrel "$tmp/log.csv" "models/hf/$a/train_adamw.csv")
                line="$line $e --$f $r;"
                within "$r" 1e-4 || fail "$a/$e $b --$f: losses differ by $r"
            done
        done
        echo "$line"
    done
done

echo "== merged parameters: the warning without --untie"
m0=$n
for a in $ARCHS; do
    for e in legacy dynamo; do
        d=models/hf/$a/$e-labels
        # a param row standing for 3+ torch names (a=b=c: equal values merged;
        # two names are the tied embedding and lm head, one parameter in torch)
        merged=$(awk -F'\t' '$4 == "param" && split($5, x, "=") >= 3 { print $1 }' \
            "$d/initializers.txt" | head -1)
        [ -n "$merged" ] || continue
        n=$((n + 1))
        "$gf" train "$d/model.onnx" --list-params >/dev/null 2>&1 ||
            fail "$a/$e: --list-params failed"
        "$gf" train "$d/model.onnx" --data "$d" --steps 1 >"$tmp/out" 2>&1 ||
            fail "$a/$e: train failed: $(tail -1 "$tmp/out")"
        grep -q "warning: '$merged' is read by .* the exporter may have merged" "$tmp/out" ||
            fail "$a/$e: no warning for the merged '$merged'"
    done
done
[ $n -gt $((m0 + 10)) ] || fail "only $((n - m0)) exports with merged parameters found"


echo "== LinearCrossEntropy on every causal-LM export with labels"
for a in $CAUSAL; do
    for e in legacy dynamo; do
        d=models/hf/$a/$e-labels
        n=$((n + 2))
        if ! "$gf" optimize "$d/model.onnx" -o "$tmp/o.onnx" --drop-output logits \
            >"$tmp/out" 2>&1; then
            fail "$a/$e: optimize failed: $(tail -1 "$tmp/out")"
        else
            grep -Eq '^linear_cross_entropy +1$' "$tmp/out" ||
                fail "$a/$e: optimize --drop-output logits: linear_cross_entropy did not fire"
        fi
        "$gf" train "$d/model.onnx" --data "$d" --steps 1 --profile >"$tmp/out" 2>&1 ||
            fail "$a/$e: train --profile failed"
        grep -q '^ *LinearCrossEntropy ' "$tmp/out" ||
            fail "$a/$e: train: no LinearCrossEntropy in the profile"
    done
done

echo "run_hf: $n checks, $fails failed"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
