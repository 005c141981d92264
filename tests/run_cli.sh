#!/bin/sh
# CLI checks: help/version, info and dump on the bundled models, dump -o
# atomicity, DOT rendering, usage errors.  Usage: tests/run_cli.sh GRAPHFUSE
set -u
gf=${1:?usage: run_cli.sh path/to/graphfuse}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
n=0

# expect CODE DESCRIPTION -- COMMAND...: runs, checks the exit code
expect() {
    code=$1 desc=$2
    shift 3
    n=$((n + 1))
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" != "$code" ]; then
        echo "FAIL $desc: exit $got, expected $code"; sed 's/^/  | /' "$tmp/err" | head -5
        fails=$((fails + 1))
        return 1
    fi
    return 0
}
# contains FILE TEXT DESCRIPTION
contains() {
    n=$((n + 1))
    if ! grep -qF -- "$2" "$1"; then
        echo "FAIL $3: '$2' not found"; head -5 "$1" | sed 's/^/  | /'
        fails=$((fails + 1))
    fi
}

expect 0 "--help" -- "$gf" --help && contains "$tmp/out" "usage: graphfuse" "--help text"
expect 0 "--version" -- "$gf" --version && contains "$tmp/out" "graphfuse " "--version text"
expect 2 "no command" -- "$gf"
expect 2 "unknown command" -- "$gf" frobnicate && contains "$tmp/err" "unknown command 'frobnicate'" "unknown command message"
expect 2 "info without model" -- "$gf" info
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
[ -s "$tmp/c.onnx.data" ] || { echo "FAIL convert: no side file"; fails=$((fails + 1)); }
expect 0 "info of converted" -- "$gf" info "$tmp/c.onnx" && contains "$tmp/out" "c.onnx.data" "external data file listed"
"$gf" dump models/llama_tiny/dynamo/model.onnx >"$tmp/a.json"
"$gf" dump "$tmp/c.onnx" >"$tmp/b.json"
n=$((n + 1))
cmp -s "$tmp/a.json" "$tmp/b.json" || { echo "FAIL converted model dumps differently"; fails=$((fails + 1)); }
expect 2 "convert without -o" -- "$gf" convert models/mlp/legacy/model.onnx

echo "cli: $n checks, $fails failed"
[ "$fails" = 0 ]
