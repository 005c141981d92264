#!/bin/sh
# CLI checks: help/version, info and dump on the bundled models, dump -o
# atomicity, DOT rendering, usage errors, every command's --help, both
# option forms (--opt VALUE, --opt=VALUE), unknown --dim names.
# Usage: tests/run_cli.sh GRAPHFUSE
set -u
gf=${1:?usage: run_cli.sh path/to/graphfuse}
. "$(dirname "$0")/cli_checks.sh"

expect 0 "--help" -- "$gf" --help && contains "$tmp/out" "usage: graphfuse" "--help text"
expect 0 "--version" -- "$gf" --version && contains "$tmp/out" "graphfuse " "--version text"
expect 2 "no command" -- "$gf"
expect 2 "unknown command" -- "$gf" frobnicate && contains "$tmp/err" "unknown command 'frobnicate'" "unknown command message"
expect 2 "info without model" -- "$gf" info
# a file that is not ONNX at all is called that, by name
expect 2 "info on a text file" -- "$gf" info README.md && contains "$tmp/err" "README.md: not an ONNX model" "not-ONNX message"
printf 'hello world' >"$tmp/hello.onnx"
expect 2 "run on a text file" -- "$gf" run "$tmp/hello.onnx" && contains "$tmp/err" "hello.onnx: not an ONNX model" "not-ONNX message (run)"
expect 2 "unknown dump format" -- "$gf" dump models/mlp/legacy/model.onnx --format xml && contains "$tmp/err" "unknown format 'xml'" "format message"
expect 2 "missing file" -- "$gf" info "$tmp/nope.onnx" && contains "$tmp/err" "nope.onnx: cannot open" "missing file message"
[ "$(wc -l <"$tmp/err")" = 1 ] || { echo "FAIL missing file: message is not one line"; fails=$((fails + 1)); }

for m in models/*/*/model.onnx; do
    expect 0 "info $m" -- "$gf" info "$m" && contains "$tmp/out" "opsets:" "info $m"
    for f in text dot json; do
        expect 0 "dump $f $m" -- "$gf" dump "$m" --format "$f" -o "$tmp/d.$f"
    done
    if command -v dot >/dev/null; then
        expect 0 "dot -Tsvg $m" -- dot -Tsvg "$tmp/d.dot" -o "$tmp/d.svg"
    fi
done
contains "$tmp/d.text" " -> " "text dump has nodes"

# dump -o into a folder that does not exist: error, no file anywhere
expect 2 "dump to missing folder" -- "$gf" dump models/mlp/legacy/model.onnx -o "$tmp/no/such/out.txt"
# dump of a bad model with -o: no partial file
printf 'garbage' >"$tmp/bad.onnx"
expect 2 "dump of a bad model" -- "$gf" dump "$tmp/bad.onnx" -o "$tmp/bad.txt"
[ ! -e "$tmp/bad.txt" ] || { echo "FAIL dump of a bad model left a file"; fails=$((fails + 1)); }
[ -z "$(ls "$tmp" | grep '\.tmp\.')" ] || { echo "FAIL temporary files left behind"; fails=$((fails + 1)); }

# convert: external data round trip; the copy dumps the same as the original
expect 0 "convert --external-data" -- "$gf" convert models/llama_tiny/dynamo/model.onnx -o "$tmp/c.onnx" --external-data
side=$(cd "$tmp" && ls | grep -E '^c\.onnx\.[0-9a-f]{16}\.data$')
[ -s "$tmp/$side" ] || { echo "FAIL convert: no side file c.onnx.HASH.data"; fails=$((fails + 1)); }
expect 0 "info of converted" -- "$gf" info "$tmp/c.onnx" && contains "$tmp/out" "$side" "external data file listed"
"$gf" dump models/llama_tiny/dynamo/model.onnx >"$tmp/a.json"
"$gf" dump "$tmp/c.onnx" >"$tmp/b.json"
n=$((n + 1))
cmp -s "$tmp/a.json" "$tmp/b.json" || { echo "FAIL converted model dumps differently"; fails=$((fails + 1)); }
expect 2 "convert without -o" -- "$gf" convert models/mlp/legacy/model.onnx

# every command: -h and --help print its synopsis and options on stdout, exit 0
for c in info dump convert optimize run test train tune generate backends export-weights bench compare plot; do
    for h in --help -h; do
        expect 0 "$c $h" -- "$gf" "$c" "$h" && contains "$tmp/out" "usage: graphfuse $c" "$c $h synopsis" &&
            contains "$tmp/out" "-h, --help" "$c $h options"
    done
