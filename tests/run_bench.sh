#!/bin/sh
# bench and compare on the bundled models: bench's table and every
# statistic, --json (valid JSON with every key), --iterations and
# --duration, --help, bad values (exit 2 naming the option); compare of
# cpu vs cpu, fused vs unfused, against the recorded test data, and a
# tolerance of zero that must fail (exit 1, the worst difference printed).
# Usage: tests/run_bench.sh GRAPHFUSE
set -u
gf=${1:?usage: run_bench.sh path/to/graphfuse}
. "$(dirname "$0")/cli_checks.sh"

mlp=models/mlp/legacy/model.onnx
llama=models/llama_tiny/legacy/model.onnx
set0=models/mlp/legacy/test_data_set_0
# mlp's labels must be class ids: its recorded inputs, not random ones
mlp_in="--input x=$set0/input_0.pb --input labels=$set0/input_1.pb"

# ---- bench ------------------------------------------------------------------
# shellcheck disable=SC2086 (word splitting of $mlp_in wanted)
expect 0 "bench mlp" -- "$gf" bench $mlp $mlp_in --warmup 2 --iterations 20 --threads 1 &&
    for s in "model:" "backend:" "cpu on " "inputs:" "x float[8,32]" "runs:" "2 warmup, 20 timed" \
             "latency (ms)" "  min " "  mean " "  median (p50) " "  p90 " "  p99 " "  max " \
             "throughput:" "runs/s" "items/s (batch 8 of input 'x')" \
             "top ops by time (one extra profiled run" "  Gemm " "1 thread,"; do
        contains "$tmp/out" "$s" "bench table: $s"
    done
# --iterations=N, --fuse, --dim, llama: the fused ops in the profile
expect 0 "bench llama --fuse" -- "$gf" bench $llama --fuse --warmup=1 --iterations=10 \
    --dim batch=2 --dim=seq=8 --backend=cpu --precision fp32 &&
    contains "$tmp/out" "1 warmup, 10 timed" "--iterations=10 ran 10" &&
    contains "$tmp/out" "(fused in memory)" "bench --fuse said so" &&
    contains "$tmp/out" "input_ids int64[2,8]" "bench --dim sizes used" &&
    contains "$tmp/out" "RMSNorm" "bench --fuse: fused ops in the profile"
# --duration: timed runs for about that long
expect 0 "bench --duration" -- "$gf" bench $llama --warmup 0 --duration 0.2 &&
    contains "$tmp/out" "0 warmup, " "--duration: no warmup" &&
    awk '/^runs:/ { s = $(NF - 1); exit !(s >= 0.2 && s < 2) }' "$tmp/out" ||
    { echo "FAIL bench --duration 0.2: the timed runs did not last 0.2 s"; fails=$((fails + 1)); }
# --json: one valid JSON object with every number
expect 0 "bench --json" -- "$gf" bench $llama --json --warmup 1 --iterations 5 --dim batch=4 &&
    cp "$tmp/out" "$tmp/bench.json"
n=$((n + 1))
if ! python3 - "$tmp/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("model", "backend", "device", "threads", "fuse", "precision", "inputs", "warmup",
          "iterations", "duration_s", "latency_ms", "runs_per_s", "batch", "items_per_s",
          "profile_ms", "top_ops"):
    assert k in d, k
for k in ("min", "mean", "median", "p50", "p90", "p99", "max"):
    assert d["latency_ms"][k] > 0, k
l = d["latency_ms"]
assert l["min"] <= l["p50"] <= l["p90"] <= l["p99"] <= l["max"], l
assert d["iterations"] == 5 and d["warmup"] == 1 and d["batch"] == 4
assert abs(d["items_per_s"] - 4 * d["runs_per_s"]) < 1e-6 * d["items_per_s"] + 1e-3
assert d["backend"] == "cpu" or d["backend"]
assert 1 <= len(d["top_ops"]) <= 10 and all(o["ms"] >= 0 and o["calls"] > 0 for o in d["top_ops"])
assert [o["ms"] for o in d["top_ops"]] == sorted((o["ms"] for o in d["top_ops"]), reverse=True)
PY
then
    echo "FAIL bench --json: not valid JSON with every key"; sed 's/^/  | /' "$tmp/bench.json" | head -20
    fails=$((fails + 1))
fi
python3 -m json.tool "$tmp/bench.json" >/dev/null 2>&1 || { echo "FAIL bench --json: json.tool rejects it"; fails=$((fails + 1)); }
n=$((n + 1))
# --help, and usage errors: exit 2, one message naming the option
for h in --help -h; do
    expect 0 "bench $h" -- "$gf" bench "$h" && contains "$tmp/out" "usage: graphfuse bench" "bench $h synopsis" &&
        contains "$tmp/out" "--iterations N" "bench $h lists --iterations" &&
        contains "$tmp/out" "--duration S" "bench $h lists --duration"
