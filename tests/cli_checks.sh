# Sourced by the CLI test scripts (tests/run_cli.sh, run_bench.sh,
# run_exec.sh): a temporary folder $tmp (removed at exit), the counters
# $n (checks) and $fails, and two checks:
#   expect CODE DESCRIPTION -- COMMAND...   runs COMMAND (stdout in $tmp/out,
#                                           stderr in $tmp/err), checks its
#                                           exit code; returns 1 on a mismatch
#   contains FILE TEXT DESCRIPTION          FILE has the line TEXT (fixed string)
# The script ends with: echo "NAME: $n checks, $fails failed"; [ "$fails" = 0 ]
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
n=0

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

contains() {
    n=$((n + 1))
    if ! grep -qF -- "$2" "$1"; then
        echo "FAIL $3: '$2' not found"; head -5 "$1" | sed 's/^/  | /'
        fails=$((fails + 1))
    fi
}
