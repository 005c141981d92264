#!/bin/sh
# graphfuse train stopped by a signal, then resumed.
#
# 1. A long AdamW run of llama_tiny in the background gets SIGINT once its
#    log has a few rows: it must finish the step, write the checkpoint and
#    -o (both load with `graphfuse info`), keep every log row (0 .. N-1,
#    flushed as they were written), say where it stopped, and exit 130;
#    the checkpoint holds step N.
# 2. --resume of that checkpoint with the same --log appends rows N ..
#    (no second header, none lost or repeated).
# 3. SIGTERM does the same without --checkpoint: -o and --save-safetensors.
# Usage: tests/run_train_signal.sh path/to/graphfuse
set -u
gf=${1:?usage: run_train_signal.sh path/to/graphfuse}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
M=models/llama_tiny/legacy/model.onnx
D=models/llama_tiny/train_data
HEADER=step,loss,grad_norm,lr,ms,tokens_per_s
TIMEOUT=60 # seconds for any one wait (a loaded machine is slow, not stuck)

pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # check DESCRIPTION COMMAND...: PASS when COMMAND succeeds
    desc=$1
    shift
    if "$@"; then pass "$desc"; else fail "$desc"; fi
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds
wait_for() {
    limit=$(($1 * 10))
    shift
    i=0
    while ! "$@"; do
        i=$((i + 1))
        [ $i -ge $limit ] && return 1
        sleep 0.1
    done
    return 0
}
log_rows_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -gt "$2" ]; }
gone() { ! kill -0 "$1" 2>/dev/null; }
loads() { "$gf" info "$1" >/dev/null 2>&1; }

# log_ok FILE LAST: the header once, then rows 0..LAST in order, six numbers each
log_ok() {
    awk -F, -v last="$2" -v h="$HEADER" '
        NR == 1 { if ($0 != h) { print "line 1 is not the header: " $0; bad = 1 }; next }
        { if (NF != 6 || $1 != NR - 2) { print "line " NR ": " $0; bad = 1; exit }
          for (k = 2; k <= 6; k++)
              if ($k !~ /^-?[0-9.]+(e[-+][0-9]+)?$/ && $k !~ /^(-?inf|nan)$/) {
                  print "line " NR " field " k ": " $k; bad = 1; exit } }
        END { if (!bad && NR - 2 != last) { print "last row " NR - 2 ", expected " last; bad = 1 }
              exit bad }' "$1" >"$tmp/why"
}
show_why() { sed 's/^/  | /' "$tmp/why" | head -5; }

# run_and_signal SIGNAL ROWS ARGS...: train in the background, SIGNAL once
# the log (the --log argument given in ARGS) has ROWS rows; sets rc
run_and_signal() {
    sig=$1 rows=$2 log=$3
    shift 3
    "$gf" train $M --data $D --steps 100000 --optimizer adamw --threads 1 --log "$log" "$@" \
        >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    if ! wait_for $TIMEOUT log_rows_at_least "$log" "$rows"; then
        fail "no $rows log rows within ${TIMEOUT}s: $(head -2 "$tmp/err")"
        kill -KILL "$pid" 2>/dev/null
    else
        kill -"$sig" "$pid"
    fi
    if ! wait_for $TIMEOUT gone "$pid"; then
        fail "train did not stop within ${TIMEOUT}s of SIG$sig"
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid"
    rc=$?
    pid=
}

echo "== train: SIGINT saves the checkpoint, -o and the log, exit 130"
run_and_signal INT 3 "$tmp/log.csv" --checkpoint "$tmp/ckpt.onnx" -o "$tmp/out.onnx"
check "SIGINT: exit 130 (got $rc)" [ "$rc" = 130 ]
line=$(grep '^train: interrupted by SIGINT at step' "$tmp/out")
check "SIGINT: one line says where it stopped and what was saved" \
    sh -c '[ -n "$1" ] && echo "$1" | grep -q "saved checkpoint $2, model $3"' - "$line" \
    "$tmp/ckpt.onnx" "$tmp/out.onnx"
steps=$(echo "$line" | sed -n 's/.* at step \([0-9]*\) of .*/\1/p')
steps=${steps:-0}
check "SIGINT: no error message" [ ! -s "$tmp/err" ]
check "SIGINT: checkpoint loads" loads "$tmp/ckpt.onnx"
check "SIGINT: -o loads" loads "$tmp/out.onnx"
check "SIGINT: no temporary files left" [ "$(ls "$tmp" | grep -c '\.tmp')" = 0 ]
if log_ok "$tmp/log.csv" $((steps - 1)); then
    pass "SIGINT: log rows 0..$((steps - 1)) all there ($steps steps)"
else
    fail "SIGINT: log rows"; show_why
fi

echo "== train --resume: the same log goes on"
more=$((steps + 3))
"$gf" train $M --data $D --steps $more --optimizer adamw --threads 1 --resume "$tmp/ckpt.onnx" \
    --log "$tmp/log.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "resume: exit 0 (got $rc)" [ "$rc" = 0 ]
check "resume: checkpoint holds step $steps, the last log row + 1" \
    grep -q "^resumed: $tmp/ckpt.onnx at step $steps\$" "$tmp/out"
if log_ok "$tmp/log.csv" $((more - 1)); then
    pass "resume: rows appended up to $((more - 1)), one header, none lost or repeated"
else
    fail "resume: appended log"; show_why
fi

echo "== train: SIGTERM with -o and --save-safetensors"
run_and_signal TERM 2 "$tmp/log2.csv" -o "$tmp/out2.onnx" --save-safetensors "$tmp/out2.st"
check "SIGTERM: exit 130 (got $rc)" [ "$rc" = 130 ]
check "SIGTERM: says so" grep -q \
    "^train: interrupted by SIGTERM at step .*: saved model $tmp/out2.onnx, safetensors" "$tmp/out"
check "SIGTERM: the safetensors file is written" [ -s "$tmp/out2.st" ]
check "SIGTERM: -o loads" loads "$tmp/out2.onnx"
n=$(($(wc -l <"$tmp/log2.csv") - 2))
if log_ok "$tmp/log2.csv" $n; then pass "SIGTERM: log complete"; else fail "SIGTERM: log"; show_why; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