done
"$gf" --help >"$tmp/help"
for c in info dump convert optimize run test train tune generate backends export-weights bench compare plot; do
    contains "$tmp/help" "  $c " "graphfuse --help lists $c"
done
# help wins over everything else on the line, even a missing model
expect 0 "run --threads 2 --help" -- "$gf" run --threads 2 --help && contains "$tmp/out" "--repeat N" "run --help lists --repeat"
expect 0 "train --help lists --lr" -- "$gf" train --help && contains "$tmp/out" "--lr LR" "train --help lists --lr"

# --opt VALUE and --opt=VALUE in every parser
mlp=models/mlp/legacy/model.onnx
llama=models/llama_tiny/dynamo/model.onnx
in0=models/mlp/legacy/test_data_set_0/input_0.pb
for form in space equals; do
    # opt NAME VALUE: "--name value" or "--name=value" by $form
    opt() { if [ $form = space ]; then echo "$1 $2"; else echo "$1=$2"; fi; }
    # shellcheck disable=SC2046 (word splitting wanted; no value has spaces)
    expect 0 "run ($form)" -- "$gf" run $mlp --random-inputs $(opt --threads 1) $(opt --repeat 2) \
        $(opt --dim batch=8) $(opt --max-memory 1G) $(opt --precision fp32) $(opt --backend cpu) \
        $(opt --output-dir "$tmp/o_$form") $(opt --input x=$in0) \
        $(opt --input labels=${in0%0.pb}1.pb) $(opt --tune-cache "$tmp/tc") &&
        [ -s "$tmp/o_$form/output_0.pb" ] || { echo "FAIL run ($form): no output file"; fails=$((fails + 1)); }
    expect 0 "run -i ($form)" -- "$gf" run $mlp $(opt -i x=$in0) $(opt -i labels=${in0%0.pb}1.pb)
    expect 0 "test ($form)" -- "$gf" test models/mlp/legacy $(opt --rtol 1e-2) $(opt --atol 1e-5) $(opt --threads 1)
    expect 0 "train ($form)" -- "$gf" train $mlp $(opt --data models/mlp/train_data) $(opt --steps 2) \
        $(opt --optimizer adamw) $(opt --lr 0.01) $(opt --warmup 1) $(opt --schedule cosine) \
        $(opt --accumulate 1) $(opt --threads 1) $(opt --log "$tmp/l_$form.csv") $(opt -o "$tmp/t_$form.onnx") &&
        contains "$tmp/out" "optimizer: adamw lr 0.01" "train ($form) took --optimizer and --lr"
    [ -s "$tmp/t_$form.onnx" ] || { echo "FAIL train ($form): no -o file"; fails=$((fails + 1)); }
    expect 0 "convert ($form)" -- "$gf" convert $mlp $(opt -o "$tmp/c_$form.onnx") --external-data \
        $(opt --external-threshold 10)
    ls "$tmp"/c_$form.onnx.*.data >/dev/null 2>&1 || { echo "FAIL convert ($form): no side file"; fails=$((fails + 1)); }
    expect 0 "optimize ($form)" -- "$gf" optimize $llama $(opt -o "$tmp/p_$form.onnx") $(opt --target ort) \
        $(opt --report json) $(opt --disable gelu) $(opt --precision fp32) && contains "$tmp/out" '"format"' "optimize ($form) json"
    expect 0 "dump ($form)" -- "$gf" dump $mlp $(opt --format json) $(opt -o "$tmp/d_$form.json")
    expect 0 "export-weights ($form)" -- "$gf" export-weights $mlp $(opt -o "$tmp/w_$form.safetensors")
    expect 0 "tune ($form)" -- "$gf" tune $mlp $(opt --dim batch=2) $(opt --tune-budget 2) $(opt --repeats 1) \
        $(opt --tune-cache "$tmp/tc_$form") $(opt --backend cpu)
done
expect 2 "a flag with a value" -- "$gf" train $mlp --data models/mlp/train_data --nesterov=1 && contains "$tmp/err" "--nesterov takes no value" "flag value message"
expect 2 "value missing" -- "$gf" run $mlp --threads && contains "$tmp/err" "--threads needs a value" "missing value message"
expect 2 "unknown run option" -- "$gf" run $mlp --frobnicate && contains "$tmp/err" "unknown option '--frobnicate'" "unknown option message"

