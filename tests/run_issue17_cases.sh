#!/bin/sh
# Issue 17 ("Hardening"), "Must show": every hostile case of the issue re-run
# against a release build and an ASan+UBSan build: the command, its exit
# code on each build, the one-line message and whether the sanitizer build
# printed a report.  Prints a markdown table on stdout.  Not part of
# `make test` (tests/run_bad.sh, run_files.sh, run_cli.sh and the unit tests
# check the same cases there); run from the repository root:
#
#     tests/run_issue17_cases.sh build-rel/graphfuse build-asan/graphfuse
#
# The unit-test rows run BUILD/tests/test_graph, test_autotune and
# test_runtime_bad beside each graphfuse when they are built.  The tiny-tmpfs
# full-disk row needs root (mount); it says SKIP otherwise.
set -u
rel=${1:?usage: run_issue17_cases.sh RELEASE/graphfuse [ASAN/graphfuse]}
asan=${2:-}
root=$(pwd)
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
T=$(mktemp -d "${TMPDIR:-/tmp}/issue17.XXXXXX") || exit 1
cleanup() {
    mountpoint -q "$T/tiny" 2>/dev/null && umount "$T/tiny"
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
ulimit -c 0 2>/dev/null || true
node=/usr/share/libonnx-testdata/data/node/test_add
mlp=models/mlp/legacy/model.onnx
llama=models/llama_tiny/legacy/model.onnx

# ---- protobuf by hand (as tests/run_files.sh) -------------------------------
oct() { printf '\\%03o' "$1"; }
varint() {
    v=$1 s=
    while [ "$v" -ge 128 ]; do s="$s$(oct $((v % 128 + 128)))"; v=$((v / 128)); done
    printf '%s' "$s$(oct "$v")"
}
key() { printf "$(varint $(($1 * 8 + $2)))"; }
vint() { key "$1" 0; printf "$(varint "$2")"; }
str() { key "$1" 2; printf "$(varint ${#2})"; printf '%s' "$2"; }
msg() { key "$1" 2; printf "$(varint "$(wc -c <"$2" | tr -d ' ')")"; cat "$2"; }
model() { vint 2 17 >"$T/pb.opset"; vint 1 8; msg 8 "$T/pb.opset"; msg 7 "$1"; }
out_float() {
    vint 1 1 >"$T/pb.tt"; msg 1 "$T/pb.tt" >"$T/pb.type"
    { str 1 "$1"; msg 2 "$T/pb.type"; } >"$T/pb.out"
}
ext_tensor() {
    { str 1 location; str 2 "$2"; } >"$T/pb.entry"
    vint 1 "$3"; vint 2 1; str 8 "$1"; msg 13 "$T/pb.entry"; vint 14 1
}
sparse() {
    ext_tensor sp "$1" 1 >"$T/pb.values"
    { vint 1 1; vint 2 7; key 9 2; printf "$(varint 8)"; head -c 8 /dev/zero; } >"$T/pb.indices"
    msg 1 "$T/pb.values"; msg 2 "$T/pb.indices"; vint 3 4
}
# constant_of ATTRFILE: a model of one Constant node 'y' with that attribute
constant_of() {
    { str 2 y; str 4 Constant; msg 5 "$1"; } >"$T/pb.node"
    out_float y
    { msg 1 "$T/pb.node"; str 2 g; msg 12 "$T/pb.out"; } >"$T/pb.graph"
    model "$T/pb.graph"
}

# ---- inputs -------------------------------------------------------------------
for f in cos_float_2_62 cos_int64_2_61 cos_double_2_61 range_2_62; do
    mkdir -p "$T/test_$f/test_data_set_0"
    cp "tests/bad/$f.onnx" "$T/test_$f/model.onnx"
done
mkfifo "$T/fifo.onnx" "$T/fifo.pb" "$T/fifo.tokens" "$T/fifo.yaml" "$T/fifo.csv"
# external data that is a FIFO
mkdir "$T/fx"
ext_tensor w w.bin 2 >"$T/pb.w"
out_float w
{ str 2 g; msg 5 "$T/pb.w"; msg 12 "$T/pb.out"; } >"$T/pb.graph"
model "$T/pb.graph" >"$T/fx/model.onnx"
mkfifo "$T/fx/w.bin"
# hard-linked external data: an initializer and a Constant's value
head -c 8 /dev/zero >"$T/outside.bin"
mkdir "$T/hl"
cp "$T/fx/model.onnx" "$T/hl/model.onnx"
ln "$T/outside.bin" "$T/hl/w.bin"
ext_tensor c w.bin 2 >"$T/pb.c"
{ str 1 value; vint 20 4; msg 5 "$T/pb.c"; } >"$T/pb.attr"
constant_of "$T/pb.attr" >"$T/hl/constant.onnx"
# sparse tensors with a '../' location
mkdir "$T/sp"
sparse ../outside.bin >"$T/pb.sparse"
out_float sp
{ str 2 g; msg 12 "$T/pb.out"; msg 15 "$T/pb.sparse"; } >"$T/pb.graph"
model "$T/pb.graph" >"$T/sp/init.onnx"
{ str 1 sparse_value; vint 20 11; msg 22 "$T/pb.sparse"; } >"$T/pb.attr"
constant_of "$T/pb.attr" >"$T/sp/constant.onnx"
# a 128 MiB model (one float initializer through an Identity), for the signals
big=$((32 * 1024 * 1024))
{ vint 1 "$big"; vint 2 1; str 8 w; key 9 2; printf "$(varint $((big * 4)))"; } >"$T/pb.head"
{ str 1 w; str 2 y; str 4 Identity; } >"$T/pb.node"
out_float y
{
    msg 1 "$T/pb.node"; str 2 g
    key 5 2; printf "$(varint $(($(wc -c <"$T/pb.head") + big * 4)))"
    cat "$T/pb.head"; head -c $((big * 4)) /dev/zero
    msg 12 "$T/pb.out"
} >"$T/pb.graph"
model "$T/pb.graph" >"$T/big.onnx"
rm -f "$T/pb.graph"
# autotune caches: 20,000 entries; a knob of 2^32 + 128
ver=$("$rel" --version | cut -d' ' -f2)
awk -v v="$ver" 'BEGIN { print "format: 1"; print "entries:"
    for (i = 1; i <= 20000; i++)
        printf "- {device: dev, driver: \x27%s\x27, graphfuse: %s, backend: cpu, op: MatMul, dtype: float, shapes: \x27%dx8,8x8->%dx8\x27, attrs: \x27\x27, impl: plain, config: {tile: 8}}\n", 1, v, i, i }' \
    >"$T/many.yaml"
