#!/bin/sh
# graphfuse train against PyTorch, and the train command's behaviour.
#
# 1. Each bundled model (mlp, llama_tiny, gpt2_tiny; legacy and dynamo
#    exports) trains 20 steps with SGD and with AdamW, hyper-parameters of
#    models/export.py, on models/<m>/train_data; every logged loss must be
#    within 1e-4 relative of PyTorch's (models/<m>/train_<opt>.csv).
# 2. Checkpoint + resume continues bit for bit; bad options and files give
#    one message, exit 2 and no output file; a NaN names its op (exit 1);
#    --tokens, --accumulate and the progress-free log.
# Usage: tests/run_train.sh path/to/graphfuse
set -u
gf=${1:?usage: run_train.sh path/to/graphfuse}
. "$(dirname "$0")/cli_checks.sh"
TOL=1e-4

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

# max relative difference of the loss column of LOG against REF (step,loss)
maxrel() {
    awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
             FNR > 1 { d = $2 - ref[$1]; if (d < 0) d = -d
                       r = ref[$1] < 0 ? -ref[$1] : ref[$1]
                       if (!($1 in ref)) { print "missing"; exit }
                       if (d / r > m) m = d / r; k++ }
             END { if (k != 20) print "steps=" k; else printf "%.3g\n", m }' "$2" "$1"
}

SGD="--optimizer sgd --lr 0.1 --momentum 0.9"
ADAMW="--optimizer adamw --lr 0.001 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01"

echo "== train: 20 steps against PyTorch (max relative loss difference, tolerance $TOL)"
printf "%-11s %-7s %11s %11s %11s %11s\n" model export "sgd" "adamw" "sgd fused" "adamw fused"
for m in mlp llama_tiny gpt2_tiny; do
    for e in legacy dynamo; do
        extra=""
        # dynamo stores llama's RoPE inv_freq buffer as an initializer
        # ("expand"); the file does not say it is a buffer, so freeze it
        [ "$m/$e" = llama_tiny/dynamo ] && extra="--freeze ^expand\$"
        line=$(printf "%-11s %-7s" "$m" "$e")
        for f in no-fuse fuse; do
            for o in sgd adamw; do
                n=$((n + 1))
                hp=$SGD
                [ $o = adamw ] && hp=$ADAMW
                log=$tmp/$m.$e.$o.$f.csv
                # shellcheck disable=SC2086
                if ! "$gf" train "models/$m/$e/model.onnx" --data "models/$m/train_data" \
                    --steps 20 $hp $extra --$f --log "$log" >"$tmp/out" 2>"$tmp/err"; then
                    fail "$m/$e $o --$f: train failed: $(cat "$tmp/err")"
                    line="$line $(printf %11s error)"
                    continue
                fi
                grep -q "^fuse: left out" "$tmp/out" && line="$line (unfused)"
                r=$(maxrel "$log" "models/$m/train_$o.csv")
                line="$line $(printf %11s "$r")"
                awk -v r="$r" -v t="$TOL" 'BEGIN { exit !(r + 0 == r && r <= t) }' ||
                    fail "$m/$e $o --$f: losses differ from PyTorch's by $r (relative)"
            done
        done
        echo "$line"
    done
done

