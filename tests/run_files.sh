#!/bin/sh
# Hostile files (issue 17): every file graphfuse reads is opened without
# blocking and only when it is a regular file; external data never reaches
# outside the model's folder (a hard link, a sparse tensor's '../'); saves
# create their temporary file exclusively with the mode of the file they
# replace and leave none behind on SIGTERM / SIGHUP; the autotune cache
# loads 20,000 entries in linear time and refuses out-of-range integers;
# train --log on a full disk (/dev/full) stops with exit 2.
# Models are crafted here byte by byte (no onnx package needed).
# Usage: tests/run_files.sh build/graphfuse
set -u
gf=${1:?usage: run_files.sh path/to/graphfuse}
. "$(dirname "$0")/cli_checks.sh"
node=/usr/share/libonnx-testdata/data/node
add=$node/test_add
x=$add/test_data_set_0/input_0.pb
y=$add/test_data_set_0/input_1.pb
check() { # check DESCRIPTION COMMAND...: a failure when COMMAND fails
    n=$((n + 1))
    d=$1
    shift
    "$@" || { echo "FAIL $d"; fails=$((fails + 1)); }
}

# ---- protobuf by hand -------------------------------------------------------
oct() { printf '\\%03o' "$1"; }
varint() { # the varint of $1, as printf escapes
    v=$1 s=
    while [ "$v" -ge 128 ]; do s="$s$(oct $((v % 128 + 128)))"; v=$((v / 128)); done
    printf '%s' "$s$(oct "$v")"
}
key() { printf "$(varint $(($1 * 8 + $2)))"; }              # key FIELD WIRETYPE
vint() { key "$1" 0; printf "$(varint "$2")"; }              # vint FIELD N
str() { key "$1" 2; printf "$(varint ${#2})"; printf '%s' "$2"; } # str FIELD TEXT
msg() { # msg FIELD FILE: a length-delimited field holding the file's bytes
    key "$1" 2
    printf "$(varint "$(wc -c <"$2" | tr -d ' ')")"
    cat "$2"
}
# model GRAPHFILE: ir_version 8, opset 17, the graph
model() {
    vint 2 17 >"$tmp/pb.opset"
    vint 1 8; msg 8 "$tmp/pb.opset"; msg 7 "$1"
}
# out_float NAME: a graph output of type float (to $tmp/pb.out)
out_float() {
    vint 1 1 >"$tmp/pb.tt"
    msg 1 "$tmp/pb.tt" >"$tmp/pb.type"
    { str 1 "$1"; msg 2 "$tmp/pb.type"; } >"$tmp/pb.out"
}
# ext_tensor NAME LOCATION N: a float[N] tensor in external data (stdout)
ext_tensor() {
    { str 1 location; str 2 "$2"; } >"$tmp/pb.entry"
    vint 1 "$3"; vint 2 1; str 8 "$1"; msg 13 "$tmp/pb.entry"; vint 14 1
}
# sparse LOCATION: a sparse float[4] with one value in external data
sparse() {
    ext_tensor sp "$1" 1 >"$tmp/pb.values"
    { vint 1 1; vint 2 7; key 9 2; printf "$(varint 8)"; head -c 8 /dev/zero; } >"$tmp/pb.indices"
    msg 1 "$tmp/pb.values"; msg 2 "$tmp/pb.indices"; vint 3 4
}