done
expect 2 "bench --iterations 0" -- "$gf" bench $llama --iterations 0 &&
    contains "$tmp/err" "--iterations: bad count '0'" "--iterations message"
expect 2 "bench --iterations=x" -- "$gf" bench $llama --iterations=x &&
    contains "$tmp/err" "--iterations: bad count 'x'" "--iterations= message"
expect 2 "bench --warmup -1" -- "$gf" bench $llama --warmup -1 &&
    contains "$tmp/err" "--warmup: bad count '-1'" "--warmup message"
expect 2 "bench --duration 0" -- "$gf" bench $llama --duration=0 &&
    contains "$tmp/err" "--duration: bad duration '0'" "--duration message"
expect 2 "bench --threads 0" -- "$gf" bench $llama --threads 0 &&
    contains "$tmp/err" "--threads: bad thread count '0'" "bench --threads message"
expect 2 "bench both" -- "$gf" bench $llama --iterations 5 --duration 1 &&
    contains "$tmp/err" "--iterations and --duration" "bench both message"
expect 2 "bench no value" -- "$gf" bench $llama --warmup && contains "$tmp/err" "--warmup needs a value" "bench missing value"
expect 2 "bench no model" -- "$gf" bench
[ "$(wc -l <"$tmp/err")" = 1 ] || { echo "FAIL bench no model: message is not one line"; fails=$((fails + 1)); }

# ---- compare ----------------------------------------------------------------
# shellcheck disable=SC2086
expect 0 "compare cpu vs cpu" -- "$gf" compare $mlp $mlp_in --backend cpu --backend2=cpu &&
    contains "$tmp/out" "logits float[8,10]: max abs diff 0 at [0]" "cpu vs cpu: no difference" &&
    contains "$tmp/out" "PASS: 2 outputs within the tolerance" "cpu vs cpu passes"
expect 0 "compare fused vs unfused" -- "$gf" compare $llama --fuse-vs-unfused --dim batch=2 --dim seq=8 &&
    contains "$tmp/out" "B: $llama, cpu on " "compare names B" &&
    contains "$tmp/out" "fused in memory" "compare: B is fused" &&
    contains "$tmp/out" "max rel diff" "compare prints the relative difference" &&
    contains "$tmp/out" "PASS" "fused vs unfused passes"
expect 0 "compare two files" -- "$gf" compare $llama models/llama_tiny/dynamo/model.onnx --dim=batch=2 --dim seq=8
# the recorded outputs (mlp at the default tolerance; llama as `make test` checks it)
expect 0 "compare --expected mlp" -- "$gf" compare --expected models/mlp/legacy &&
    contains "$tmp/out" "A: the outputs recorded in models/mlp/legacy" "--expected names A" &&
    contains "$tmp/out" "test_data_set_0:" "--expected: the set"
expect 0 "compare --expected llama fused" -- "$gf" compare $llama --expected=models/llama_tiny/legacy/test_data_set_0 --fuse --atol 1e-5
expect 0 "compare --expected gpt2" -- "$gf" compare --expected models/gpt2_tiny/legacy --atol=1e-5
# no tolerance at all: fusion reorders float sums, so it fails, worst printed
expect 1 "compare --atol 0 --rtol 0" -- "$gf" compare $llama --fuse-vs-unfused --atol 0 --rtol=0 --dim batch=2 --dim seq=8 &&
    contains "$tmp/out" "logits float[2,8,64]: max abs diff " "the worst difference printed" &&
    contains "$tmp/out" "beyond tolerance: FAIL" "the output fails" &&
    contains "$tmp/out" "FAIL: 1 of 2 outputs beyond the tolerance" "the summary fails"
for h in --help -h; do
    expect 0 "compare $h" -- "$gf" compare "$h" && contains "$tmp/out" "usage: graphfuse compare" "compare $h synopsis" &&
        contains "$tmp/out" "--fuse-vs-unfused" "compare $h lists --fuse-vs-unfused"
done
expect 2 "compare --atol x" -- "$gf" compare $llama --atol x && contains "$tmp/err" "--atol: bad tolerance 'x'" "--atol message"
expect 2 "compare --rtol=-1" -- "$gf" compare $llama --rtol=-1 && contains "$tmp/err" "--rtol: bad tolerance '-1'" "--rtol message"
expect 2 "compare --precision2 x" -- "$gf" compare $llama --precision2 fp8 && contains "$tmp/err" "--precision2: unknown precision 'fp8'" "--precision2 message"
expect 2 "compare --expected missing" -- "$gf" compare --expected "$tmp/none" && contains "$tmp/err" "--expected: '$tmp/none' is not a folder" "--expected message"
expect 2 "compare --expected with B" -- "$gf" compare $llama $llama --expected models/llama_tiny/legacy && contains "$tmp/err" "--expected" "--expected with B message"
expect 2 "compare no model" -- "$gf" compare

echo "bench: $n checks, $fails failed"
[ "$fails" = 0 ]
