#!/bin/sh
# Checks that the Makefile's header dependencies (-MMD -MP) work, on a scratch
# copy of a built tree, so the tree itself is left alone:
#   1. the built tree is up to date: `make -n` would compile nothing;
#   2. touching one header (HEADER, default kernels/cpu/fused.h) would compile
#      exactly the objects whose .d file lists it, and fewer than all of them;
#      `make -q` says an includer is out of date and a non-includer is not;
#   3. touching one .c file (SOURCE, default graph/dump.c) would compile that
#      one object and nothing else;
#   4. an object whose .d file is missing would be rebuilt.
# (The test and tool programs, each one .c compiled and linked with
# libgraphfuse.a in one step, are rebuilt whenever the library is: those are
# counted apart, as "relinked".)
# Usage, after `make` or `make test` with the same variables:
#     tools/check_build_deps.sh [BUILD=dir] [GF_CUDA=0] ...
# The arguments go to every make run; BUILD defaults to build.  It prints
# what it found and exits 1 when a check fails.
set -eu

build=build
for a in "$@"; do
    case $a in BUILD=*) build=${a#BUILD=} ;; esac
done
header=${HEADER:-kernels/cpu/fused.h}
source=${SOURCE:-graph/dump.c}
cd "$(dirname "$0")/.."
if [ ! -f "$build/libgraphfuse.a" ]; then
    echo "check_build_deps: no built tree in $build/ (run make first)" >&2
    exit 2
fi

# The sources (tracked or new, as git sees them; without git, every file
# outside build directories) plus the build directory, timestamps kept; the
# build files are hard links where possible, as make -n and make -q only
# read them.
sources() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard
    else
        find . \( -path "./$build" -o -path './build*' -o -path ./.git \) -prune \
            -o -type f -print0
    fi
}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/gf-deps.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
sources | xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf - | tar -C "$scratch" -xf -
mkdir -p "$scratch/$(dirname "$build")"
cp -al "$build" "$scratch/$build" 2>/dev/null || cp -a "$build" "$scratch/$build"
cd "$scratch"

# The goals: what `make` builds plus every test or bench program built so far.
goals="all"
for d in "$build"/tests/*.d; do
    [ -f "$d" ] && goals="$goals ${d%.d}"
done

# The commands `make -n` prints, one a line (the nvcc one spans two).
commands() {
    make -n "$@" $goals 2>&1 | sed -e :a -e '/\\$/N; s/\\\n//; ta'
}
# The objects `make -n` would compile (-c), then the programs it would
# compile and link in one step: each such command passes -MT TARGET.
would_build() {
    commands "$@" | grep -e ' -c ' | sed -n 's/.* -MT \([^ ]*\) .*/\1/p' | sort -u
}
would_link() {
    commands "$@" | grep -v -e ' -c ' | sed -n 's/.* -MT \([^ ]*\) .*/\1/p' | sort -u
}
# The objects whose .d file lists $1 as a prerequisite (not those of the
# fuzzing build in $build/fuzz/, a tree of its own: make fuzz).
objects_d() {
    find "$build" -path "$build/fuzz" -prune -o -name '*.o.d' -print
}
includers() {
    objects_d | xargs grep -l -e " $1\( \|\$\)" |
        sed 's/\.d$//' | sort -u
}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

all_targets=$(objects_d | wc -l)
echo "== $build: $all_targets objects with a .d file; make $*"

# 1. up to date
left=$(would_build "$@"; would_link "$@")
if [ -n "$left" ]; then
    bad "the built tree is not up to date; make -n would compile:"
    echo "$left" | sed 's/^/    /'
    exit 1
fi
ok "make -n compiles nothing in the built tree"

# 2. one header
touch -r "$header" "$scratch/.stamp-h"
touch "$header"
got=$(would_build "$@")
want=$(includers "$header")
n_got=$(echo "$got" | grep -c . || true)
n_want=$(echo "$want" | grep -c . || true)
echo "== touched $header: make -n would compile $n_got of $all_targets objects:"
echo "$got" | sed 's/^/    /'
echo "   and relink $(would_link "$@" | grep -c . || true) program(s) built with the library"
if [ "$got" = "$want" ]; then
    ok "exactly the $n_want objects whose .d lists $header"
else
    bad "the rebuilt set differs from the includers of $header"
    echo "    would compile, not an includer:"
    echo "$got" | grep -vxF -e "$want" | sed 's/^/      /' || true
    echo "    includer, not compiled:"
    echo "$want" | grep -vxF -e "$got" | sed 's/^/      /' || true
fi
if [ "$n_got" -eq 0 ] || [ "$n_got" -ge "$all_targets" ]; then
    bad "$n_got objects would rebuild: expected some, not all $all_targets"
fi
inc=$(echo "$want" | grep '\.o$' | head -n 1)
other=$(find "$build/obj" -name '*.o.d' | sed 's/\.d$//' | sort | grep -vxF -e "$want" | head -n 1)
# make -q: 0 up to date, 1 out of date, 2 an error
q() { rc=0; make -q "$@" >/dev/null 2>&1 || rc=$?; echo "$rc"; }
[ "$(q "$@" "$inc")" = 1 ] && ok "make -q: $inc (includes it) is out of date" ||
    bad "make -q $inc does not say out of date"
[ "$(q "$@" "$other")" = 0 ] && ok "make -q: $other (does not include it) is up to date" ||
    bad "make -q $other does not say up to date"
touch -r "$scratch/.stamp-h" "$header"

# 3. one source file
obj="$build/obj/${source%.c}.o"
touch -r "$source" "$scratch/.stamp-c"
touch "$source"
got=$(would_build "$@")
echo "== touched $source: make -n would compile:"
echo "$got" | sed 's/^/    /'
echo "   and relink $(would_link "$@" | grep -c . || true) program(s) built with the library"
if [ "$got" = "$obj" ]; then
    ok "only $obj"
else
    bad "expected only $obj"
fi
touch -r "$scratch/.stamp-c" "$source"

# 4. a missing .d file (a tree built before -MMD)
rm -f "$other.d"
got=$(would_build "$@")
if [ "$got" = "$other" ]; then
    ok "$other without its .d would be rebuilt, and nothing else"
else
    bad "$other without its .d: make -n would compile '$got'"
fi

if [ "$fail" = 0 ]; then
    echo "== header dependencies: all checks passed"
else
    echo "== header dependencies: some checks FAILED"
fi
exit "$fail"