printf 'format: 1\nentries:\n- {device: a, driver: b, graphfuse: %s, backend: cpu, op: e, dtype: f, shapes: g, attrs: h, impl: i, config: {tile: 4294967424}}\n' "$ver" >"$T/range.yaml"

# ---- cases that are more than one command: they print one line on stderr ----
# kill_mid_save SIG: convert the 128 MiB model, SIG once its temp file exists
kill_mid_save() {
    rm -f "$T"/out.onnx*
    "$gf" convert "$T/big.onnx" -o "$T/out.onnx" 2>/dev/null &
    pid=$!
    i=0
    while [ $i -lt 4000 ] && ! ls "$T"/out.onnx.tmp.* >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do
        i=$((i + 1)); sleep 0.005
    done
    seen=no
    ls "$T"/out.onnx.tmp.* >/dev/null 2>&1 && seen=yes
    kill -"$1" $pid 2>/dev/null
    { wait $pid; } 2>/dev/null
    rc=$?
    left=$(ls "$T"/out.onnx* 2>/dev/null | wc -l)
    echo "temp file seen before SIG$1: $seen; killed by signal $((rc - 128)); files left: $left" >&2
    return $rc
}
# mode_kept: convert (inline, then --external-data) over a 0600 output
mode_kept() {
    rm -f "$T"/private.onnx*
    : >"$T/private.onnx"
    chmod 600 "$T/private.onnx"
    "$gf" convert "$llama" -o "$T/private.onnx" >/dev/null 2>&1 || return $?
    a=$(stat -c %a "$T/private.onnx")
    "$gf" convert "$llama" -o "$T/private.onnx" --external-data >/dev/null 2>&1 || return $?
    echo "mode after convert: $a; after --external-data: model $(stat -c %a "$T/private.onnx"), data $(stat -c %a "$T"/private.onnx.*.data)" >&2
}
# tiny_disk: train --log into a 8 KiB tmpfs with one 4 KiB page free
tiny_disk() {
    mkdir -p "$T/tiny"
    if ! mount -t tmpfs -o size=8k tmpfs "$T/tiny" 2>/dev/null; then
        echo "SKIP: cannot mount a tmpfs (not root)" >&2
        return 0
    fi
    head -c 4096 /dev/zero >"$T/tiny/filler"
    "$gf" train "$mlp" --data models/mlp/train_data --steps 200 --log "$T/tiny/log.csv" \
        -o "$T/trained.onnx" >/dev/null 2>"$T/tiny.err"
    rc=$?
    echo "$(tail -1 "$T/tiny.err") [log $(wc -c <"$T/tiny/log.csv") bytes, $(($(wc -l <"$T/tiny/log.csv") - 1)) rows; -o written: $([ -e "$T/trained.onnx" ] && echo yes || echo no)]" >&2
    umount "$T/tiny"
    return $rc
}
# many_entries: tune with the 20,000-entry cache, timed
many_entries() {
    t0=$(date +%s.%N)
    "$gf" tune "$(dirname "$gf")/models/matmul.onnx" --dim M=4 --dim K=4 --dim N=4 \
        --tune-cache "$T/many.yaml" >/dev/null 2>"$T/many.err"
    rc=$?
    t1=$(date +%s.%N)
    echo "$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }') s, $(wc -l <"$T/many.err") warning lines" >&2
    return $rc
}
# unit TEST: a cmocka binary beside graphfuse
unit() {
    b=$(dirname "$gf")/tests/$1
    if [ ! -x "$b" ]; then
        echo "SKIP: $b not built" >&2
        return 0
    fi
    (cd "$root" && "$b") >"$T/unit.out" 2>&1
    rc=$?
    cat "$T/unit.out" >>"$T/unit.all"
    echo "$(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$T/unit.out" | tr '\n' ' ')" >&2
    return $rc
}

