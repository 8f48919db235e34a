# blockfp8 build. `make help` lists the targets and options.
#
# `make` builds the library (build/libblockfp8.a, build/libblockfp8.so) and the CLI (build/blockfp8); `make demo`
# runs the main job; `make test` runs the whole suite. `make` never installs packages: it checks what it needs and
# says what is missing; `make deps` installs it (scripts/install-deps.sh, Debian/Ubuntu, as root).
#
# Dependencies: cJSON (required, Debian libcjson-dev; found with pkg-config libcjson, else /usr/include/cjson and
# -lcjson), CUDA 13 (optional: nvcc on PATH or in /usr/local/cuda/bin; CUDA=0 builds without it), clang with
# libFuzzer, python3 with numpy + ml_dtypes and pkg-config (for `make test`). OpenBLAS is not needed to build:
# `blockfp8 bench --baseline openblas` loads it at run time.
#
# Sources are found by wildcard: the library is src/*.c, src/backends/*.c and src/backends/*/*.c, where C files in
# src/backends/cuda/ and files named *_cuda.c need the CUDA toolkit (left out of a CUDA=0 build) and every other one
# is compiled in every build; *_avx2.c files get the AVX2 flags; CUDA code is src/backends/*/*.cu; the CLI is
# tools/*.c, with tools/*.cu when CUDA is built; each tests/test_*.c is one unit-test binary. tests/common/*.c
# (tolerances, error metrics, random data, buffers) is linked into every test binary and the CLI. Header
# dependencies come from the compilers (-MMD).
#
# Parallel by default: a top-level make without -j runs with -j<cores>; stages that must run in order (the test
# suite's) are sequential recipe lines.

BUILD    ?= build
SANITIZE ?= 0
# The virtual environment of the Python package's tests (`make deps` fills it; `make clean` keeps it).
PYTHON_VENV ?= .venv
CUDA     ?= auto
CLANG    ?= clang
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

ifeq ($(MAKELEVEL),0)
  # GNU make 4.3 shows a command-line -j in MAKEFLAGS only inside recipes, so the command line is read from /proc.
  USER_JOBS := $(filter -j% --jobs%,$(MAKEFLAGS) $(shell tr '\0' ' ' </proc/$$PPID/cmdline 2>/dev/null))
  ifeq ($(USER_JOBS),)
    MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
  endif
endif

VERSION := $(shell sed -n 's/^\#define BFP8_VERSION "\([0-9.]*\)".*/\1/p' include/blockfp8.h)
ABI := $(word 1,$(subst ., ,$(VERSION))).$(word 2,$(subst ., ,$(VERSION)))

# --- flags ----------------------------------------------------------------------------------------------------------
ifeq ($(origin CJSON_CFLAGS),undefined)
  CJSON_CFLAGS := $(shell pkg-config --cflags libcjson 2>/dev/null || echo -I/usr/include/cjson)
endif
ifeq ($(origin CJSON_LIBS),undefined)
  CJSON_LIBS := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
endif

# Only the public API (include/*.h, under its visibility pragma) is exported from the shared library.
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Wshadow -Wno-unused-parameter
# A call in the argument order of an older API (0.3 moved output parameters last) fails to build.
CFLAGS_BASE += -Werror=int-conversion -Werror=incompatible-pointer-types
CFLAGS_BASE += -MMD -MP -Iinclude -Isrc $(CJSON_CFLAGS)
LDLIBS_BASE := $(CJSON_LIBS) -ldl -lpthread -lm

ifeq ($(SANITIZE),1)
  CFLAGS_BASE += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS_SAN := -fsanitize=address,undefined
else
  SO_LDFLAGS := -Wl,--no-undefined
endif
ifeq ($(SANITIZE),thread)
  CFLAGS_BASE += -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS_SAN := -fsanitize=thread
endif

# ISA flags only on the kernel files that need them (files named *_avx2.c).
AVX2_FLAGS := -mavx2 -mfma -mf16c

