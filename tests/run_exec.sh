#!/bin/sh
# CLI checks of `run` and `test`: outputs written as recorded, and bad
# input at run time (wrong dtype / shape, missing or unknown input,
# missing file, unsupported op, memory limit) answered with one message
# and the right exit code.  Usage: tests/run_exec.sh GRAPHFUSE
set -u
gf=${1:?usage: run_exec.sh path/to/graphfuse}
node=/usr/share/libonnx-testdata/data/node
. "$(dirname "$0")/cli_checks.sh"
one_line() { # one_line DESCRIPTION: stderr is exactly one line
    n=$((n + 1))
    [ "$(wc -l <"$tmp/err")" = 1 ] || { echo "FAIL $1: message is not one line"; fails=$((fails + 1)); }
}

add=$node/test_add
x=$add/test_data_set_0/input_0.pb
y=$add/test_data_set_0/input_1.pb

# run writes the outputs as TensorProto files: byte-identical to the
# recorded ones for an exact op
mkdir "$tmp/o"
expect 0 "run test_add" -- "$gf" run "$add/model.onnx" --input x="$x" --input y="$y" --output-dir "$tmp/o"
n=$((n + 1))
cmp -s "$tmp/o/output_0.pb" "$add/test_data_set_0/output_0.pb" ||
    { echo "FAIL run: output_0.pb differs from the recorded output"; fails=$((fails + 1)); }
expect 0 "run --random-inputs" -- "$gf" run models/llama_tiny/dynamo/model.onnx --random-inputs
contains "$tmp/out" "loss" "random-input run prints outputs"

# bad input at run time
expect 2 "wrong dtype" -- "$gf" run "$node/test_gather_0/model.onnx" --input data="$node/test_gather_0/test_data_set_0/input_0.pb" --input indices="$x"
contains "$tmp/err" "'indices' has type float, the model expects int64" "wrong dtype message"; one_line "wrong dtype"
expect 2 "wrong shape" -- "$gf" run "$add/model.onnx" --input x="$x" --input y="$node/test_add_bcast/test_data_set_0/input_1.pb"
contains "$tmp/err" "'y' has rank 1, the model expects 3" "wrong shape message"; one_line "wrong shape"
expect 2 "missing input" -- "$gf" run "$add/model.onnx" --input x="$x"
contains "$tmp/err" "'y'" "missing input message"; one_line "missing input"
expect 2 "unknown input name" -- "$gf" run "$add/model.onnx" --input x="$x" --input zz="$y"
contains "$tmp/err" "zz" "unknown input message"; one_line "unknown input"
expect 2 "missing input file" -- "$gf" run "$add/model.onnx" --input x="$x" --input y="$tmp/nope.pb"
contains "$tmp/err" "nope.pb" "missing file message"; one_line "missing input file"
expect 2 "input file not a tensor" -- "$gf" run "$add/model.onnx" --input x="$x" --input y=README.md
contains "$tmp/err" "README.md: not an ONNX tensor file" "not-a-tensor message"; one_line "not a tensor"
expect 3 "unsupported op" -- "$gf" run "$node/test_conv_with_strides_padding/model.onnx" --random-inputs
contains "$tmp/err" "op 'Conv' (domain 'ai.onnx', opset" "unsupported op message"; one_line "unsupported op"
expect 2 "memory limit" -- "$gf" run models/llama_tiny/dynamo/model.onnx --random-inputs --max-memory 1K
contains "$tmp/err" "over the memory limit of 1024 bytes" "memory limit message"; one_line "memory limit"
expect 2 "output dir missing" -- "$gf" run "$add/model.onnx" --input x="$x" --input y="$y" --output-dir "$tmp/no/such"
n=$((n + 1))
[ ! -e "$tmp/no" ] || { echo "FAIL output dir created"; fails=$((fails + 1)); }

# test: PASS / FAIL lines and the summary; a wrong expected output fails
expect 0 "test test_add" -- "$gf" test "$add"
contains "$tmp/out" "PASS $add" "PASS line"
contains "$tmp/out" "1 passed, 0 failed, 0 skipped" "summary line"
mkdir -p "$tmp/wrong/test_data_set_0"
cp "$add/model.onnx" "$tmp/wrong/"
cp "$x" "$y" "$tmp/wrong/test_data_set_0/"
cp "$x" "$tmp/wrong/test_data_set_0/output_0.pb" # x is not x + y
expect 1 "test with a wrong expected output" -- "$gf" test "$tmp/wrong"
contains "$tmp/out" "FAIL $tmp/wrong" "FAIL line"
contains "$tmp/out" "0 passed, 1 failed, 0 skipped" "failed summary"
expect 0 "test unsupported is skipped" -- "$gf" test "$node/test_conv_with_strides_padding"
contains "$tmp/out" "UNSUPPORTED" "UNSUPPORTED line"
expect 2 "test missing folder" -- "$gf" test "$tmp/nothing"

echo "exec: $n checks, $fails failed"
[ "$fails" = 0 ]
