# Sourced by tests/run_*.sh (not run itself).
#
# gfx OUT ARGS...: "$gf" ARGS with stdout and stderr in OUT, its exit code.
# Under make test-asan, LeakSanitizer's tracer can crash while it stops a
# process with PoCL's threads at exit ("Tracer caught signal 11 ...
# LeakSanitizer has encountered a fatal error"; e.g. gpt2 legacy on OpenCL,
# every time): the sanitizer failing, not graphfuse.  Such a run is
# repeated with leak detection off; AddressSanitizer's other checks and
# UBSan stay on.
gfx() {
    gfx_out=$1
    shift
    "$gf" "$@" >"$gfx_out" 2>&1
    gfx_rc=$?
    if grep -q 'LeakSanitizer has encountered a fatal error' "$gfx_out"; then
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$gf" "$@" >"$gfx_out" 2>&1
        gfx_rc=$?
    fi
    return $gfx_rc
}
