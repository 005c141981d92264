# graphfuse — build, test, demo, bench.  `make help` lists the targets.
CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
SAN     ?=
CFLAGS  ?= -O2 -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC $(SAN)
override CFLAGS += -Igraph -Ipasses -Ikernels -Iexecutor -I$(BUILD)/gen
override LDFLAGS += $(SAN)

# Header dependencies: every compile writes TARGET.d (-MMD: the headers it
# read, not the system's; -MP: an empty rule per header, so a header that goes
# away is no error), included at the end of this file.  So touching a header
# rebuilds only what includes it (tools/check_build_deps.sh checks that).
DEPFLAGS = -MMD -MP -MT $@ -MF $@.d
# The generated ONNX header, which sources include, must exist before the
# first compile (when there is no .d yet): an order-only prerequisite of each.
GEN_H   := $(BUILD)/gen/onnx.pb-c.h

# ---- backends: the CPU's is always built; one block per other backend ------
# A switch is 1 (built, the default) or 0: GF_OPENCL=0 builds without OpenCL
# (no OpenCL headers, library or ICD needed; --backend opencl then says so).
# kernels/registry.c lists each backend under its switch (docs/backends.md).
BACKEND_SRC  := $(wildcard kernels/cpu/*.c)
BACKEND_OBJ  :=
BACKEND_LIBS :=
BACKEND_PKGS :=
BACKEND_OFF  :=

GF_OPENCL ?= 1
override CFLAGS += -DGF_OPENCL=$(GF_OPENCL)
ifeq ($(GF_OPENCL),1)
BACKEND_SRC  += $(wildcard kernels/opencl/*.c)
BACKEND_OBJ  += $(BUILD)/obj/gen/cl_sources.o
BACKEND_LIBS += -lOpenCL
BACKEND_PKGS += pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers clinfo
else
BACKEND_OFF  += tests/test_opencl_%.c
endif

# CUDA: built when nvcc is found (in PATH, else /usr/local/cuda/bin); GF_CUDA=0
# builds without it.  .cu files go through nvcc for sm_90 (Hopper) plus PTX,
# the host .c files through $(CC); linked against the toolkit's cudart and
# cuBLASLt (no Debian package: the toolkit is NVIDIA's, so nothing for deps).
# --fmad=false: no FMA contraction, so kernels round as the CPU's do.
GF_NVCC := $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
GF_CUDA ?= $(if $(GF_NVCC),1,0)
override CFLAGS += -DGF_CUDA=$(GF_CUDA)
ifeq ($(GF_CUDA),1)
ifeq ($(GF_NVCC),)
$(error GF_CUDA=1 but nvcc is neither in PATH nor in /usr/local/cuda/bin)
endif
CUDA_HOME  ?= $(patsubst %/bin/,%,$(dir $(GF_NVCC)))
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O2 -g -lineinfo
CU_SRC     := $(wildcard kernels/cuda/*.cu)
BACKEND_SRC  += $(wildcard kernels/cuda/*.c)
BACKEND_OBJ  += $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CU_SRC))
BACKEND_LIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
$(BUILD)/obj/kernels/cuda/%.o: kernels/cuda/%.c | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -isystem $(CUDA_HOME)/include -c $< -o $@
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(GF_NVCC) $(NVCCFLAGS) -std=c++17 --fmad=false $(CUDA_ARCH) -Ikernels/cuda $(DEPFLAGS) \
	    -Xcompiler -fPIC,-Wall,-Wextra -Werror all-warnings -c $< -o $@
else
BACKEND_OFF  += tests/test_cuda_%.c
endif

LIBS    := -lprotobuf-c -lyaml -lopenblas $(BACKEND_LIBS) -lm -lpthread

DEB_PKGS := libprotobuf-c-dev protobuf-c-compiler libonnx-dev libyaml-dev \
            libcmocka-dev libonnx-testdata graphviz libopenblas-dev wamerican gnuplot-nox \
            $(BACKEND_PKGS)
ONNX_PROTO := /usr/include/onnx/onnx.proto

LIB_SRC := $(wildcard graph/*.c passes/*.c kernels/*.c executor/*.c) $(BACKEND_SRC)
LIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(BUILD)/obj/gen/onnx.pb-c.o \
           $(BACKEND_OBJ)
CL_SRC  := $(wildcard kernels/opencl/*.cl)
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out $(BACKEND_OFF),$(wildcard tests/test_*.c)))
HEADERS := graph/gf_graph.h graph/ops.def graph/gf_half.h passes/gf_passes.h kernels/gf_kernels.h \
           executor/gf_exec.h executor/gf_tune.h


.PHONY: FORCE conformance conformance-update all deps lib test test-unit test-bad test-roundtrip test-asan demo bench bench-opencl bench-cuda \
        install clean help bad-corpus check-links fuzz fuzz-deps fuzz-build fuzz-harnesses
all: deps lib $(BUILD)/graphfuse $(BUILD)/graphfuse.pc $(BUILD)/models/matmul.onnx

help:
	@echo "make            build library, CLI and graphfuse.pc (installs deps)"
	@echo "make test       build and run every test"
	@echo "make test-asan  the same under AddressSanitizer + UBSan (build-asan/)"
	@echo "make test-unit  only the C unit tests (tests/test_*.c)"
	@echo "make test-bad   only the malformed-input tests (tests/bad/, test_runtime_bad)"
	@echo "make test-roundtrip  only the load/save round trip over libonnx-testdata"
	@echo "make fuzz SECONDS=60  every libFuzzer harness of tests/fuzz/ for SECONDS each"
	@echo "make check-links  every relative link and #anchor of README.md and docs/*.md resolves"
	@echo "make demo       run the bundled model, train it on a word list, sample words"
	@echo "make bench      load/save speed against bare protobuf-c"
	@echo "make bench-opencl ARGS=\"--device NAME\"  OpenCL kernel bandwidth (--small: quick)"
	@echo "make bench-cuda HF_ARGS=\"--steps 5\"  CUDA kernels, GEMMs; PyTorch side by side on a GPU"
	@echo "make install PREFIX=/usr/local"

# Installs missing Debian packages (prints the apt-get line when not root).
deps: $(BUILD)/.deps-ok
$(BUILD)/.deps-ok: tools/deps.sh
	@tools/deps.sh $(DEB_PKGS)
	@mkdir -p $(BUILD) && touch $@

# C bindings for ONNX, generated from the schema Debian installs.
# (GF_SKIP_DEPS=1: a machine without protoc-c uses the files generated
# elsewhere and carried over in $(BUILD)/gen; see tools/gpu_env.sh.)
# A pattern rule, as one run makes both files: under -j an explicit rule with
# two targets may run twice at once.
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: $(if $(filter 1,$(GF_SKIP_DEPS)),,$(ONNX_PROTO)) | $(BUILD)/.deps-ok
	@mkdir -p $(BUILD)/gen
	cp $(ONNX_PROTO) $(BUILD)/gen/onnx.proto
	cd $(BUILD)/gen && protoc-c --c_out=. onnx.proto

$(BUILD)/obj/gen/onnx.pb-c.o: $(BUILD)/gen/onnx.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Werror -Wextra,$(CFLAGS)) $(DEPFLAGS) -c $< -o $@

# OpenCL kernel sources embedded as strings (kernels/opencl/ocl.h: gf_cl_source);
# rewritten when a .cl file changes, appears or goes away: the list of files
# embedded last time is kept next to it, and a different list forces a run.
CL_LIST := $(BUILD)/gen/cl_sources.list
ifneq ($(strip $(CL_SRC)),$(strip $(file <$(CL_LIST))))
$(BUILD)/gen/cl_sources.c: FORCE
endif
$(BUILD)/gen/cl_sources.c: $(CL_SRC) tools/embed_cl.sh
	@mkdir -p $(BUILD)/gen
	@tools/embed_cl.sh $@ $(CL_SRC)
	@touch $@
	@echo '$(CL_SRC)' >$(CL_LIST)

$(BUILD)/obj/gen/cl_sources.o: $(BUILD)/gen/cl_sources.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# The shared library's file is libgraphfuse.so.$(GF_SOVERSION), which is also
# its SONAME (what a program linked with -lgraphfuse asks the loader for);
# libgraphfuse.so is a symlink to it, for the linker, ctypes and pkg-config.
# GF_SOVERSION is the ABI's version: raise it when a change breaks programs
# built against the previous one.  (The archive is made afresh, so a member
# whose source went away does not linger in it.)
GF_SOVERSION := 0
GF_SONAME    := libgraphfuse.so.$(GF_SOVERSION)
lib: $(BUILD)/libgraphfuse.a $(BUILD)/libgraphfuse.so
$(BUILD)/libgraphfuse.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/$(GF_SONAME): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(GF_SONAME) -o $@ $^ $(LDFLAGS) $(LIBS)
$(BUILD)/libgraphfuse.so: $(BUILD)/$(GF_SONAME)
	ln -sf $(GF_SONAME) $@

CLI_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cli/*.c))
$(BUILD)/graphfuse: $(CLI_OBJ) $(BUILD)/libgraphfuse.a
	$(CC) -o $@ $^ $(LDFLAGS) $(LIBS)

# pkg-config file for PREFIX (regenerated when PREFIX changes)
GF_VERSION = $(shell sed -n 's/^\#define GF_VERSION "\(.*\)"/\1/p' graph/gf_graph.h)
define PC_TEXT
prefix=$(PREFIX)
libdir=$${prefix}/lib
includedir=$${prefix}/include

Name: graphfuse
Description: ONNX graph fusion, execution and training
Version: $(GF_VERSION)
Requires.private: libprotobuf-c yaml-0.1 openblas
Libs: -L$${libdir} -lgraphfuse
Libs.private: $(BACKEND_LIBS) -lm -lpthread
Cflags: -I$${includedir}/graphfuse
endef
export PC_TEXT
$(BUILD)/graphfuse.pc: FORCE
	@mkdir -p $(BUILD)
	@printf '%s\n' "$$PC_TEXT" > $@.new
	@cmp -s $@.new $@ && rm -f $@.new || mv $@.new $@
FORCE:

# ---- tests ------------------------------------------------------------------
$(BUILD)/tests/%: tests/%.c $(BUILD)/libgraphfuse.a | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -Itests -o $@ $< $(BUILD)/libgraphfuse.a $(LDFLAGS) $(LIBS) -lcmocka

# Each test prints "== NAME" before it runs and "-- NAME: C s CPU, W s wall"
# after (CPU = user + sys of it and its children, from the shell's `times`);
# the ten costliest are listed at the end and all are kept in
# $(BUILD)/test-times.txt (CPU s, wall s, name).  The OpenCL tests on a CPU
# device (PoCL) try a covering subset of their kernel configs;
# GRAPHFUSE_TEST_ALL_CONFIGS=1 tries every one (the GPU machine's run).
test: check-links all $(TESTS)
	@set -e; log=$(BUILD)/test-times.txt; tf=$(BUILD)/.test-times.tmp; : >$$log; \
	timed() { \
	    name=$$1; shift; echo "== $$name"; \
	    times >$$tf; { read -r _ _; read -r u0 s0; } <$$tf; w0=$$(date +%s.%N); \
	    "$$@" || { echo "** $$name failed"; exit 1; }; \
	    w1=$$(date +%s.%N); times >$$tf; { read -r _ _; read -r u1 s1; } <$$tf; \
	    echo "$$u0 $$s0 $$u1 $$s1 $$w0 $$w1" | awk -v name="$$name" -v out="$$log" ' \
	        function s(x) { sub(/s$$/, "", x); split(x, p, "m"); return p[1] * 60 + p[2] } \
	        { c = s($$3) + s($$4) - s($$1) - s($$2); c = c < 0 ? 0 : c; w = $$6 - $$5; \
	          printf "-- %s: %.1f s CPU, %.1f s wall\n", name, c, w; \
	          printf "%8.1f %8.1f  %s\n", c, w, name >> out }'; \
	}; \
	for t in $(TESTS); do timed $$t $$t; done; \
	for s in tests/run_*.sh; do timed $$s $$s $(BUILD)/graphfuse; done; \
	timed tests/conformance.sh tests/conformance.sh $(BUILD)/graphfuse; \
	timed "bundled models against PyTorch's recorded outputs" \
	    $(BUILD)/graphfuse test --atol 1e-5 models/*/legacy models/*/dynamo; \
	rm -f $$tf; \
	echo "== the ten costliest (CPU s, wall s; all in $$log)"; sort -rn $$log | head -n 10; \
	awk '{ c += $$1 } END { printf "== all tests passed (%.1f CPU-minutes)\n", c / 60 }' $$log

# The documentation's relative links and #anchors (README.md, docs/*.md) resolve;
# part of `make test` (a few milliseconds).
check-links:
	@tools/check_links.sh

# Parts of `make test`, for a quicker loop: the C unit tests; the malformed
# models of tests/bad/ through the CLI and the runtime's bad inputs; the
# load/save round trip over Debian's libonnx-testdata.
test-unit: all $(TESTS)
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t || { echo "** $$t failed"; exit 1; }; done
test-bad: all $(BUILD)/tests/test_runtime_bad
	tests/run_bad.sh $(BUILD)/graphfuse
	$(BUILD)/tests/test_runtime_bad
test-roundtrip: all $(BUILD)/tests/test_roundtrip
	$(BUILD)/tests/test_roundtrip

# ONNX node tests through `graphfuse test`, compared with the recorded list.
conformance: all
	@tests/conformance.sh $(BUILD)/graphfuse
conformance-update: all
	@tests/conformance.sh $(BUILD)/graphfuse --update

# (the OpenCL runtime keeps some allocations until exit: tests/lsan.supp)
# Builds in build-asan/, or DIR-asan/ for `make BUILD=DIR test-asan`; the
# OpenCL program caches are the plain run's (PoCL's ~/.cache/pocl), so a
# run after `make test` compiles no OpenCL program again.
test-asan: deps
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	$(MAKE) BUILD=$(if $(filter command line,$(origin BUILD)),$(BUILD:%-asan=%)-asan,build-asan) \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" CFLAGS="-O1 -g" test

# ---- demo and bench ---------------------------------------------------------
DEMO_MODEL := models/llama_tiny/legacy/model.onnx
# the training demo: the Llama-style model as a character-level model of the
# lowercase words of /usr/share/dict/words (Debian's wamerican); its RoPE
# buffer `expand` is an initializer of the dynamo file, so it is frozen
DEMO_TRAIN := models/llama_tiny/dynamo/model.onnx
DEMO_CHARS := '  \n  abcdefghijklmnopqrstuvwxyz'
demo: all $(BUILD)/words2tokens
	$(BUILD)/graphfuse info $(DEMO_MODEL)
	$(BUILD)/graphfuse dump $(DEMO_MODEL)
	@echo "== running the model on its recorded inputs (PyTorch's outputs as reference)"
	$(BUILD)/graphfuse test --atol 1e-5 --profile $(dir $(DEMO_MODEL))
	@echo "== training it on the words of /usr/share/dict/words (300 AdamW steps)"
	@tools/deps.sh wamerican
	@mkdir -p $(BUILD)/demo
	$(BUILD)/words2tokens /usr/share/dict/words $(BUILD)/demo/words.u16
	$(BUILD)/graphfuse train $(DEMO_TRAIN) --tokens $(BUILD)/demo/words.u16 --batch 32 \
	    --seq 64 --steps 300 --optimizer adamw --lr 1e-2 --warmup 20 --schedule cosine \
	    --min-lr 1e-4 --clip-grad-norm 1 --freeze '^expand$$' --seed 1 \
	    --log $(BUILD)/demo/train.csv -o $(BUILD)/demo/llama_words.onnx
	@echo "== ten made-up words sampled from the trained model"
	$(BUILD)/graphfuse generate $(BUILD)/demo/llama_words.onnx --chars $(DEMO_CHARS) -n 10 \
	    --seed 7

$(BUILD)/words2tokens: tools/words2tokens.c
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(LDFLAGS)

# Y = A @ B with symbolic M, K, N (graphfuse tune --dim M=...; tests/run_tune.sh)
$(BUILD)/models/matmul.onnx: $(BUILD)/gen_matmul
	@mkdir -p $(dir $@)
	$(BUILD)/gen_matmul $@

$(BUILD)/gen_matmul: tools/gen_matmul.c $(BUILD)/libgraphfuse.a | $(GEN_H)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(BUILD)/libgraphfuse.a $(LDFLAGS) $(LIBS)

BENCHES := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/bench_opencl%,$(wildcard tests/bench_*.c)))
# Then the OpenCL benchmarks: in full on an OpenCL GPU (bench-opencl), else
# (PoCL) the fused kernels' smoke run, whose sizes are too small to compare.
bench: all $(BENCHES) $(BUILD)/tests/bench_opencl $(BUILD)/tests/bench_opencl_matmul
	@set -e; for b in $(BENCHES); do echo "== $$b"; $$b $(BUILD)/bench; done
	@if $(BUILD)/graphfuse backends | grep -q '(GPU'; then \
	    $(MAKE) --no-print-directory bench-opencl; \
	else \
	    echo "== $(BUILD)/tests/bench_opencl --small (no OpenCL GPU: a smoke run)"; \
	    $(BUILD)/tests/bench_opencl --small; \
	fi

# OpenCL kernel benchmarks: the fused kernels' bandwidth (bench_opencl, with
# $(ARGS): make bench-opencl ARGS="--device H200"; ARGS="--small" for a quick
# run, e.g. on PoCL), then MatMul 4096^3 over every config (bench_opencl_matmul,
# same $(ARGS); --small: 512^3).
bench-opencl: all $(BUILD)/tests/bench_opencl $(BUILD)/tests/bench_opencl_matmul
	@echo "== $(BUILD)/tests/bench_opencl $(ARGS)"
	@$(BUILD)/tests/bench_opencl $(ARGS)
	@echo "== $(BUILD)/tests/bench_opencl_matmul $(ARGS)"
	@$(BUILD)/tests/bench_opencl_matmul $(ARGS)

# The CUDA backend on an NVIDIA GPU (docs/backends.md, "CUDA"): the fused
# kernels' bandwidth against the card's copy, cross-entropy, linear
# cross-entropy and attention (each checked against the CPU first), the 160M
# Llama's GEMM shapes with cuBLASLt's default against the tuned candidate;
# then, where python3 has torch and transformers (the GPU machine),
# PyTorch's SDPA and cross-entropy at the same shapes and the 160M Llama's
# training step on cuda and opencl next to PyTorch eager fp32, same weights
# and batch (tools/hf_bench.py; its options in HF_ARGS="--steps 5").
CUDA_BENCHES := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/bench_cuda_*.c))
bench-cuda: all $(CUDA_BENCHES)
	@if ! $(BUILD)/graphfuse backends | grep -q '^cuda: available'; then \
	    echo "bench-cuda: no CUDA device here ($(BUILD)/graphfuse backends)"; exit 1; fi
	@set -e; for b in $(CUDA_BENCHES); do echo "== $$b"; $$b; done
	@if python3 -c 'import torch, transformers' 2>/dev/null; then \
	    set -e; echo "== tools/bench_sdpa.py"; python3 tools/bench_sdpa.py; \
	    echo "== tools/hf_bench.py --preset 160m --backend cuda,opencl $(HF_ARGS)"; \
	    python3 tools/hf_bench.py --preset 160m --backend cuda,opencl --modes fused \
	        --torch-device cuda --graphfuse $(BUILD)/graphfuse $(HF_ARGS); \
	else \
	    echo "bench-cuda: python3 has no torch / transformers: PyTorch's side skipped"; \
	fi

$(BUILD)/tests/bench_%: tests/bench_%.c $(BUILD)/libgraphfuse.a | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -Itests -o $@ $< $(BUILD)/libgraphfuse.a $(LDFLAGS) $(LIBS)

# Regenerates the malformed-model corpus in tests/bad/ (committed).
bad-corpus: all $(BUILD)/tests/gen_bad
	$(BUILD)/tests/gen_bad tests/bad

$(BUILD)/tests/gen_bad: tests/bad/gen_bad.c $(BUILD)/libgraphfuse.a | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(BUILD)/libgraphfuse.a $(LDFLAGS) $(LIBS)

# ---- fuzzing ------------------------------------------------------------------
# libFuzzer harnesses (tests/fuzz/fuzz_*.c: the loader, the optimizer, the
# tensor .pb reader, the autotune cache, load + plan + run on the CPU), each
# run for $(SECONDS) seconds by tests/fuzz/run.sh, which gathers the seeds,
# prints executions and coverage per harness and fails on a crash, leak or
# timeout (inputs in $(BUILD)/fuzz/crashes/).  The library is built again
# in $(BUILD)/fuzz/ by clang with coverage for libFuzzer, ASan and UBSan
# (no OpenCL, no CUDA); clang-14 and libclang-rt-14-dev (libFuzzer) come from
# Debian, installed here rather than by `make deps` as only fuzzing needs them.
SECONDS   ?= 60
FUZZ_CC   ?= clang-14
FUZZ_PKGS := clang-14 libclang-rt-14-dev
FUZZ_SAN  := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
             -fno-omit-frame-pointer
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/%,$(wildcard tests/fuzz/fuzz_*.c))

fuzz: all fuzz-build
	@tests/fuzz/run.sh $(BUILD)/fuzz $(SECONDS) $(BUILD)/graphfuse
fuzz-deps: deps
	@tools/deps.sh $(FUZZ_PKGS)
fuzz-build: fuzz-deps
	@mkdir -p $(BUILD)/fuzz
	$(MAKE) --no-print-directory BUILD=$(BUILD)/fuzz CC=$(FUZZ_CC) GF_OPENCL=0 GF_CUDA=0 \
	    CFLAGS="-O1 -gline-tables-only" SAN="$(FUZZ_SAN)" fuzz-harnesses
# (inside that make: BUILD is the fuzz folder)
fuzz-harnesses: $(FUZZ_BINS)
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(BUILD)/libgraphfuse.a | $(GEN_H)
	$(CC) $(CFLAGS) $(DEPFLAGS) -fsanitize=fuzzer -Itests/fuzz -o $@ $< \
	    $(BUILD)/libgraphfuse.a $(LDFLAGS) $(LIBS)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/graphfuse $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libgraphfuse.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/$(GF_SONAME) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(GF_SONAME) $(DESTDIR)$(PREFIX)/lib/libgraphfuse.so
	install -m 755 $(BUILD)/graphfuse $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/graphfuse/
	install -m 644 $(BUILD)/graphfuse.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -d $(DESTDIR)$(PREFIX)/share/doc/graphfuse/docs
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/graphfuse/
	install -m 644 $(wildcard docs/*.md) $(DESTDIR)$(PREFIX)/share/doc/graphfuse/docs/

clean:
	rm -rf $(BUILD) $(BUILD)-asan

# ---- header dependencies ----------------------------------------------------
# Every target compiled with $(DEPFLAGS) and the .d file each one wrote.  A
# target built before there were .d files (or whose .d went missing) is
# rebuilt once, as nothing else would tell which headers it depends on.
DEP_TARGETS := $(LIB_OBJ) $(CLI_OBJ) $(TESTS) \
               $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/bench_*.c)) \
               $(BUILD)/words2tokens $(BUILD)/gen_matmul $(BUILD)/tests/gen_bad $(FUZZ_BINS)
DEP_FILES   := $(wildcard $(DEP_TARGETS:=.d))
DEP_NONE    := $(filter-out $(DEP_FILES:.d=),$(wildcard $(DEP_TARGETS)))
ifneq ($(DEP_NONE),)
$(DEP_NONE): FORCE
endif
-include $(DEP_FILES)
