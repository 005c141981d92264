#!/bin/sh
# Runs `graphfuse info` on every malformed model of tests/bad/ and checks,
# per tests/bad/expected.tsv, the exit code and that stderr is exactly one
# line containing the expected message, with no crash and no sanitizer
# report.  Also checks that every file in tests/bad/ is listed.
#
#     tests/run_bad.sh build/graphfuse
#
# expected.tsv: FILE <TAB> EXIT <TAB> MESSAGE-SUBSTRING [<TAB> known: WHY]
#   EXIT "-" marks a data file the models use (not run).
#   A 4th column "known: ..." marks a known loader bug: a failure prints
#   "xfail" and does not fail the run (a crash still does); a pass prints
#   "XPASS" (drop the mark then).
# Lines starting with '#' and blank lines are ignored.
set -u

if [ $# -ne 1 ]; then
    echo "usage: $0 path/to/graphfuse" >&2
    exit 2
fi
bin=$1
dir=$(dirname "$0")/bad
tsv=$dir/expected.tsv
if [ ! -x "$bin" ]; then
    echo "run_bad: $bin is not an executable (build it first)" >&2
    exit 1
fi
if [ ! -f "$tsv" ]; then
    echo "run_bad: $tsv is missing" >&2
    exit 1
fi

# A hang is a failure too; sanitizer builds are slower, hence the margin.
limit=60
command -v timeout >/dev/null 2>&1 && run_with_limit="timeout $limit" || run_with_limit=
# shellcheck disable=SC3045 # (dash and bash both have ulimit -c)
ulimit -c 0 2>/dev/null || true

tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_bad.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
err=$tmp/stderr
tab=$(printf '\t')
n_ok=0 n_fail=0 n_xfail=0 n_xpass=0

# Copies stdin with every occurrence of the string $1 (the model's path)
# removed, so an expected substring cannot match the file name.
without_path() {
    awk -v p="$1" '{ while ((i = index($0, p)) > 0)
                         $0 = substr($0, 1, i - 1) substr($0, i + length(p))
                     print }'
}

# check FILE CODE SUBSTRING: prints nothing when the run is right, else why;
# a crash or sanitizer report starts with "!" (never excused by "known:").
check() {
    $run_with_limit "$bin" info "$dir/$1" </dev/null >/dev/null 2>"$err"
    rc=$?
    if grep -q -e AddressSanitizer -e LeakSanitizer -e 'runtime error' "$err"; then
        echo "!sanitizer report"
    elif [ "$rc" -ge 124 ]; then
        echo "!exit code $rc (crash, signal or timeout), expected $2"
    elif [ "$rc" -ne "$2" ]; then
        echo "exit code $rc, expected $2"
    elif [ "$(wc -l <"$err")" -ne 1 ] || [ -n "$(tail -c 1 "$err")" ]; then
        echo "stderr is not exactly one line"
    elif ! without_path "$dir/$1" <"$err" | grep -q -F -e "$3"; then
        echo "message lacks '$3'"
    fi
}

listed=$tmp/listed
: >"$listed"
while IFS=$tab read -r file code sub note; do
    case $file in '' | '#'*) continue ;; esac
    echo "$file" >>"$listed"
    if [ ! -e "$dir/$file" ] && [ ! -L "$dir/$file" ]; then
        echo "FAIL  $file: listed in expected.tsv but missing"
        n_fail=$((n_fail + 1))
        continue
    fi
    [ "$code" = "-" ] && continue
    why=$(check "$file" "$code" "$sub")
    case ${note:-}/$why in
    known:*/!*) ;;
    known:*)
        if [ -n "$why" ]; then
            echo "xfail $file: $why (${note#known: })"
            n_xfail=$((n_xfail + 1))
        else
            echo "XPASS $file: passes now; remove the 'known:' mark in expected.tsv"
            n_xpass=$((n_xpass + 1))
        fi
        continue ;;
    esac
    if [ -z "$why" ]; then
        echo "ok    $file"
        n_ok=$((n_ok + 1))
    else
        echo "FAIL  $file: ${why#!}"
        sed 's/^/        | /' "$err" | head -n 5
        n_fail=$((n_fail + 1))
    fi
done <"$tsv"

# Every file of the corpus must be listed (the generator and this table aside).
for path in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$path" ] || [ -L "$path" ] || continue
    f=$(basename "$path")
    case $f in gen_bad.c | expected.tsv) continue ;; esac
    if ! grep -q -x -F -e "$f" "$listed"; then
        echo "FAIL  $f: in tests/bad/ but not in expected.tsv"
        n_fail=$((n_fail + 1))
    fi
done

echo "run_bad: $n_ok ok, $n_fail failed, $n_xfail known bugs, $n_xpass fixed known bugs"
[ "$n_fail" -eq 0 ]