# ---- the table ----------------------------------------------------------------
echo "| # | issue item | case | command | exit (release) | exit (ASan+UBSan) | sanitizer report | message (release; ASan's when it differs) |"
echo "|---|---|---|---|---|---|---|---|"
k=0
# run_case GF CMD: runs CMD with gf=GF under timeout 20; sets rc, first, san
run_case() {
    gf=$1
    rm -f "$T/out.onnx" "$T"/out.onnx.*
    (eval "$2") </dev/null >"$T/stdout" 2>"$T/stderr"
    rc=$?
    san=no
    grep -q -e AddressSanitizer -e LeakSanitizer -e 'runtime error:' "$T/stderr" "$T/unit.all" 2>/dev/null && san=YES
    : >"$T/unit.all"
    first=$(grep -v '^$' "$T/stderr" | head -1)
    # `test` reports a folder's failure on stdout (FAIL DIR: reason), exit 1
    [ -z "$first" ] && first="stdout: $(grep -m1 '^FAIL' "$T/stdout")"
    lines=$(grep -c . "$T/stderr")
    [ "$lines" -gt 1 ] && first="$first (+$((lines - 1)) more lines)"
    [ -e "$T/out.onnx" ] && first="$first [out.onnx WRITTEN]"
    ls "$T"/out.onnx.tmp.* >/dev/null 2>&1 && first="$first [TEMP FILE LEFT]"
}
case_() { # case_ ITEM DESCRIPTION COMMAND ($gf, $T: the build, the scratch folder)
    k=$((k + 1))
    run_case "$rel" "$3"
    r_rc=$rc r_first=$first
    a_rc=- a_san=-
    if [ -n "$asan" ]; then
        run_case "$asan" "$3"
        a_rc=$rc a_san=$san a_first=$first
        [ "$a_first" != "$r_first" ] && r_first="$r_first; ASan: $a_first"
    fi
    shown=$(printf '%s' "$3" | sed 's/|/\\|/g')
    msgt=$(printf '%s' "$r_first" | sed "s|$T|\$T|g; s/|/\\\\|/g")
    echo "| $k | $1 | $2 | \`$shown\` | $r_rc | $a_rc | $a_san | $msgt |"
}
t20="timeout 20"

