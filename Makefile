# blockfp8 build. `make` builds the library and the CLI; `make demo` runs the main job; `make test` runs the
# whole suite (unit tests, the same under ASan+UBSan, the ptxas report, the GPU tools compiled where nvcc is, the
# numpy cross-check and a short fuzz run).
#
# Dependencies: cJSON (required, Debian libcjson-dev), OpenBLAS (optional: the CPU bench baseline, Debian
# libopenblas-dev, found with pkg-config), CUDA 13 (optional: nvcc on PATH or in /usr/local/cuda/bin),
# clang (optional: the fuzzer), python3 with numpy + ml_dtypes (the cross-check in `make test`).
# scripts/install-deps.sh installs what is missing; `make` runs it itself when cJSON is absent and it is root.

BUILD    ?= build
CC       ?= cc
SANITIZE ?= 0
CUDA     ?= auto

CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -Wall -Wextra -Wshadow -Wno-unused-parameter -Iinclude -Isrc
CFLAGS_BASE += $(shell pkg-config --cflags libcjson 2>/dev/null || echo -I/usr/include/cjson)
LDLIBS_BASE := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) -lpthread -lm

ifeq ($(SANITIZE),1)
  CFLAGS_BASE += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS_SAN := -fsanitize=address,undefined
endif

# ISA flags only on the kernel files that need them (files named *_avx2.c).
AVX2_FLAGS := -mavx2 -mfma -mf16c

# --- CUDA (optional) ----------------------------------------------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),auto)
  WITH_CUDA := $(if $(NVCC),1,0)