# fused and unfused AdamW agree within 1e-5 relative at every step
echo "== train --fuse against --no-fuse (AdamW, 20 steps, max relative difference)"
for m in mlp llama_tiny gpt2_tiny; do
    for e in legacy dynamo; do
        n=$((n + 1))
        r=$(awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
                     FNR > 1 { d = ($2 - ref[$1]) / ref[$1]; if (d < 0) d = -d; if (d > m) m = d }
                     END { printf "%.3g", m }' "$tmp/$m.$e.adamw.no-fuse.csv" \
                     "$tmp/$m.$e.adamw.fuse.csv")
        printf "%-11s %-7s %s\n" "$m" "$e" "$r"
        awk -v r="$r" 'BEGIN { exit !(r <= 1e-5) }' ||
            fail "$m/$e: fused and unfused losses differ by $r"
    done
done

M=models/mlp/legacy/model.onnx
D=models/mlp/train_data

one_line() {
    n=$((n + 1))
    [ "$(wc -l <"$tmp/err")" = 1 ] || fail "$1: message is not one line"
}
no_file() {
    n=$((n + 1))
    [ ! -e "$2" ] || fail "$1: left $2 behind"
}

echo "== train: checkpoints, logs, bad input"
# the log: exact header, one row per step, loss before the update
expect 0 "log" -- "$gf" train $M --data $D --steps 3 $ADAMW --log "$tmp/l.csv" -o "$tmp/l.onnx"
n=$((n + 1))
[ "$(head -1 "$tmp/l.csv")" = "step,loss,grad_norm,lr,ms,tokens_per_s" ] || fail "log header"
n=$((n + 1))
[ "$(wc -l <"$tmp/l.csv")" = 4 ] || fail "log rows"
contains "$tmp/out" "wrote $tmp/l.onnx" "-o reported"
expect 0 "trained model runs" -- "$gf" run "$tmp/l.onnx" --input x=$D/test_data_set_0/input_0.pb \
    --input labels=$D/test_data_set_0/input_1.pb
contains "$tmp/out" "loss" "trained model has its outputs"

# 6 steps straight, or 3 + checkpoint + resume: identical rows and weights
# (warmup, clipping; a constant schedule, as the first half runs --steps 3)
R="$ADAMW --warmup 2 --clip-grad-norm 0.5"
expect 0 "straight" -- "$gf" train $M --data $D --steps 6 $R --log "$tmp/a.csv" -o "$tmp/a.onnx"
expect 0 "first half" -- "$gf" train $M --data $D --steps 3 $R --checkpoint-every 3 \
    --checkpoint "$tmp/c.onnx"
expect 0 "resume" -- "$gf" train $M --data $D --steps 6 $R --resume "$tmp/c.onnx" \
    --log "$tmp/b.csv" -o "$tmp/b.onnx"
contains "$tmp/out" "resumed: $tmp/c.onnx at step 3" "resume reported"
n=$((n + 1))
cut -d, -f1-4 "$tmp/a.csv" | sed -n '5,7p' >"$tmp/a.tail"
cut -d, -f1-4 "$tmp/b.csv" | sed -n '2,4p' >"$tmp/b.tail"
[ -s "$tmp/b.tail" ] && cmp -s "$tmp/a.tail" "$tmp/b.tail" ||
    fail "resumed losses differ from the straight run"
n=$((n + 1))
cmp -s "$tmp/a.onnx" "$tmp/b.onnx" || fail "resumed weights differ from the straight run"
# the default checkpoint name comes from -o
expect 0 "checkpoint beside -o" -- "$gf" train $M --data $D --steps 2 $R --checkpoint-every 1 \
    -o "$tmp/d.onnx"
n=$((n + 1))
[ -f "$tmp/d.ckpt.onnx" ] || fail "no checkpoint d.ckpt.onnx beside d.onnx"
expect 2 "resume with another optimizer" -- "$gf" train $M --data $D --steps 6 $SGD \
    --resume "$tmp/c.onnx"
contains "$tmp/err" "written by adamw" "optimizer mismatch message"; one_line "optimizer mismatch"

# bad options and files: one line, exit 2, no output file
for args in "--lr abc" "--optimizer adam" "--schedule linear" "--steps -1" "--accumulate 0" \
    "--freeze (" "--token-bytes 2" "--bogus"; do
    # shellcheck disable=SC2086
    expect 2 "bad option $args" -- "$gf" train $M --data $D $args -o "$tmp/x.onnx" \
        --log "$tmp/x.csv"
    one_line "bad option $args"
    no_file "bad option $args" "$tmp/x.onnx"
    no_file "bad option $args" "$tmp/x.csv"
done
expect 2 "no data" -- "$gf" train $M --steps 1
one_line "no data"
expect 2 "missing data folder" -- "$gf" train $M --data "$tmp/none" -o "$tmp/x.onnx" \
    --log "$tmp/x.csv"
contains "$tmp/err" "$tmp/none" "missing folder named"; one_line "missing data folder"
no_file "missing data folder" "$tmp/x.csv"
mkdir "$tmp/empty"
expect 2 "empty data folder" -- "$gf" train $M --data "$tmp/empty"
contains "$tmp/err" "no input_*.pb" "empty folder message"
expect 2 "wrong data" -- "$gf" train $M --data models/llama_tiny/train_data -o "$tmp/x.onnx" \
    --log "$tmp/x.csv"
one_line "wrong data"; no_file "wrong data" "$tmp/x.csv"
expect 2 "unwritable log folder" -- "$gf" train $M --data $D --log "$tmp/no/dir/x.csv"
one_line "unwritable log folder"
expect 2 "missing model" -- "$gf" train "$tmp/none.onnx" --data $D
expect 2 "bad checkpoint" -- "$gf" train $M --data $D --resume $M
contains "$tmp/err" "not a graphfuse checkpoint" "bad checkpoint message"
expect 2 "unknown loss" -- "$gf" train $M --data $D --loss nope
contains "$tmp/err" "'nope'" "unknown loss named"

# NaN / Inf: training stops, names the node and op, exit 1, no model written
expect 1 "divergence" -- "$gf" train $M --data $D --steps 5 --optimizer sgd --lr 1e30 \
    -o "$tmp/nan.onnx"
contains "$tmp/err" "is not finite" "divergence message"
contains "$tmp/err" "produced" "divergence names the node"
one_line "divergence"; no_file "divergence" "$tmp/nan.onnx"

# --tokens: uint16 ids, width from the vocabulary (64), windows of the file
printf '\001\000\007\000\010\000\002\000\011\000\012\000\013\000\002\000' >"$tmp/t8.u16"
for i in 1 2 3 4 5 6 7; do cat "$tmp/t8.u16"; done >"$tmp/t.u16"
L=models/llama_tiny/dynamo/model.onnx
expect 0 "tokens" -- "$gf" train $L --tokens "$tmp/t.u16" --batch 2 --seq 8 --steps 3 --seed 5 \
    --optimizer adamw --lr 0.01 --freeze '^expand$' --log "$tmp/t.csv"
contains "$tmp/out" "uint16, from the vocabulary size 64" "token width inferred"
expect 0 "tokens, same seed" -- "$gf" train $L --tokens "$tmp/t.u16" --batch 2 --seq 8 --steps 3 \
    --seed 5 --optimizer adamw --lr 0.01 --freeze '^expand$' --log "$tmp/t2.csv"
n=$((n + 1))
[ "$(cut -d, -f2 "$tmp/t.csv")" = "$(cut -d, -f2 "$tmp/t2.csv")" ] || fail "same seed, other losses"
printf '\001\000\100\000' >"$tmp/bad.u16"
expect 2 "token out of range" -- "$gf" train $L --tokens "$tmp/bad.u16" --batch 1 --seq 2
contains "$tmp/err" "token 64 at index 1" "out-of-range token named"
expect 2 "odd token file" -- "$gf" train $L --tokens "$tmp/t8.u16" --token-bytes 4 --batch 1 \
    --seq 3
expect 2 "tokens need --batch" -- "$gf" train $L --tokens "$tmp/t.u16"
expect 2 "missing token file" -- "$gf" train $M --tokens "$tmp/none.u16" --batch 1 --seq 2
contains "$tmp/err" "none.u16: cannot open" "missing token file named"

# --accumulate 2 on batches 0,1: the mean of their losses at step 0
expect 0 "accumulate" -- "$gf" train $M --data $D --steps 1 --accumulate 2 $SGD --log "$tmp/acc.csv"
acc=$(sed -n 2p "$tmp/acc.csv" | cut -d, -f2)
expect 0 "batch 1 alone" -- "$gf" train $M --data $D/test_data_set_1 --steps 1 $SGD \
    --log "$tmp/b1only.csv"
b1=$(sed -n 2p "$tmp/b1only.csv" | cut -d, -f2)
n=$((n + 1))
awk -v g="$acc" -v a=2.31985497 -v b="$b1" \
    'BEGIN { w = (a + b) / 2; d = g - w; if (d < 0) d = -d; exit !(d <= 1e-6 * w) }' ||
    fail "accumulated loss $acc is not the mean of 2.31985497 and $b1"

# On a terminal the progress bar shows the time so far and the time left
# (script(1) gives train a terminal; util-linux, on every Debian)
if command -v script >/dev/null 2>&1; then
    n=$((n + 1))
    script -qec "$gf train $M --data $D --steps 3 $SGD" /dev/null >"$tmp/tty" 2>&1 </dev/null
    tr '\r' '\n' <"$tmp/tty" | grep -q '3/3 loss .* elapsed, ETA 0:00' ||
        fail "the progress bar has no elapsed time and ETA: $(tr '\r' '\n' <"$tmp/tty" | tail -2)"
fi

# --plot / `graphfuse plot`: the loss curve drawn by gnuplot (make test's
# dependencies install it): a PNG (or SVG) written whole, the temporary
# log of --plot without --log removed; a file that is not a train log and
# a missing -o are refused by name
png_magic() { [ "$(od -An -tx1 -N4 "$1" 2>/dev/null | tr -d ' \n')" = 89504e47 ]; }
if command -v gnuplot >/dev/null 2>&1; then
    ls /tmp/graphfuse-plot-* >"$tmp/plots_before" 2>/dev/null
    expect 0 "train --plot" -- "$gf" train $M --data $D --steps 4 $SGD --plot "$tmp/loss.png" &&
        { n=$((n + 1)); png_magic "$tmp/loss.png" || fail "train --plot: not a PNG"; }
    ls /tmp/graphfuse-plot-* >"$tmp/plots_after" 2>/dev/null
    n=$((n + 1))
    cmp -s "$tmp/plots_before" "$tmp/plots_after" || fail "train --plot left its temporary log"
    expect 0 "train --log --plot" -- "$gf" train $M --data $D --steps 4 $SGD --log "$tmp/p.csv" --plot="$tmp/loss2.png"
    expect 0 "plot a log" -- "$gf" plot "$tmp/p.csv" -o "$tmp/p.png" --title "mlp" &&
        { n=$((n + 1)); png_magic "$tmp/p.png" || fail "plot: not a PNG"; }
    expect 0 "plot to SVG" -- "$gf" plot "$tmp/p.csv" --output="$tmp/p.svg" &&
        { n=$((n + 1)); grep -q "<svg" "$tmp/p.svg" || fail "plot: not an SVG"; }
else
    expect 0 "train --log" -- "$gf" train $M --data $D --steps 4 $SGD --log "$tmp/p.csv"
    expect 3 "plot without gnuplot" -- "$gf" plot "$tmp/p.csv" -o "$tmp/p.png" &&
        { n=$((n + 1)); grep -q "gnuplot is not installed" "$tmp/err" || fail "no-gnuplot message"; }
fi
expect 2 "plot of a non-log" -- "$gf" plot "$M" -o "$tmp/x.png" &&
    { n=$((n + 1)); grep -q "not a train log" "$tmp/err" || fail "plot of a non-log: message"; }
n=$((n + 1)); [ ! -e "$tmp/x.png" ] || fail "plot of a non-log wrote a file"
expect 2 "plot without -o" -- "$gf" plot "$tmp/p.csv"

echo "run_train: $((n - fails)) of $n checks passed"
[ "$fails" = 0 ]
