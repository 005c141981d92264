#!/bin/sh
# The ONNX node tests whose *_expanded body is a loss pattern fuse back:
# every test_sce_*_expanded (SoftmaxCrossEntropyLoss's function body: Reshape,
# Transpose, LogSoftmax, Transpose, Reshape, NegativeLogLikelihoodLoss, with
# or without weights, ignore_index and log_prob) becomes, after `graphfuse
# optimize`, one graphfuse.SoftmaxCrossEntropy node, and the optimized model
# still passes its recorded test data with `graphfuse test`'s default
# tolerances (rtol 1e-3, atol 1e-7).  The test_nllloss_*_expanded bodies read
# arbitrary scores, not log-softmax outputs: they are no cross-entropy and
# must come out unfused (and still pass).  Every test_layer_normalization_*
# (the LayerNormalization op with Y, Mean and InvStdDev as graph outputs)
# and its _expanded function body become one graphfuse.LayerNorm node with
# three outputs, and pass their test data.
# Usage: tests/run_expanded.sh GRAPHFUSE
set -u
gf=${1:?usage: run_expanded.sh path/to/graphfuse}
node=/usr/share/libonnx-testdata/data/node
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_expanded.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fused=0
total=0
kept=0
nll=0
ln=0
lnfused=0

bad() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

# optimize TEST: writes $tmp/TEST/model.onnx with the test data; 1 on failure
optimize() {
    out="$tmp/$1"
    mkdir -p "$out"
    if ! "$gf" optimize "$node/$1/model.onnx" -o "$out/model.onnx" >"$out/report" 2>&1; then
        bad "$1: optimize failed: $(tail -1 "$out/report")"
        return 1
    fi
    cp -r "$node/$1"/test_data_set_* "$out/"
}

# passes TEST: the optimized model passes its test data (a PASS line: a
# model graphfuse cannot run is reported UNSUPPORTED with exit 0)
passes() {
    "$gf" test "$tmp/$1" >"$tmp/$1/test" 2>&1
    if [ $? != 0 ] || ! grep -q '^PASS' "$tmp/$1/test"; then
        bad "$1: $(grep -v '^[0-9]* passed' "$tmp/$1/test" | head -1)"
        return 1
    fi
}

# main-graph nodes of the optimized TEST (function bodies are indented)
nodes() {
    "$gf" dump "$tmp/$1/model.onnx" | sed -n 's/^graph [^:]*: \([0-9]*\) nodes*,.*/\1/p' | head -1
}

for dir in "$node"/test_sce_*_expanded; do
    t=$(basename "$dir")
    total=$((total + 1))
    optimize "$t" || continue
    n=$(nodes "$t")
    k=$("$gf" dump "$tmp/$t/model.onnx" | grep -c '^[^ ].*: graphfuse\.SoftmaxCrossEntropy(')
    if [ "$n" != 1 ] || [ "$k" != 1 ]; then
        bad "$t: $n nodes, $k graphfuse.SoftmaxCrossEntropy after optimize (expected one)"
        continue
    fi
    passes "$t" && fused=$((fused + 1))
done

for dir in "$node"/test_nllloss_*_expanded; do
    t=$(basename "$dir")
    nll=$((nll + 1))
    optimize "$t" || continue
    if "$gf" dump "$tmp/$t/model.onnx" | grep -q 'graphfuse\.'; then
        bad "$t: fused, but an NLL of arbitrary scores is no softmax cross-entropy"
        continue
    fi
    passes "$t" && kept=$((kept + 1))
done

# one_fused TEST OP: the optimized TEST is one node, graphfuse.OP with
# three outputs
one_fused() {
    n=$(nodes "$1")
    k=$("$gf" dump "$tmp/$1/model.onnx" | grep -c "^[^ ].*: graphfuse\.$2(.*) -> [^ ,]*, [^ ,]*, [^ ,]* ")
    [ "$n" = 1 ] && [ "$k" = 1 ] && return 0
    bad "$1: $n nodes, $k graphfuse.$2 with three outputs after optimize (expected one)"
    return 1
}

for dir in "$node"/test_layer_normalization_*; do
    t=$(basename "$dir")
    ln=$((ln + 1))
    optimize "$t" || continue
    one_fused "$t" LayerNorm || continue
    passes "$t" && lnfused=$((lnfused + 1))
done

[ "$total" -gt 0 ] || bad "no test_sce_*_expanded tests under $node"
[ "$ln" -gt 0 ] || bad "no test_layer_normalization_* tests under $node"
echo "expanded: $fused of $total softmax cross-entropy _expanded tests fuse to one node and pass;" \
     "$kept of $nll NLL _expanded tests stay unfused and pass;" \
     "$lnfused of $ln layer normalization tests (op and _expanded) fuse to one" \
     "LayerNorm with Mean and InvStdDev and pass; $fails failed"
[ "$fails" = 0 ]