# ---- FIFOs: every reader says "not a regular file" at once, exit 2 ---------
mkfifo "$tmp/fifo.onnx" "$tmp/fifo.pb" "$tmp/fifo.tokens" "$tmp/fifo.yaml" "$tmp/fifo.csv"
fifo() { # fifo DESCRIPTION FILE COMMAND...: exit 2 in time, message naming FILE
    d=$1 f=$2
    shift 2
    expect 2 "$d" -- timeout 10 "$@" </dev/null && contains "$tmp/err" "$f" "$d names the file" &&
        contains "$tmp/err" "not a regular file" "$d says why"
}
fifo "FIFO model (info)" "$tmp/fifo.onnx" "$gf" info "$tmp/fifo.onnx"
fifo "FIFO model (run)" "$tmp/fifo.onnx" "$gf" run "$tmp/fifo.onnx" --random-inputs
fifo "FIFO model (convert)" "$tmp/fifo.onnx" "$gf" convert "$tmp/fifo.onnx" -o "$tmp/never.onnx"
fifo "FIFO --input .pb" "$tmp/fifo.pb" "$gf" run "$add/model.onnx" --input x="$tmp/fifo.pb" --input y="$y"
fifo "FIFO token file" "$tmp/fifo.tokens" "$gf" train models/llama_tiny/legacy/model.onnx \
    --tokens "$tmp/fifo.tokens" --batch 2 --seq 8 --steps 1
fifo "FIFO train --log" "$tmp/fifo.csv" "$gf" train models/mlp/legacy/model.onnx \
    --data models/mlp/train_data --steps 1 --log "$tmp/fifo.csv"
fifo "FIFO train log to plot" "$tmp/fifo.csv" "$gf" plot "$tmp/fifo.csv" -o "$tmp/never.svg"
# external data that is a FIFO
mkdir "$tmp/fx"
ext_tensor w w.bin 2 >"$tmp/pb.w"
out_float w
{ str 2 g; msg 5 "$tmp/pb.w"; msg 12 "$tmp/pb.out"; } >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/fx/model.onnx"
mkfifo "$tmp/fx/w.bin"
expect 2 "FIFO external data" -- timeout 10 "$gf" info "$tmp/fx/model.onnx" &&
    contains "$tmp/err" "external data 'w.bin' is not a regular file" "FIFO external data message"
# an unusable --tune-cache is a warning naming it (as a directory is), not a hang
expect 0 "FIFO --tune-cache" -- timeout 10 "$gf" tune "$(dirname "$gf")/models/matmul.onnx" \
    --dim M=4 --dim K=4 --dim N=4 --tune-cache "$tmp/fifo.yaml"
contains "$tmp/err" "$tmp/fifo.yaml: not a regular file; autotune cache not used" "FIFO --tune-cache warning"

# ---- external data through a hard link: refused ----------------------------
head -c 8 /dev/zero >"$tmp/outside.bin"
mkdir "$tmp/hl"
cp "$tmp/fx/model.onnx" "$tmp/hl/model.onnx"
head -c 8 /dev/zero >"$tmp/hl/w.bin"
expect 0 "external data of one link loads" -- "$gf" info "$tmp/hl/model.onnx"
rm "$tmp/hl/w.bin"
ln "$tmp/outside.bin" "$tmp/hl/w.bin"
expect 2 "hard-linked external data (initializer)" -- "$gf" info "$tmp/hl/model.onnx" &&
    contains "$tmp/err" "external data 'w.bin' has 2 hard links" "hard link message"
# the same through a Constant's value attribute
ext_tensor c w.bin 2 >"$tmp/pb.c"
{ str 1 value; vint 20 4; msg 5 "$tmp/pb.c"; } >"$tmp/pb.attr"
{ str 2 y; str 4 Constant; msg 5 "$tmp/pb.attr"; } >"$tmp/pb.node"
out_float y
{ msg 1 "$tmp/pb.node"; str 2 g; msg 12 "$tmp/pb.out"; } >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/hl/constant.onnx"
expect 2 "hard-linked external data (Constant value)" -- "$gf" info "$tmp/hl/constant.onnx" &&
    contains "$tmp/err" "external data 'w.bin' has 2 hard links" "Constant hard link message"