# usage errors name their option
expect 2 "--threads 0" -- "$gf" run $mlp --threads 0 && contains "$tmp/err" "--threads: bad thread count '0' (1 or more)" "--threads message"
expect 2 "train --threads=0" -- "$gf" train $mlp --data models/mlp/train_data --threads=0 && contains "$tmp/err" "--threads: bad thread count '0'" "train --threads message"
expect 2 "--max-memory x" -- "$gf" run $mlp --max-memory x && contains "$tmp/err" "--max-memory: bad memory size 'x'" "--max-memory message"
# sizes that are not a finite count of 1 byte or more (once 0 = no limit, or UB)
for v in 1e30 inf nan 0.5 0; do
    expect 2 "--max-memory $v" -- "$gf" run $mlp --max-memory $v && contains "$tmp/err" "--max-memory: bad memory size '$v' (a finite size of 1 byte or more" "--max-memory $v message"
done
expect 2 "train --max-memory inf" -- "$gf" train $mlp --data models/mlp/train_data --max-memory inf && contains "$tmp/err" "--max-memory: bad memory size 'inf'" "train --max-memory message"
expect 2 "--external-threshold 0" -- "$gf" convert $mlp -o "$tmp/z.onnx" --external-threshold 0 && contains "$tmp/err" "--external-threshold: bad size '0'" "--external-threshold message"
expect 2 "--steps x" -- "$gf" train $mlp --data models/mlp/train_data --steps x && contains "$tmp/err" "--steps: bad value 'x'" "--steps message"
# train --dump-graph: the training graph (forward and backward) as text or
# JSON by the extension; an unwritable path: exit 2, no file, no training
expect 0 "train --dump-graph" -- "$gf" train models/llama_tiny/legacy/model.onnx --data models/llama_tiny/train_data --steps 1 --dump-graph "$tmp/tg.txt" --dump-graph="$tmp/tg.json"
contains "$tmp/tg.json" '"op_type"' "train --dump-graph json"
expect 0 "train --dump-graph text" -- "$gf" train models/llama_tiny/legacy/model.onnx --data models/llama_tiny/train_data --steps 1 --dump-graph "$tmp/tg.txt"
contains "$tmp/tg.txt" "RMSNormGrad" "train --dump-graph has the fused backward"
expect 2 "train --dump-graph unwritable" -- "$gf" train $mlp --data models/mlp/train_data --steps 1 --dump-graph "$tmp/no/such/g.txt"
contains "$tmp/err" "$tmp/no/such/g.txt" "--dump-graph error names the file"
[ -e "$tmp/no/such/g.txt" ] && { echo "FAIL --dump-graph left a file"; fails=$((fails + 1)); }
expect 2 "--target bad" -- "$gf" optimize $mlp -o "$tmp/z.onnx" --target=tvm && contains "$tmp/err" "--target: unknown target 'tvm'" "--target message"

# --dim with a name no input has: exit 2, the name and the model's dims named
expect 2 "run --dim typo" -- "$gf" run $llama --random-inputs --dim btach=4 &&
    contains "$tmp/err" "symbolic dimension named 'btach'" "--dim typo names it" &&
    contains "$tmp/err" "(the model's symbolic dims: batch, seq)" "--dim typo lists the dims"
expect 2 "tune --dim typo" -- "$gf" tune $mlp --dim=btach=4 && contains "$tmp/err" "'btach'" "tune --dim typo names it"
expect 2 "run --dim 2^62" -- "$gf" run $llama --random-inputs --dim batch=4611686018427387904 --dim seq=2 &&
    contains "$tmp/err" "input 'input_ids': --dim batch=4611686018427387904 is too large (the input's size overflows)" "--dim 2^62 message"
# control flow: an invalid Scan is exit 2 naming it; a valid one is unsupported (3)
expect 2 "run: Scan with more scan inputs than inputs" -- "$gf" run tests/bad/scan_too_many.onnx --random-inputs &&
    contains "$tmp/err" "node 'scan0' (Scan): num_scan_inputs is 3 but the node has 1 input" "run: bad Scan message"
scan=/usr/share/libonnx-testdata/data/node/test_scan_sum
if [ -d "$scan" ]; then
    expect 3 "run: a valid Scan" -- "$gf" run "$scan/model.onnx" --random-inputs &&
        contains "$tmp/err" "control flow with subgraphs is not supported" "run: valid Scan message"
fi
expect 0 "run --dim known" -- "$gf" run $llama --random-inputs --dim batch=2 --dim seq=3 && contains "$tmp/out" "float[2,3," "--dim sizes used"

echo "cli: $n checks, $fails failed"
[ "$fails" = 0 ]
