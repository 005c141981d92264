#!/bin/sh
# Runs every libFuzzer harness built in DIR for SECONDS each (make fuzz):
#     tests/fuzz/run.sh DIR SECONDS [GRAPHFUSE]
# Seeds are gathered afresh into DIR/seeds/ (the ONNX test data of Debian's
# libonnx-testdata, tests/bad/, the bundled models, tests/fuzz/seeds/ and,
# where GRAPHFUSE can tune on OpenCL, a cache it writes); what a harness
# finds new stays in DIR/corpus/HARNESS/ for the next run; crash, leak and
# timeout inputs go to DIR/crashes/.  Prints executions and coverage per
# harness; exits 1 when any harness failed.  FUZZ_JOBS harnesses run at once
# (default: the number of cores, at most 2).
set -u
dir=$1
secs=$2
gf=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=/usr/share/libonnx-testdata/data
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -gt 2 ] && [ -z "${FUZZ_JOBS:-}" ] && jobs=2
seeds=$dir/seeds
rm -rf "$seeds" "$dir/logs"
mkdir -p "$seeds/model" "$seeds/tensor" "$seeds/tune_cache" "$dir/corpus" "$dir/crashes" \
    "$dir/logs"

# ---- seeds ------------------------------------------------------------------
# models: every ONNX test model under 1 MiB, the malformed ones, the bundled ones
find "$data" -name model.onnx -size -1024k 2>/dev/null | while read -r f; do
    n=${f#"$data"/}
    cp "$f" "$seeds/model/$(echo "$n" | tr / _)"
done
for f in "$root"/tests/bad/*.onnx "$root"/models/*/*/model.onnx; do
    [ -f "$f" ] && cp "$f" "$seeds/model/$(echo "${f#"$root"/}" | tr / _)"
done
# tensors: the node tests' inputs and outputs under 64 KiB
find "$data/node" -name '*.pb' -size -64k 2>/dev/null | while read -r f; do
    n=${f#"$data"/node/}
    cp "$f" "$seeds/tensor/$(echo "$n" | tr / _)"
done
# autotune caches: the hand-made ones, and one `graphfuse tune` writes on OpenCL
cp "$here"/seeds/tune_cache/* "$seeds/tune_cache/"
if [ -n "$gf" ] && [ -x "$gf" ] && [ -f "$(dirname "$gf")/models/matmul.onnx" ]; then
    timeout 120 "$gf" tune "$(dirname "$gf")/models/matmul.onnx" --backend opencl \
        --dim M=8 --dim K=16 --dim N=8 --tune-budget 2 --repeats 1 \
        --tune-cache "$seeds/tune_cache/tuned.yaml" >/dev/null 2>&1 ||
        rm -f "$seeds/tune_cache/tuned.yaml"
fi
# dictionaries: op names (from graph/ops.def) and the cache's keys
sed -n 's/^GF_OP([A-Z0-9_]*, \("[A-Za-z0-9]*"\).*/\1/p' "$root/graph/ops.def" | sort -u \
    >"$dir/model.dict"
for w in ai.onnx com.microsoft graphfuse axis axes perm shape value epsilon \
    keepdims batch seq; do echo "\"$w\""; done >>"$dir/model.dict"
for w in format entries device driver graphfuse backend op dtype shapes attrs impl \
    impl_backend config default_ms best_ms tried rejected tuned float float16 bfloat16 \
    MatMul Softmax opencl cpu cuda tile_m tile_n tile_k wpt vec "{" "}" "[" "]" ": " \
    "- " "'" '\x0a' "&a" "*a" "!!int" "~"; do
    printf '"%s"\n' "$w"
done >"$dir/yaml.dict"
echo "fuzz: seeds: $(ls "$seeds/model" | wc -l) models, $(ls "$seeds/tensor" | wc -l) tensors," \
     "$(ls "$seeds/tune_cache" | wc -l) autotune caches"

# ---- runs -------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OPENBLAS_NUM_THREADS=1 TMPDIR=${TMPDIR:-/tmp}

one() { # harness
    h=$1
    case $h in
    fuzz_tensor) s=tensor; d=model.dict ;;
    fuzz_tune_cache) s=tune_cache; d=yaml.dict ;;
    *) s=model; d=model.dict ;;
    esac
    mkdir -p "$dir/corpus/$h"
    "$dir/$h" "$dir/corpus/$h" "$seeds/$s" -dict="$dir/$d" -max_total_time="$secs" \
        -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="$dir/crashes/$h-" >"$dir/logs/$h.log" 2>&1
    echo $? >"$dir/logs/$h.rc"
}

harnesses=$(cd "$dir" && ls fuzz_* | grep -v '\.' )
# the inputs fuzzing found before (tests/fuzz/regress/HARNESS-*) first, once each
for f in "$here"/regress/fuzz_*; do
    [ -f "$f" ] || continue
    h=${f##*/}
    h=${h%%-*}
    if ! "$dir/$h" "$f" >"$dir/logs/regress.log" 2>&1; then
        echo "fuzz: $f fails again:"; tail -n 20 "$dir/logs/regress.log"; exit 1
    fi
done
echo "fuzz: $(echo $harnesses | wc -w) harnesses, $secs s each, $jobs at a time" \
     "(logs in $dir/logs, crashes in $dir/crashes)"
running=0
for h in $harnesses; do
    one "$h" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait; running=0; fi
done
wait

failed=0
for h in $harnesses; do
    log=$dir/logs/$h.log
    rc=$(cat "$dir/logs/$h.rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
    printf '%-16s %10s execs  cov %6s  ft %7s  corpus %6s  %s\n' "$h" "${execs:-?}" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}" "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
    if [ "$rc" != 0 ]; then
        failed=1
        grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written|ALARM|out-of-memory' "$log" |
            head -n 8 | sed 's/^/    /'
    fi
done
if [ "$failed" = 1 ]; then
    echo "fuzz: a harness failed: the input is in $dir/crashes/; reproduce it with" \
         "$dir/HARNESS FILE, fix it and add it to tests/bad/ (docs/building.md, \"Fuzzing\")"
    exit 1
fi
echo "fuzz: every harness ran $secs s without a crash, leak or timeout"
