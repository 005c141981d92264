#!/bin/sh
# Source this on a machine without the Debian build dependencies (the GPU
# machine: see README.md, "GPU machine"): unpacks the .deb files kept in .deb/
# into a private sysroot and points the compiler and loader at it.
#   . tools/gpu_env.sh && make -j16 build/graphfuse
GF_SYSROOT=${GF_SYSROOT:-/tmp/gf-sysroot}
if [ ! -d "$GF_SYSROOT/usr" ]; then
    for f in .deb/*.deb; do dpkg -x "$f" "$GF_SYSROOT"; done
fi
L=$GF_SYSROOT/usr/lib/x86_64-linux-gnu
export CPATH="$GF_SYSROOT/usr/include:$GF_SYSROOT/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}"
export LIBRARY_PATH="$L:$L/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GF_SKIP_DEPS=1
