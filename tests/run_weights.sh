#!/bin/sh
# graphfuse export-weights and train --save-safetensors.
#
# 1. export-weights of every bundled model (legacy and dynamo): exit 0,
#    a file with the model's parameter count; when python3 is there, its
#    json module parses the header and the offsets tile the data exactly.
# 2. train --save-safetensors: the same bytes as export-weights of the
#    trained -o model and of the checkpoint (optimizer state left out);
#    the trained weights differ from the untrained ones.
# 3. Bad input: one message naming the file, exit 2, no output file.
# (tools/check_safetensors.py checks the values against PyTorch.)
# Usage: tests/run_weights.sh path/to/graphfuse
set -u
gf=${1:?usage: run_weights.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
PY=
command -v python3 >/dev/null 2>&1 && PY=python3

pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # check DESCRIPTION COMMAND...
    desc=$1
    shift
    if "$@"; then pass "$desc"; else fail "$desc"; fi
}
# run CODE COMMAND...: runs it (out/err in $tmp), true when it exits CODE
run() {
    code=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$code" ] && return 0
    echo "  | exit $got, expected $code: $(head -3 "$tmp/err")"
    return 1
}
one_line() { [ "$(wc -l <"$tmp/err")" = 1 ]; }
names() { grep -qF -- "$1" "$tmp/err"; }
absent() { [ ! -e "$1" ] && [ -z "$(ls "$tmp" | grep '\.tmp\.')" ]; }

# header FILE COUNT: the safetensors layout, with python3's json
header() {
    [ -z "$PY" ] && return 0
    "$PY" - "$1" "$2" <<'EOF'
import json, struct, sys
path, count = sys.argv[1], int(sys.argv[2])
size = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4}
with open(path, "rb") as f:
    blob = f.read()
n = struct.unpack("<Q", blob[:8])[0]
assert n % 8 == 0, "header length %d is not a multiple of 8" % n
text = blob[8:8 + n].decode("utf-8")
assert text.rstrip(" ").endswith("}"), "the JSON is padded with spaces only"
h = json.loads(text)
assert h.pop("__metadata__", {}).get("format") == "pt", "no format: pt metadata"
assert len(h) == count, "%d tensors, expected %d" % (len(h), count)
end = 0
for name, t in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
    b, e = t["data_offsets"]
    k = 1
    for d in t["shape"]:
        k *= d
    assert b == end and e - b == k * size[t["dtype"]], "%s: offsets %s" % (name, [b, e])
    end = e
assert 8 + n + end == len(blob), "data ends at %d, file has %d bytes" % (8 + n + end, len(blob))
EOF
}

[ -z "$PY" ] && echo "(no python3: safetensors headers not parsed)"
echo "== export-weights of the bundled models"
for spec in mlp:6 llama_tiny:21 gpt2_tiny:29; do
    m=${spec%%:*} count=${spec#*:}
    for e in legacy dynamo; do
        f=$tmp/$m.$e.safetensors
        if run 0 "$gf" export-weights "models/$m/$e/model.onnx" -o "$f"; then
            pass "$m/$e: exit 0"
        else
            fail "$m/$e: export-weights"
            continue
        fi
        check "$m/$e: reports $count tensors" grep -q "^wrote $f: $count tensors" "$tmp/out"
        check "$m/$e: header parses, offsets tile the data" header "$f" "$count"
    done
done

echo "== train --save-safetensors"
M=models/llama_tiny/dynamo/model.onnx
D=models/llama_tiny/train_data
if run 0 "$gf" train $M --data $D --steps 3 --optimizer adamw --freeze '^expand$' \
    --save-safetensors "$tmp/t.safetensors" -o "$tmp/t.onnx" --checkpoint "$tmp/c.onnx" \
    --checkpoint-every 3; then
    pass "train --save-safetensors: exit 0"
else
    fail "train --save-safetensors"
fi
check "train reports the file" grep -q "^wrote $tmp/t.safetensors: 21 tensors" "$tmp/out"
check "train: header parses" header "$tmp/t.safetensors" 21
run 0 "$gf" export-weights "$tmp/t.onnx" -o "$tmp/o.safetensors"
check "the same bytes as export-weights of -o" cmp -s "$tmp/t.safetensors" "$tmp/o.safetensors"
run 0 "$gf" export-weights "$tmp/c.onnx" -o "$tmp/c.safetensors"
check "export-weights of the checkpoint: the same bytes" \
    cmp -s "$tmp/t.safetensors" "$tmp/c.safetensors"
check "the checkpoint's optimizer state left out" grep -q "^left out: .* checkpoint state" \
    "$tmp/out"
check "trained weights differ from the exported ones" \
    sh -c '! cmp -s "$1" "$2"' - "$tmp/t.safetensors" "$tmp/llama_tiny.dynamo.safetensors"

echo "== bad input: one line naming the file, exit 2, nothing written"
out=$tmp/bad.safetensors
check "missing model: exit 2" run 2 "$gf" export-weights "$tmp/none.onnx" -o "$out"
check "missing model: named, one line" sh -c 'grep -qF "$1" "$2" && [ "$(wc -l <"$2")" = 1 ]' \
    - "$tmp/none.onnx" "$tmp/err"
check "missing model: no output" absent "$out"
printf 'not a model' >"$tmp/junk.onnx"
check "not ONNX: exit 2" run 2 "$gf" export-weights "$tmp/junk.onnx" -o "$out"
check "not ONNX: named" names "$tmp/junk.onnx"
check "not ONNX: no output" absent "$out"
check "unwritable folder: exit 2" run 2 "$gf" export-weights models/mlp/legacy/model.onnx \
    -o "$tmp/no/dir/x.safetensors"
check "unwritable folder: named, one line" sh -c 'grep -qF "$1" "$2" && [ "$(wc -l <"$2")" = 1 ]' \
    - "$tmp/no/dir/x.safetensors" "$tmp/err"
NODE=/usr/share/libonnx-testdata/data/node/test_add/model.onnx
if [ -f $NODE ]; then
    check "no parameter: exit 2" run 2 "$gf" export-weights $NODE -o "$out"
    check "no parameter: names the model" names "$NODE"
    check "no parameter: one line" one_line
    check "no parameter: no output" absent "$out"
fi
check "no -o: exit 2" run 2 "$gf" export-weights models/mlp/legacy/model.onnx
check "unknown option: exit 2" run 2 "$gf" export-weights models/mlp/legacy/model.onnx \
    -o "$out" --bogus
check "train --save-safetensors into a missing folder: exit 2" run 2 "$gf" train \
    models/mlp/legacy/model.onnx --data models/mlp/train_data --steps 1 \
    --save-safetensors "$tmp/no/dir/x.safetensors"
check "... before training (no step printed)" sh -c '! grep -q "^step" "$1"' - "$tmp/out"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
