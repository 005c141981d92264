#!/bin/sh
# `graphfuse tune`: usage errors, the CPU (nothing to tune), and on OpenCL
# (skipped without a platform) a tuned MatMul with GFLOP/s, the cache reused
# and --force, `run` with the cache and with --autotune, every node tune
# tunes in a model found by `run --profile`, a damaged cache
# (warning, replaced, .bak kept), an unwritable cache path (warning, exit
# 0), and two processes tuning into one cache file at once (both entries
# kept).
# Usage: tests/run_tune.sh build/graphfuse
set -u
gf=${1:?usage: run_tune.sh path/to/graphfuse}
model=$(dirname "$gf")/models/matmul.onnx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GRAPHFUSE_CACHE_DIR="$tmp/cl" GRAPHFUSE_TUNE_CACHE="$tmp/default.yaml"
fails=0
n=0

fail() {
    echo "FAIL $1"; sed 's/^/  | /' "$tmp/out" "$tmp/err" | head -12
    fails=$((fails + 1))
}
expect() { # expect CODE DESCRIPTION -- COMMAND...
    code=$1 desc=$2
    shift 3
    n=$((n + 1))
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$code" ] || fail "$desc: exit $got, expected $code"
}
contains() { # contains FILE TEXT DESCRIPTION
    n=$((n + 1))
    grep -qF -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1")"
}
lacks() { # lacks FILE TEXT DESCRIPTION
    n=$((n + 1))
    ! grep -qF -- "$2" "$1" || fail "$3: '$2' in $(basename "$1")"
}

[ -f "$model" ] || { echo "run_tune: $model missing (make builds it)"; exit 1; }
small="--dim M=48 --dim K=40 --dim N=56"

# usage and input errors: one line, exit 2
expect 2 "no model" -- "$gf" tune
expect 2 "unknown option" -- "$gf" tune "$model" --bogus
expect 2 "bad budget" -- "$gf" tune "$model" --tune-budget 0
expect 2 "bad --dim" -- "$gf" tune "$model" --dim M
expect 2 "missing dim" -- "$gf" tune "$model" --backend cpu --dim M=4 --dim K=4
contains "$tmp/err" "give the size of dimension 'N' with --dim N=SIZE" "missing dim"
n=$((n + 1)); [ "$(wc -l <"$tmp/err")" = 1 ] || fail "missing dim: not one line"
expect 2 "no such model" -- "$gf" tune "$tmp/none.onnx" $small

# the CPU has one MatMul kernel without knobs: nothing to tune, no cache written
expect 0 "cpu" -- "$gf" tune "$model" --backend cpu $small
contains "$tmp/out" "nothing to tune" "cpu"
n=$((n + 1)); [ ! -e "$tmp/default.yaml" ] || fail "cpu: a cache was written"

if ! "$gf" backends | grep -q '^opencl: available'; then
    echo "run_tune: $n checks, $fails failed (SKIP: no OpenCL platform for the rest)"
    [ "$fails" = 0 ]
    exit
fi

# tune a MatMul: a choice, GFLOP/s of default and tuned, one entry written
c="$tmp/c.yaml"
tune() { "$gf" tune "$model" --backend opencl --tune-budget 5 --repeats 3 "$@"; }
expect 0 "opencl tune" -- tune $small --tune-cache "$c"
contains "$tmp/out" "tune 1/1 matmul (MatMul 48x40,40x56): tiled" "opencl tune"
contains "$tmp/out" "GFLOP/s def" "opencl tune"
contains "$tmp/out" "5 of 72 configs tried" "opencl tune"
contains "$tmp/out" "cache: $c (1 entry written)" "opencl tune"
contains "$c" "shapes: 48x40,40x56->48x56" "cache file"
contains "$c" "config: {tile_m: " "cache file"
# the default cache path ($GRAPHFUSE_TUNE_CACHE here)
expect 0 "default cache" -- tune $small
contains "$tmp/default.yaml" "impl: tiled" "default cache"

# cached: reused without timing; --force times again
expect 0 "cached" -- tune $small --tune-cache "$c"
contains "$tmp/out" ", cached" "cached"
lacks "$tmp/out" "cache: " "cached (nothing written)"
expect 0 "--force" -- tune $small --tune-cache "$c" --force
lacks "$tmp/out" ", cached" "--force"

# run uses the cache (given, or the default), --autotune tunes what it lacks
run() { "$gf" run "$model" --random-inputs --backend opencl "$@"; }
other="--dim M=8 --dim K=40 --dim N=56"
expect 0 "run with the cache" -- run $small --tune-cache "$c"
contains "$tmp/err" "1 node uses tuned kernels from $c (0 tuned during this run)" "run with the cache"
expect 0 "run, default cache" -- run $small
contains "$tmp/err" "tuned kernels from $tmp/default.yaml" "run, default cache"
expect 0 "run without an entry" -- run $other --tune-cache "$c"
lacks "$tmp/err" "tuned kernels" "run without an entry"
# (on a Relu, all 20 of its configs tried, where a MatMul's would be 64
# of 72 at run's default budget: 64 programs to compile, 90 CPU-seconds on
# PoCL; the MatMul without libonnx-testdata's model)
relu=/usr/share/libonnx-testdata/data/node/test_relu/model.onnx
if [ -f "$relu" ]; then
    expect 0 "run --autotune" -- "$gf" run "$relu" --random-inputs --backend opencl \
        --tune-cache "$c" --autotune
    contains "$c" "shapes: 3x4x5->3x4x5" "run --autotune"
