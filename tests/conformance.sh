#!/bin/sh
# ONNX conformance: runs `graphfuse test` over every node test of Debian's
# libonnx-testdata, prints the table by op, and compares the results with
# tests/conformance.expected: a test listed there as PASS that no longer
# passes fails the run.  --update rewrites the expected list.
# Usage: tests/conformance.sh GRAPHFUSE [--update]
set -u
gf=${1:?usage: conformance.sh path/to/graphfuse [--update]}
data=/usr/share/libonnx-testdata/data/node
expected=tests/conformance.expected
out=$(dirname "$gf")/conformance.txt
now=$(dirname "$gf")/conformance.now

"$gf" test --by-op "$data"/*/ >"$out" 2>&1
rc=$?
if [ "$rc" -gt 1 ]; then
    echo "conformance: graphfuse exited with status $rc (crash?); see $out"
    tail -5 "$out"
    exit 1
fi
sed -n '/^op  */,$p' "$out"
grep -E '^(PASS|FAIL|UNSUPPORTED) ' "$out" | awk '{ sub(":$", "", $2); sub(".*/", "", $2); print $2, $1 }' | sort >"$now"

if [ "${2:-}" = "--update" ]; then
    cp "$now" "$expected"
    echo "conformance: $expected updated ($(grep -c ' PASS$' "$expected") passing)"
    exit 0
fi
regressions=$(join "$expected" "$now" | awk '$2 == "PASS" && $3 != "PASS" { print "  " $1 ": " $3 }')
gained=$(join "$expected" "$now" | awk '$2 != "PASS" && $3 == "PASS"' | wc -l)
if [ -n "$regressions" ]; then
    echo "conformance: REGRESSIONS (expected PASS):"
    echo "$regressions"
    exit 1
fi
[ "$gained" -gt 0 ] && echo "conformance: $gained more tests pass than $expected records (make conformance-update)"
echo "conformance: no regressions against $expected"