# --- CUDA (optional) ------------------------------------------------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),auto)
  WITH_CUDA := $(if $(NVCC),1,0)
else
  WITH_CUDA := $(CUDA)
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_LIBDIR := $(CUDA_HOME)/lib64
# sm_90a for the Hopper kernels (wgmma/setmaxnreg), sm_89 so the generic mma.sync kernel also runs on Ada, and
# compute_89 PTX so that a newer GPU can JIT the generic kernel (cuda_generic declares no maximum arch; the sm_90a
# code has no PTX, as arch-specific code cannot run on a later arch). SASS is taken over PTX where both fit.
NVCC_GENCODE ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_89,code=[sm_89,compute_89]
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo $(NVCC_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden -Iinclude -Isrc \
             --expt-relaxed-constexpr
# HOPPER_TRACE=1: the hopper kernel stamps its timeline for BFP8_HOPPER_TRACE=1 (diagnosis; slower, so not default)
ifeq ($(HOPPER_TRACE),1)
NVCCFLAGS += -DBFP8_HOPPER_TRACE=1
endif
CUDA_SRCS := $(wildcard src/backends/*/*.cu)
TOOL_CUDA_SRCS := $(wildcard tools/*.cu)
# CUDA objects live in $(BUILD)/cuda, one flat folder (tests/ptxas-check.sh reads the .ptxas.log beside each). The
# sanitizer and clang builds of `make test` link the plain build's (CUDA_OBJDIR=build/cuda): nvcc code is not
# instrumented, and compiling it again would cost minutes.
CUDA_OBJDIR ?= $(BUILD)/cuda
ALL_CUDA_SRCS := $(CUDA_SRCS) $(TOOL_CUDA_SRCS)
ifneq ($(words $(sort $(notdir $(ALL_CUDA_SRCS)))),$(words $(ALL_CUDA_SRCS)))
  $(error two .cu files share a name ($(sort $(notdir $(ALL_CUDA_SRCS)))): CUDA objects go in one folder)
endif
vpath %.cu $(sort $(dir $(ALL_CUDA_SRCS)))

LIB_SRCS := $(wildcard src/*.c src/backends/*.c src/backends/*/*.c)
ifeq ($(WITH_CUDA),1)
  LIB_SRCS := $(filter-out src/cuda_stub.c,$(LIB_SRCS))
  CUDA_OBJS := $(addprefix $(CUDA_OBJDIR)/,$(notdir $(CUDA_SRCS:.cu=.o)))
  # Where the CUDA libraries are, for the dlopen of libcublasLt (src/backends/cuda/cublaslt_dl.c).
  CFLAGS_BASE += -DBFP8_WITH_CUDA=1 -I$(CUDA_HOME)/include -DBFP8_CUDA_LIBDIR='"$(CUDA_LIBDIR)"'
  # cudart is linked statically, libcublasLt is loaded when a device is found and the driver (libcuda.so.1) is
  # reached through cudart: binaries start, quickly and in little memory, on machines without a GPU or driver.
  CUDA_LDLIBS := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++
  LDLIBS_BASE += $(CUDA_LDLIBS) -Wl,-rpath,$(CUDA_LIBDIR)
else
  # hopper's planner (plan.c, knobs.c) is plain C and builds everywhere; its backend.c needs the CUDA launcher.
  LIB_SRCS := $(filter-out src/backends/cuda/% src/backends/hopper/backend.c %_cuda.c,$(LIB_SRCS))
  CUDA_OBJS :=
endif

OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
LIB_A := $(BUILD)/libblockfp8.a
SO_LINK := libblockfp8.so
# 0.x releases break the ABI at each minor version, so the SONAME carries major.minor until 1.0.
SO_NAME := libblockfp8.so.$(ABI)
SO_FILE := libblockfp8.so.$(VERSION)
LIB_SO := $(BUILD)/$(SO_LINK)

TOOL_SRCS := $(wildcard tools/*.c)
# The CLI's CUDA code (its GPU timer's kernels).
TOOL_CUDA_OBJS := $(if $(filter 1,$(WITH_CUDA)),$(addprefix $(CUDA_OBJDIR)/,$(notdir $(TOOL_CUDA_SRCS:.cu=.o))))
TOOL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TOOL_SRCS))
CLI := $(BUILD)/blockfp8
# What the tests and the CLI share (tests/common/); tests/common/*.h use the public API only.
COMMON_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/common/*.c))
# The CLI's GPU timer, for the unit test that exercises it.
CLI_TIMER_OBJS := $(BUILD)/obj/tools/cuda_timer.o $(TOOL_CUDA_OBJS)

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

.PHONY: all lib cli demo quant-bench gpu-tools test check-deps check-test-deps check-unit check-ptxas check-sass check-asan \
        check-clang check-cli check-crosscheck check-exports check-install check-runtime check-nonroot fuzz \
        fuzz-build deps install uninstall clean help tsan check-python print-ldlibs FORCE

all: lib cli

lib: $(LIB_A) $(LIB_SO) $(BUILD)/$(SO_NAME)
cli: $(CLI)

help:
	@echo "blockfp8 $(VERSION)"
	@echo "  make [all]      the library ($(BUILD)/libblockfp8.a, $(BUILD)/libblockfp8.so) and the CLI ($(BUILD)/blockfp8)"
	@echo "  make lib | cli  one of them"
	@echo "  make demo       build, then run the main job (blockfp8 demo)"
	@echo "  make test       the whole suite: unit tests (plain, ASan+UBSan, built by clang), ptxas report, exported"
	@echo "                  symbols, install, memory limits, a non-root CPU-only build, CLI, numpy cross-checks, fuzz"
	@echo "  make deps       install what is missing for the build and the tests (Debian/Ubuntu, as root);"
	@echo "                  make itself never installs anything, it says what is missing"
	@echo "  make install    include/*.h, libblockfp8.so.$(VERSION) (SONAME $(SO_NAME)) and its links, libblockfp8.a,"
	@echo "                  the CLI and blockfp8.pc into DESTDIR+PREFIX (PREFIX=/usr/local by default; BINDIR,"
	@echo "                  LIBDIR, INCLUDEDIR, PKGCONFIGDIR under it); make uninstall removes them"
	@echo "  make tsan       the dispatcher's concurrency test under ThreadSanitizer (not part of make test)"
	@echo "  make check-python  the Python package installed into .venv by pip, and its pytest suite"
	@echo "  make fuzz | gpu-tools | quant-bench | clean"
	@echo "options:"
	@echo "  CUDA=0          build without the CUDA backends even where nvcc exists (default CUDA=auto: with them"
	@echo "                  when nvcc is found; such a build runs on machines without a GPU too)"
	@echo "  SANITIZE=1      ASan+UBSan; BUILD=DIR the build folder (default build); CC=clang another compiler"
	@echo "  HOPPER_TRACE=1  the hopper kernel's timeline stamps (diagnosis)"
	@echo "  -jN             jobs (default: one per core)"

# --- dependencies: checked, never installed -------------------------------------------------------------------------
check-deps:
	@CC="$(CC)" CJSON_CFLAGS="$(CJSON_CFLAGS)" CJSON_LIBS="$(CJSON_LIBS)" sh scripts/install-deps.sh --check-build

check-test-deps:
	@CC="$(CC)" CLANG="$(CLANG)" CJSON_CFLAGS="$(CJSON_CFLAGS)" CJSON_LIBS="$(CJSON_LIBS)" \
	    sh scripts/install-deps.sh --check-test

deps:
	sh scripts/install-deps.sh --all
	sh scripts/install-python-deps.sh $(PYTHON_VENV)

# --- library, CLI, tests --------------------------------------------------------------------------------------------
$(BUILD)/obj/%_avx2.o: %_avx2.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX2_FLAGS) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Itools -Itests $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# ptxas's resource report is kept beside each object (what tests/ptxas-check.sh reads); everything else it prints
# still reaches the terminal.
# The nvcc flags are kept in a file that changes only when they do, and every CUDA object depends on it: a plain
# `make` after `make HOPPER_TRACE=1` (or the other way round) rebuilds the objects instead of reusing the other kind.
CUDA_FLAGS_STAMP := $(CUDA_OBJDIR)/nvcc-flags
$(CUDA_FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(NVCC) $(NVCCFLAGS)' | cmp -s - $@ || echo '$(NVCC) $(NVCCFLAGS)' > $@
FORCE:

$(CUDA_OBJDIR)/%.o: %.cu $(CUDA_FLAGS_STAMP) | check-deps
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -Xptxas -v -c $< -o $@ 2>$(@:.o=.ptxas.log); st=$$?; \
	    grep -vE '^ptxas info|bytes stack frame' $(@:.o=.ptxas.log) >&2; exit $$st

$(LIB_A): $(OBJS) $(CUDA_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# The shared library: SONAME libblockfp8.so.MAJOR.MINOR, static archives' symbols (cudart's) kept inside.
$(BUILD)/$(SO_FILE): $(OBJS) $(CUDA_OBJS)
	$(CC) -shared -Wl,-soname,$(SO_NAME) -Wl,--exclude-libs,ALL $(SO_LDFLAGS) $(LDFLAGS_SAN) $(LDFLAGS) -o $@ $^ \
	    $(LDLIBS_BASE)
$(LIB_SO) $(BUILD)/$(SO_NAME): $(BUILD)/$(SO_FILE)
	ln -sf $(SO_FILE) $@

$(CLI): $(TOOL_OBJS) $(TOOL_CUDA_OBJS) $(COMMON_OBJS) $(LIB_A)
	$(CC) $(LDFLAGS_SAN) $(LDFLAGS) -o $@ $(TOOL_OBJS) $(TOOL_CUDA_OBJS) $(COMMON_OBJS) $(LIB_A) $(LDLIBS_BASE)

# Each test links tests/common and whatever other objects it lists as prerequisites.
$(BUILD)/tests/%: tests/%.c $(COMMON_OBJS) $(LIB_A) | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Itests -Itools $(CPPFLAGS) $(CFLAGS) -o $@ $< $(filter %.o,$^) $(LIB_A) $(LDFLAGS_SAN) \
	    $(LDFLAGS) $(LDLIBS_BASE)
$(BUILD)/tests/test_cuda_timer: $(CLI_TIMER_OBJS)
$(BUILD)/tests/test_bench_tp: $(BUILD)/obj/tools/bench_tp_calc.o $(BUILD)/obj/tools/dsr1_layers.o

# Quantization throughput, scalar vs AVX2 (bench/RESULTS.md, "Vectorized quantization").
$(BUILD)/quant_bench: bench/quant_bench.c $(LIB_A)
	$(CC) $(CFLAGS_BASE) -o $@ $< $(LIB_A) $(LDLIBS_BASE)
quant-bench: $(BUILD)/quant_bench

# Standalone GPU measurement tools (one nvcc command each, no library): the fixed costs of a GPU call and what a
# CTA's first load costs (bench/RESULTS.md). `make test` compiles them wherever nvcc is.
GPU_TOOLS := $(BUILD)/launch_floor $(BUILD)/first_load
$(GPU_TOOLS): $(BUILD)/%: bench/probes/%.cu
	@mkdir -p $(BUILD)
	$(NVCC) -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -MMD -MP -o $@ $<
gpu-tools: $(if $(filter 1,$(WITH_CUDA)),$(GPU_TOOLS))
	@$(if $(filter 1,$(WITH_CUDA)),:,echo "gpu-tools: no nvcc (or CUDA=0), skipped")

-include $(OBJS:.o=.d) $(TOOL_OBJS:.o=.d) $(COMMON_OBJS:.o=.d) $(TEST_BINS:=.d) $(CUDA_OBJS:.o=.d) \
    $(TOOL_CUDA_OBJS:.o=.d) $(GPU_TOOLS:=.d) $(BUILD)/quant_bench.d

# --- install --------------------------------------------------------------------------------------------------------
PC_LIBDIR := $(patsubst $(PREFIX)%,$${prefix}%,$(LIBDIR))
PC_INCLUDEDIR := $(patsubst $(PREFIX)%,$${prefix}%,$(INCLUDEDIR))
# Rewritten only when its text changes.
$(BUILD)/blockfp8.pc: FORCE
	@mkdir -p $(BUILD)
	@{ echo 'prefix=$(PREFIX)'; echo 'libdir=$(PC_LIBDIR)'; echo 'includedir=$(PC_INCLUDEDIR)'; echo; \
	   echo 'Name: blockfp8'; \
	   echo 'Description: DeepSeek-style block-scaled FP8 linear layers (W8A8)'; \
	   echo 'Version: $(VERSION)'; \
	   echo 'Cflags: -I$${includedir}'; \
	   echo 'Libs: -L$${libdir} -lblockfp8'; \
	   echo 'Libs.private: $(strip $(CUDA_LDLIBS) $(CJSON_LIBS) -ldl -lpthread -lm)'; } >$@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@

install: lib cli $(BUILD)/blockfp8.pc
	@test "$(SANITIZE)" != 1 || { echo "install: not a SANITIZE=1 build" >&2; exit 1; }
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0644 $(wildcard include/*.h) $(DESTDIR)$(INCLUDEDIR)/
	install -m 0755 $(BUILD)/$(SO_FILE) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(LIBDIR)/$(SO_LINK)
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(CLI) $(DESTDIR)$(BINDIR)/
	install -m 0644 $(BUILD)/blockfp8.pc $(DESTDIR)$(PKGCONFIGDIR)/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(wildcard include/*.h)))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(SO_FILE) $(SO_NAME) $(SO_LINK) libblockfp8.a)
	rm -f $(DESTDIR)$(BINDIR)/blockfp8 $(DESTDIR)$(PKGCONFIGDIR)/blockfp8.pc

# --- the main job ---------------------------------------------------------------------------------------------------
# The quick start's two commands, `make demo` and `make test`, run `make deps` first where something is missing
# (installing needs root), so that they work on a fresh machine; every other target, plain `make` included, only
# checks and says what is missing.
demo:
	@$(MAKE) --no-print-directory -s check-deps >/dev/null 2>&1 || $(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory all
	./$(CLI) demo

# --- tests ----------------------------------------------------------------------------------------------------------
# The whole suite, one stage after the other (each stage builds in parallel): plain build and unit tests, ptxas
# report, the kernels' SASS, GPU tools compiled, the exported symbols, install, what the CLI loads (memory limits,
# OpenBLAS), a non-root CPU-only build, the sanitizer build, the clang build, CLI end-to-end, numpy cross-check,
# short fuzz.
test:
	@{ $(MAKE) --no-print-directory -s check-test-deps && sh scripts/install-python-deps.sh --check $(PYTHON_VENV); } \
	    >/dev/null 2>&1 || $(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory check-test-deps
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory check-unit
	$(MAKE) --no-print-directory check-ptxas
	$(MAKE) --no-print-directory check-sass
	$(MAKE) --no-print-directory gpu-tools
	$(MAKE) --no-print-directory check-exports
	$(MAKE) --no-print-directory check-install
	$(MAKE) --no-print-directory check-runtime
	$(MAKE) --no-print-directory check-nonroot
	$(MAKE) --no-print-directory check-asan
	$(MAKE) --no-print-directory check-clang
	$(MAKE) --no-print-directory check-cli
	$(MAKE) --no-print-directory check-crosscheck
	$(MAKE) --no-print-directory check-python
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-30}
	@echo "make test: all stages passed"

check-unit: $(TEST_BINS) $(CLI)
	@sh tests/run-unit.sh $(BUILD)

# The hopper kernels as compiled: no spills, no wgmma serialized by ptxas (tests/ptxas-check.sh says why).
check-ptxas: all
	@sh tests/ptxas-check.sh $(CUDA_OBJDIR) $(WITH_CUDA)

# The hopper kernels as assembled: each issues QGMMA, none touches local memory (tests/sass-check.sh says why).
check-sass: all
	@sh tests/sass-check.sh $(CUDA_OBJDIR) $(WITH_CUDA) $(PYTHON_VENV)

# libblockfp8.so exports exactly the functions declared in include/*.h.
check-exports: lib
	@sh tests/check-exports.sh $(BUILD)/$(SO_FILE) include

# make install into a temporary DESTDIR, then programs built against it with pkg-config, shared and static.
check-install: all
	@sh tests/install-test.sh "$(MAKE)" $(BUILD) "$(CC)"

# What the CLI loads at start: under a memory limit it finishes (never hangs); OpenBLAS only when asked for.
check-runtime: all
	@sh tests/runtime-deps.sh $(BUILD)

# A copy of the tree built and demoed with CUDA=0 as an unprivileged user, pkg-config finding nothing; and without
# cJSON, a clear message and nothing compiled or installed.
check-nonroot:
	@sh tests/nonroot-build.sh

check-asan:
	$(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 CUDA_OBJDIR=$(CUDA_OBJDIR) check-unit

check-clang:
	@if command -v $(CLANG) >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory BUILD=build-clang CC=$(CLANG) CUDA_OBJDIR=$(CUDA_OBJDIR) check-unit; \
	else echo "check-clang: $(CLANG) not found (run \`make deps\` as root, or install clang)"; exit 1; fi

# The concurrency test under ThreadSanitizer (its own CPU-only build: TSan excludes ASan, and the CUDA runtime is
# not instrumented). On demand, not part of `make test`.
tsan:
	$(MAKE) --no-print-directory BUILD=build-tsan SANITIZE=thread CUDA=0 build-tsan/tests/test_concurrency
	TSAN_OPTIONS="halt_on_error=1 $${TSAN_OPTIONS:-}" ./build-tsan/tests/test_concurrency

check-cli: $(CLI)
	@sh tests/cli.sh $(BUILD)

check-crosscheck: $(CLI)
	for f in tests/crosscheck_*.py; do python3 $$f --build $(BUILD) || exit 1; done

# The Python package (python/blockfp8, tests/python): built into a virtual environment by pip, as a user installs
# it, then its pytest suite (scripts/install-python-deps.sh puts numpy, ml_dtypes, pytest and torch there).
check-python: $(CLI)
	@sh scripts/install-python-deps.sh --check $(PYTHON_VENV)
	BFP8_BUILD_DIR=$(BUILD) $(PYTHON_VENV)/bin/python -m pip install --no-build-isolation --no-deps --quiet .
	BFP8_CLI=$(CURDIR)/$(CLI) $(PYTHON_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/python

# The link line of a program that uses $(LIB_A) (setup.py links the Python extension with it).
print-ldlibs:
	@echo $(LDLIBS_BASE)

# --- fuzzing (clang libFuzzer) --------------------------------------------------------------------------------------
FUZZ_BIN := build-fuzz/fuzz_safetensors
FUZZ_SECONDS ?= 30
FUZZ_CC ?= $(CLANG)
FUZZ_SRCS := fuzz/fuzz_safetensors.c src/safetensors.c src/errors.c src/formats.c
# Only what the four sources need: the CUDA libraries of LDLIBS_BASE would make the binary need libcuda.so.1.
fuzz-build: $(FUZZ_BIN)
$(FUZZ_BIN): $(FUZZ_SRCS) $(wildcard include/*.h src/*.h)
	@mkdir -p build-fuzz
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc $(CJSON_CFLAGS) \
	  -o $@ $(FUZZ_SRCS) $(CJSON_LIBS) -lpthread -lm
fuzz: $(FUZZ_BIN)
	@mkdir -p build-fuzz/corpus
	./$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 build-fuzz/corpus fuzz/corpus

clean:
	rm -rf $(BUILD) build-asan build-clang build-tsan build-fuzz