else
    expect 0 "run --autotune" -- run $other --tune-cache "$c" --autotune
    contains "$c" "shapes: 8x40,40x56->8x56" "run --autotune"
fi
contains "$tmp/err" "1 node uses tuned kernels from $c (1 tuned during this run)" "run --autotune"

# tune plans through a session as run does (the same inputs, folding and
# kernels): every node it tunes is one run looks up, and run finds each
# entry.  Llama's shape computations are folded, its Reshapes read shapes
# computed from the inputs; its input_ids [2, 16] are small enough that
# their values key the plan (the same random values for tune and run).
llama=models/llama_tiny/legacy/model.onnx
k="$tmp/llama.yaml"
expect 0 "tune llama" -- "$gf" tune "$llama" --backend opencl --dim batch=2 --dim seq=16 \
    --tune-budget 1 --repeats 1 --tune-cache "$k"
tuned=$(sed -n 's/^tuning \([0-9]*\) nodes .*/\1/p' "$tmp/out")
n=$((n + 1)); [ "${tuned:-0}" -gt 10 ] || fail "tune llama: '$tuned' nodes tuned"
expect 0 "run llama with the cache" -- "$gf" run "$llama" --backend opencl --dim batch=2 \
    --dim seq=16 --random-inputs --tune-cache "$k" --profile
contains "$tmp/out" "autotune: $tuned of $tuned nodes with a choice of kernels run a tuned one ($tuned from the cache $k, 0 tuned now)" "run llama with the cache"
# --input files plan as run's: the same entries, found again
d=models/llama_tiny/legacy/test_data_set_0
expect 0 "tune --input" -- "$gf" tune "$llama" --backend opencl --input input_ids="$d/input_0.pb" \
    --input labels="$d/input_1.pb" --tune-budget 1 --repeats 1 --tune-cache "$tmp/in.yaml"
tuned=$(sed -n 's/^tuning \([0-9]*\) nodes .*/\1/p' "$tmp/out")
expect 0 "run --input with the cache" -- "$gf" run "$llama" --backend opencl \
    --input input_ids="$d/input_0.pb" --input labels="$d/input_1.pb" --tune-cache "$tmp/in.yaml" --profile
contains "$tmp/out" "autotune: $tuned of $tuned nodes with a choice" "run --input with the cache"
expect 2 "tune --input unknown" -- "$gf" tune "$llama" --input nope="$d/input_0.pb"
contains "$tmp/err" "the model has no input named 'nope'" "tune --input unknown"

# a damaged cache: one warning naming file and line, replaced, .bak kept
printf 'format: 1\nentries:\n- device: [unclosed\n' >"$tmp/bad.yaml"
expect 0 "damaged cache" -- tune $small --tune-cache "$tmp/bad.yaml"
contains "$tmp/err" "warning: $tmp/bad.yaml:" "damaged cache"
n=$((n + 1)); [ "$(grep -c warning "$tmp/err")" = 1 ] || fail "damaged cache: not one warning"
contains "$tmp/bad.yaml.bak" "[unclosed" "damaged cache .bak"
expect 0 "replaced cache" -- tune $small --tune-cache "$tmp/bad.yaml"
lacks "$tmp/err" "warning" "replaced cache"
contains "$tmp/out" ", cached" "replaced cache"

# an unwritable cache path: a warning, the table still printed, exit 0
touch "$tmp/file"
expect 0 "unwritable cache" -- tune $small --tune-cache "$tmp/file/autotune.yaml"
contains "$tmp/err" "warning: $tmp/file/autotune.yaml" "unwritable cache"
contains "$tmp/out" "GFLOP/s def" "unwritable cache"

# two processes tuning different shapes into one file at once: both kept
s="$tmp/shared.yaml"
tune --dim M=33 --dim K=40 --dim N=56 --tune-cache "$s" >"$tmp/p1" 2>&1 &
p1=$!
tune --dim M=65 --dim K=40 --dim N=56 --tune-cache "$s" >"$tmp/p2" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
n=$((n + 1))
[ "$r1$r2" = 00 ] || { cat "$tmp/p1" "$tmp/p2"; fail "concurrent: exit $r1 $r2"; }
contains "$s" "shapes: 33x40,40x56->33x56" "concurrent"
contains "$s" "shapes: 65x40,40x56->65x56" "concurrent"
expect 0 "concurrent reread" -- tune --dim M=65 --dim K=40 --dim N=56 --tune-cache "$s"
contains "$tmp/out" ", cached" "concurrent reread"
lacks "$tmp/err" "warning" "concurrent reread"

echo "run_tune: $n checks, $fails failed"
[ "$fails" = 0 ]