else
  WITH_CUDA := $(CUDA)
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90a for the Hopper kernels (wgmma/setmaxnreg), sm_89 so the generic mma.sync kernel also runs on Ada.
NVCC_GENCODE ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_89,code=sm_89
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo $(NVCC_GENCODE) -Xcompiler -fPIC -Iinclude -Isrc --expt-relaxed-constexpr
# HOPPER_TRACE=1: the hopper kernel stamps its timeline for BFP8_HOPPER_TRACE=1 (diagnosis; slower, so not default)
ifeq ($(HOPPER_TRACE),1)
NVCCFLAGS += -DBFP8_HOPPER_TRACE=1
endif
CUDA_SRCS := $(wildcard src/backends/cuda/*.cu)
# CUDA objects are shared by the plain and the sanitizer builds (nvcc code is not instrumented).
CUDA_OBJDIR := build/cuda

SRCS := $(wildcard src/*.c src/backends/*.c)
ifeq ($(WITH_CUDA),1)
  SRCS := $(filter-out src/cuda_stub.c,$(SRCS)) $(wildcard src/backends/cuda/*.c)
  CUDA_OBJS := $(patsubst src/backends/cuda/%.cu,$(CUDA_OBJDIR)/%.o,$(CUDA_SRCS))
  CFLAGS_BASE += -DBFP8_WITH_CUDA=1 -I$(CUDA_HOME)/include
  LDLIBS_BASE += -L$(CUDA_HOME)/lib64 -lcublasLt -lcudart_static -ldl -lrt -lstdc++
  # No -lcuda: the driver is reached through cudart (cudaGetDriverEntryPoint), so binaries start on machines
  # without a driver and say why CUDA is unavailable.
  LDLIBS_BASE += -Wl,-rpath,$(CUDA_HOME)/lib64
else
  SRCS := $(filter-out src/backends/cuda/%,$(SRCS))
  CUDA_OBJS :=
endif

OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(SRCS))
LIB_A := $(BUILD)/libblockfp8.a
LIB_SO := $(BUILD)/libblockfp8.so

# --- OpenBLAS (optional, CLI bench baseline) ----------------------------------------------------------------------
OPENBLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null)
ifneq ($(OPENBLAS_LIBS),)
  TOOL_CFLAGS := -DBFP8_HAVE_OPENBLAS=1 $(OPENBLAS_CFLAGS)
  TOOL_LIBS := $(OPENBLAS_LIBS)
endif

TOOL_SRCS := $(wildcard tools/*.c)
TOOL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TOOL_SRCS))
CLI := $(BUILD)/blockfp8

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

.PHONY: all lib cli demo quant-bench gpu-tools test check-unit check-asan check-crosscheck check-cli check-python print-ldlibs fuzz fuzz-build deps clean help

all: $(BUILD)/.deps-ok lib cli

lib: $(LIB_A) $(LIB_SO)
cli: $(CLI)

help:
	@echo "make [all] | demo | test | fuzz | deps | gpu-tools | clean   (CUDA=0 to skip CUDA, SANITIZE=1 for ASan+UBSan)"

$(BUILD)/.deps-ok: scripts/install-deps.sh
	@mkdir -p $(BUILD)
	@sh scripts/install-deps.sh --check-build || sh scripts/install-deps.sh --build
	@touch $@

deps:
	sh scripts/install-deps.sh --all

$(BUILD)/obj/%_avx2.o: %_avx2.c include/blockfp8.h src/internal.h | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.c include/blockfp8.h $(wildcard tools/*.h) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(TOOL_CFLAGS) -Itools -c $< -o $@

$(BUILD)/obj/%.o: %.c include/blockfp8.h src/internal.h $(wildcard src/*.h src/backends/*.h src/backends/cuda/*.h) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -c $< -o $@

# ptxas's resource report is kept beside each object (what tests/ptxas-check.sh reads); everything else it prints
# still reaches the terminal.
# The nvcc flags are kept in a file that changes only when they do, and every CUDA object depends on it: a plain
# `make` after `make HOPPER_TRACE=1` (or the other way round) rebuilds the objects instead of reusing the other kind.
CUDA_FLAGS_STAMP := $(CUDA_OBJDIR)/nvcc-flags
$(CUDA_FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(NVCC) $(NVCCFLAGS)' | cmp -s - $@ || echo '$(NVCC) $(NVCCFLAGS)' > $@
.PHONY: FORCE
FORCE:

$(CUDA_OBJDIR)/%.o: src/backends/cuda/%.cu include/blockfp8.h src/internal.h $(wildcard src/backends/cuda/*.cuh src/backends/cuda/*.h) $(CUDA_FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2>$(@:.o=.ptxas.log); st=$$?; \
	    grep -vE '^ptxas info|bytes stack frame' $(@:.o=.ptxas.log) >&2; exit $$st

$(LIB_A): $(OBJS) $(CUDA_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(OBJS) $(CUDA_OBJS)
	$(CC) -shared $(LDFLAGS_SAN) -o $@ $^ $(LDLIBS_BASE)

$(CLI): $(TOOL_OBJS) $(LIB_A)
	$(CC) $(LDFLAGS_SAN) -o $@ $(TOOL_OBJS) $(LIB_A) $(LDLIBS_BASE) $(TOOL_LIBS)

$(BUILD)/tests/%: tests/%.c tests/check.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Itests -o $@ $< $(LIB_A) $(LDFLAGS_SAN) $(LDLIBS_BASE)

# Quantization throughput, scalar vs AVX2 (bench/RESULTS.md, "Vectorized quantization").
$(BUILD)/quant_bench: bench/quant_bench.c $(LIB_A)
	$(CC) $(CFLAGS_BASE) -o $@ $< $(LIB_A) $(LDLIBS_BASE)
quant-bench: $(BUILD)/quant_bench

# Standalone GPU measurement tools (one nvcc command each, no library): the fixed costs of a GPU call and what a
# CTA's first load costs (bench/RESULTS.md, hopper-notes v14-v15). `make test` compiles them wherever nvcc is.
GPU_TOOLS := $(BUILD)/launch_floor $(BUILD)/first_load
$(GPU_TOOLS): $(BUILD)/%: bench/%.cu bench/tool_check.h src/backends/cuda/sm90_async.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o $@ $<
gpu-tools: $(if $(filter 1,$(WITH_CUDA)),$(GPU_TOOLS))
	@$(if $(filter 1,$(WITH_CUDA)),:,echo "gpu-tools: no nvcc (or CUDA=0), skipped")

# --- the main job -------------------------------------------------------------------------------------------------
demo: all
	./$(CLI) demo

# --- tests --------------------------------------------------------------------------------------------------------
# The whole suite: plain build, ptxas report, GPU tools compiled, sanitizer build, CLI end-to-end, numpy cross-check,
# short fuzz.
test: all
	@sh scripts/install-deps.sh --check-test || sh scripts/install-deps.sh --test
	$(MAKE) --no-print-directory check-unit
	$(MAKE) --no-print-directory check-ptxas
	$(MAKE) --no-print-directory gpu-tools
	$(MAKE) --no-print-directory check-asan
	$(MAKE) --no-print-directory check-cli
	$(MAKE) --no-print-directory check-crosscheck
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-30}
	@echo "make test: all stages passed"

check-unit: $(TEST_BINS) $(CLI)
	@sh tests/run-unit.sh $(BUILD)

# The hopper kernels as compiled: no spills, no wgmma serialized by ptxas (tests/ptxas-check.sh says why).
check-ptxas: all
	@sh tests/ptxas-check.sh $(CUDA_OBJDIR) $(WITH_CUDA)

check-asan:
	$(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 check-unit

check-cli: $(CLI)
	@sh tests/cli.sh $(BUILD)

check-crosscheck: $(CLI)
	for f in tests/crosscheck_*.py; do python3 $$f --build $(BUILD) || exit 1; done

# The Python package (python/blockfp8, tests/python): built into a virtual environment by pip, as a user installs
# it, then its pytest suite (scripts/install-python-deps.sh puts numpy, ml_dtypes, pytest and torch there).
PYTHON_VENV ?= build/venv
check-python: $(CLI)
	@sh scripts/install-python-deps.sh $(PYTHON_VENV)
	BFP8_BUILD_DIR=$(BUILD) $(PYTHON_VENV)/bin/python -m pip install --no-build-isolation --no-deps --quiet .
	BFP8_CLI=$(CURDIR)/$(CLI) $(PYTHON_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/python

# The link line of a program that uses $(LIB_A) (setup.py links the Python extension with it).
print-ldlibs:
	@echo $(LDLIBS_BASE)

# --- fuzzing (clang libFuzzer) ------------------------------------------------------------------------------------
FUZZ_BIN := build-fuzz/fuzz_safetensors
FUZZ_SECONDS ?= 30
FUZZ_CC ?= clang
# Only what the four sources need: the CUDA libraries of LDLIBS_BASE would make the binary need libcuda.so.1.
FUZZ_LDLIBS := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) -lpthread -lm
fuzz-build: $(FUZZ_BIN)
$(FUZZ_BIN): fuzz/fuzz_safetensors.c $(wildcard src/*.c) include/blockfp8.h src/internal.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
	  $(shell pkg-config --cflags libcjson 2>/dev/null) -o $@ fuzz/fuzz_safetensors.c src/safetensors.c \
	  src/errors.c src/formats.c $(FUZZ_LDLIBS)
fuzz: $(FUZZ_BIN)
	@mkdir -p build-fuzz/corpus
	./$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 build-fuzz/corpus fuzz/corpus

clean:
	rm -rf build build-asan build-fuzz