for f in cos_float_2_62 cos_int64_2_61 cos_double_2_61 range_2_62; do
    case_ 1 "$f: run" "$t20 \"\$gf\" run tests/bad/$f.onnx --random-inputs"
    case_ 1 "$f: test" "$t20 \"\$gf\" test \$T/test_$f"
    case_ 1 "$f: train" "$t20 \"\$gf\" train tests/bad/$f.onnx --data models/mlp/train_data --steps 1 -o \$T/out.onnx"
    case_ 1 "$f: optimize" "$t20 \"\$gf\" optimize tests/bad/$f.onnx -o \$T/out.onnx"
done
for f in expand_2_62 tile_2_62 pad_2_62 cos_elements; do
    case_ 1 "$f: run" "$t20 \"\$gf\" run tests/bad/$f.onnx --random-inputs"
    case_ 1 "$f: optimize" "$t20 \"\$gf\" optimize tests/bad/$f.onnx -o \$T/out.onnx"
done

case_ 2 "hard-linked external data (initializer)" "$t20 \"\$gf\" run \$T/hl/model.onnx"
case_ 2 "hard-linked external data (Constant value)" "$t20 \"\$gf\" run \$T/hl/constant.onnx"
case_ 2 "sparse initializer, location ../" "$t20 \"\$gf\" run \$T/sp/init.onnx"
case_ 2 "Constant(sparse_value), location ../" "$t20 \"\$gf\" run \$T/sp/constant.onnx"

case_ 3 "FIFO as the model" "$t20 \"\$gf\" run \$T/fifo.onnx --random-inputs"
case_ 3 "FIFO as external data" "$t20 \"\$gf\" run \$T/fx/model.onnx"
case_ 3 "FIFO as --input .pb" "$t20 \"\$gf\" run $node/model.onnx --input x=\$T/fifo.pb --input y=$node/test_data_set_0/input_1.pb"
case_ 3 "FIFO as --tune-cache (a warning, as a folder gets)" "$t20 \"\$gf\" tune \$(dirname \"\$gf\")/models/matmul.onnx --dim M=4 --dim K=4 --dim N=4 --tune-cache \$T/fifo.yaml"
case_ 3 "FIFO as a token file" "$t20 \"\$gf\" train $llama --tokens \$T/fifo.tokens --batch 2 --seq 8 --steps 1"
case_ 3 "FIFO as train --log (leftover)" "$t20 \"\$gf\" train $mlp --data models/mlp/train_data --steps 1 --log \$T/fifo.csv"

case_ 4 "crash between data and model rename (test_external_data_pair)" "unit test_graph"
case_ 4 "SIGTERM during convert" "kill_mid_save TERM"
case_ 4 "SIGHUP during convert" "kill_mid_save HUP"
case_ 4 "a 0600 output keeps its mode" "mode_kept"
case_ 4 "train --log /dev/full" "$t20 \"\$gf\" train $mlp --data models/mlp/train_data --steps 200 --log /dev/full -o \$T/out.onnx"
case_ 4 "train --log on a full 8 KiB tmpfs (fails mid-run)" "tiny_disk"

case_ 5 "planted symlink cache.yaml.tmp.<pid> (test_planted_temp)" "unit test_autotune"
case_ 5 "20,000-entry cache load (time)" "many_entries"

for v in 1e30 inf 0.5 0 nan; do
    case_ 6 "--max-memory $v" "$t20 \"\$gf\" run $mlp --random-inputs --max-memory $v"
done
case_ 6 "YAML knob 4294967424" "$t20 \"\$gf\" tune \$(dirname \"\$gf\")/models/matmul.onnx --dim M=4 --dim K=4 --dim N=4 --tune-cache \$T/range.yaml"
case_ 6 "Scan with more scan inputs than inputs: info" "$t20 \"\$gf\" info tests/bad/scan_too_many.onnx"
case_ 6 "Scan with more scan inputs than inputs: run" "$t20 \"\$gf\" run tests/bad/scan_too_many.onnx --random-inputs"
case_ 6 "division by zero in a shape computation: info" "$t20 \"\$gf\" info tests/bad/shape_div_zero.onnx"
case_ 6 "division by zero in a shape computation: run" "$t20 \"\$gf\" run tests/bad/shape_div_zero.onnx --random-inputs"
case_ 6 "gf_tensor_get_i64(NaN), gf_tensor_allclose on empty strings (hostile_values)" "unit test_runtime_bad"
case_ "leftover" "--dim batch=2^62" "$t20 \"\$gf\" run $llama --random-inputs --dim batch=4611686018427387904 --dim seq=2"