# ---- sparse tensors with a '../' location: refused --------------------------
mkdir "$tmp/sp"
sparse ../outside.bin >"$tmp/pb.sparse"
out_float sp
{ str 2 g; msg 12 "$tmp/pb.out"; msg 15 "$tmp/pb.sparse"; } >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/sp/init.onnx"
expect 2 "sparse initializer with '../'" -- "$gf" info "$tmp/sp/init.onnx" &&
    contains "$tmp/err" "external data location '../outside.bin' contains '..'" "sparse initializer message"
{ str 1 sparse_value; vint 20 11; msg 22 "$tmp/pb.sparse"; } >"$tmp/pb.attr"
{ str 2 y; str 4 Constant; msg 5 "$tmp/pb.attr"; } >"$tmp/pb.node"
out_float y
{ msg 1 "$tmp/pb.node"; str 2 g; msg 12 "$tmp/pb.out"; } >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/sp/constant.onnx"
expect 2 "Constant(sparse_value) with '../'" -- "$gf" info "$tmp/sp/constant.onnx" &&
    contains "$tmp/err" "external data location '../outside.bin' contains '..'" "sparse Constant message"
sparse /etc/passwd >"$tmp/pb.sparse"
out_float sp
{ str 2 g; msg 12 "$tmp/pb.out"; msg 15 "$tmp/pb.sparse"; } >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/sp/absolute.onnx"
expect 2 "sparse initializer with an absolute path" -- "$gf" info "$tmp/sp/absolute.onnx" &&
    contains "$tmp/err" "is an absolute path" "sparse absolute message"

# ---- saves: the replaced file's mode; no temporary file after a signal ------
m=models/llama_tiny/legacy/model.onnx
expect 0 "convert to a new file" -- "$gf" convert "$m" -o "$tmp/new.onnx"
check "a new file gets the umask's mode" [ "$(stat -c %a "$tmp/new.onnx")" = "$(printf '%o' $((0666 & ~$(umask))))" ]
: >"$tmp/private.onnx"
chmod 600 "$tmp/private.onnx"
expect 0 "convert over a 0600 file" -- "$gf" convert "$m" -o "$tmp/private.onnx"
check "a 0600 output stays 0600" [ "$(stat -c %a "$tmp/private.onnx")" = 600 ]
expect 0 "convert --external-data over a 0600 file" -- "$gf" convert "$m" -o "$tmp/private.onnx" --external-data
check "the external data file gets the 0600 model's mode" [ "$(stat -c %a "$tmp"/private.onnx.*.data)" = 600 ]
expect 0 "convert --external-data again" -- "$gf" convert "$m" -o "$tmp/private.onnx" --external-data
check "one external data file, still 0600" [ "$(stat -c %a "$tmp"/private.onnx.*.data)" = 600 ]

# a 128 MiB model: an Identity of one float initializer
big=$((32 * 1024 * 1024))
{ vint 1 "$big"; vint 2 1; str 8 w; key 9 2; printf "$(varint $((big * 4)))"; } >"$tmp/pb.head"
{ str 1 w; str 2 y; str 4 Identity; } >"$tmp/pb.node"
out_float y
{
    msg 1 "$tmp/pb.node"; str 2 g
    key 5 2; printf "$(varint $(($(wc -c <"$tmp/pb.head") + big * 4)))"
    cat "$tmp/pb.head"; head -c $((big * 4)) /dev/zero
    msg 12 "$tmp/pb.out"
} >"$tmp/pb.graph"
model "$tmp/pb.graph" >"$tmp/big.onnx"
rm -f "$tmp/pb.graph"
# kill_mid_save SIGNAL: convert gets SIGNAL once its temporary file exists
kill_mid_save() {
    rm -f "$tmp"/out.onnx*
    "$gf" convert "$tmp/big.onnx" -o "$tmp/out.onnx" 2>"$tmp/err" &
    pid=$!
    i=0
    while [ $i -lt 2000 ] && ! ls "$tmp"/out.onnx.tmp.* >/dev/null 2>&1 && kill -0 $pid 2>/dev/null; do
        i=$((i + 1))
        sleep 0.005
    done
    # stopped, the save cannot end between the look and the signal: the
    # signal is pending when the process goes on, mid-save for sure when the
    # temporary file is still there (on a loaded machine a save seen once
    # may have been renamed into place before a plain kill lands)
    seen=no
    kill -STOP $pid 2>/dev/null
    ls "$tmp"/out.onnx.tmp.* >/dev/null 2>&1 && seen=yes
    kill -"$1" $pid 2>/dev/null
    kill -CONT $pid 2>/dev/null
    { wait $pid; } 2>/dev/null
    rc=$?
    if [ $seen = no ]; then
        echo "SKIP SIG$1 mid-save: the save ended before its temporary file was seen"
        return
    fi
    check "SIG$1 mid-save: killed by the signal" [ "$rc" -gt 128 ]
    check "SIG$1 mid-save: no temporary file left" sh -c "! ls '$tmp'/out.onnx.tmp.* >/dev/null 2>&1"
    check "SIG$1 mid-save: no partial output" [ ! -e "$tmp/out.onnx" ]
}
kill_mid_save TERM
# under nohup (SIGHUP ignored, and inherited so) graphfuse keeps ignoring it,
# as programs do: then there is no mid-save SIGHUP to see
ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status 2>/dev/null)
if [ -n "$ign" ] && [ $((0x$ign & 1)) -ne 0 ]; then
    echo "SKIP SIGHUP mid-save: SIGHUP is ignored here (nohup), and so by graphfuse"
else
    kill_mid_save HUP
fi
rm -f "$tmp/big.onnx" "$tmp"/out.onnx*

# ---- train --log on a full disk: stops with the reason, exit 2 --------------
if [ -w /dev/full ]; then
    expect 2 "train --log /dev/full" -- timeout 60 "$gf" train models/llama_tiny/legacy/model.onnx \
        --data models/llama_tiny/train_data --steps 3 --log /dev/full
    contains "$tmp/err" "graphfuse: train: --log /dev/full: write failed: No space left on device" \
        "train --log on a full disk says so"
fi

# ---- the autotune cache ----------------------------------------------------
ver=$("$gf" --version | cut -d' ' -f2)
awk -v v="$ver" 'BEGIN { print "format: 1"; print "entries:"
    for (i = 1; i <= 20000; i++)
        printf "- {device: dev, driver: \x27%s\x27, graphfuse: %s, backend: cpu, op: MatMul, dtype: float, shapes: \x27%dx8,8x8->%dx8\x27, attrs: \x27\x27, impl: plain, config: {tile: 8}}\n", 1, v, i, i }' \
    >"$tmp/many.yaml"
t0=$(date +%s.%N)
expect 0 "a 20,000-entry cache" -- timeout 60 "$gf" tune "$(dirname "$gf")/models/matmul.onnx" \
    --dim M=4 --dim K=4 --dim N=4 --tune-cache "$tmp/many.yaml"
t1=$(date +%s.%N)
secs=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
echo "20,000-entry cache: tune opened it in $secs s"
check "a 20,000-entry cache loads in under 2 s ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s < 2) }'
check "a 20,000-entry cache: no warning" [ ! -s "$tmp/err" ]
printf 'format: 1\nentries:\n- {device: a, driver: b, graphfuse: %s, backend: cpu, op: e, dtype: f, shapes: g, attrs: h, impl: i, config: {tile: 4294967424}}\n' "$ver" >"$tmp/range.yaml"
expect 0 "a knob past int" -- "$gf" tune "$(dirname "$gf")/models/matmul.onnx" \
    --dim M=4 --dim K=4 --dim N=4 --tune-cache "$tmp/range.yaml"
contains "$tmp/err" "$tmp/range.yaml:3: 'tile' is out of range" "a knob past int is refused"

echo "run_files: $n checks, $fails failed"
[ "$fails" = 0 ]
