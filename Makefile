# Makefile — builds ./mnist_ddp (objects under build/), the GoogleTest suites and the Google
# Benchmark microbenchmarks. Knobs for a cluster's modulefiles: MPICXX or MPI_HOME, OPENBLAS_HOME,
# DNNL_HOME, HDF5_HOME, CUDA_HOME, USE_CUDA, ARCH_FLAGS; JOBS for `make run`/`make test`'s build.
# `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := all

# ---- toolchain and libraries -------------------------------------------------------------------
MPI_HOME ?=
ifneq ($(MPI_HOME),)
MPICXX ?= $(MPI_HOME)/bin/mpicxx
MPIRUN ?= $(MPI_HOME)/bin/mpirun
else
MPICXX ?= mpicxx
MPIRUN ?= mpirun
endif
CXX := $(MPICXX)

OPENBLAS_HOME ?=
ifneq ($(OPENBLAS_HOME),)
BLAS_CFLAGS := -I$(OPENBLAS_HOME)/include
BLAS_LIBS := -L$(OPENBLAS_HOME)/lib -Wl,-rpath,$(OPENBLAS_HOME)/lib -lopenblas
else
BLAS_CFLAGS :=
BLAS_LIBS := -lopenblas
endif

DNNL_HOME ?=
ifneq ($(DNNL_HOME),)
DNNL_CFLAGS := -I$(DNNL_HOME)/include
DNNL_LIBS := -L$(DNNL_HOME)/lib -Wl,-rpath,$(DNNL_HOME)/lib -ldnnl
else
DNNL_CFLAGS :=
DNNL_LIBS := -ldnnl
endif

HDF5_HOME ?=
ifneq ($(HDF5_HOME),)
HDF5_FOUND := $(shell test -f $(HDF5_HOME)/include/hdf5.h && echo yes || echo no)
HDF5_CFLAGS := -I$(HDF5_HOME)/include
HDF5_LIBS := -L$(HDF5_HOME)/lib -Wl,-rpath,$(HDF5_HOME)/lib -lhdf5
else
HDF5_FOUND := $(shell pkg-config --exists hdf5 2>/dev/null && echo yes || echo no)
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null)
HDF5_LIBS := $(shell pkg-config --libs hdf5 2>/dev/null || echo -lhdf5)
endif

CUDA_HOME ?= /usr/local/cuda
CUDNN_HOME ?= $(CUDA_HOME)
NCCL_HOME ?= $(CUDA_HOME)
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCC_FOUND := $(shell test -x $(NVCC) && echo yes || echo no)
# With nvcc present the binary holds both backends; USE_CUDA=0/1 forces either.
USE_CUDA ?= $(if $(filter yes,$(NVCC_FOUND)),1,0)
# A GPU machine without nvcc must not quietly get a CPU-only binary (every GPU test would skip).
GPU_PRESENT := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo yes || echo no)
ifeq ($(NVCC_FOUND)$(GPU_PRESENT)$(origin USE_CUDA),noyesfile)
$(error this machine has a GPU (nvidia-smi -L) but no nvcc at $(NVCC): set CUDA_HOME to the CUDA 13 toolkit, or pass USE_CUDA=0 to build the CPU-only binary on purpose)
endif
# Ampere and Hopper by default; e.g. CUDA_ARCH="-gencode arch=compute_100,code=sm_100" to add more.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90

SPDLOG_CFLAGS := $(shell pkg-config --cflags spdlog 2>/dev/null)
SPDLOG_LIBS := $(shell pkg-config --libs spdlog 2>/dev/null || echo -lspdlog -lfmt)

ARCH_FLAGS ?= -march=native
# -g1: line tables and function names, what backtraces, perf, sanitizer reports and gdb's `bt`
# need; full -g (locals, types) doubles the compile time of the template-heavy units (CLI11's
# cli.cpp 30 s -> 16 s at -g1, the whole tree 5.3 -> 4.1 min on 2 cores) and changes no code:
# `make CXXFLAGS='-O3 -g'` for a debugging session.
CXXFLAGS ?= -O3 -g1
CXXFLAGS += -std=c++20 $(ARCH_FLAGS) -fopenmp-simd -Wall -Wextra -Wno-unused-parameter -pthread
# SANITIZE: extra compile and link flags for the sanitizer builds (`make test-sanitize`).
SANITIZE ?=
CXXFLAGS += $(SANITIZE)
CPPFLAGS += -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1 -Iinclude -Isrc $(BLAS_CFLAGS) $(DNNL_CFLAGS) $(HDF5_CFLAGS) $(SPDLOG_CFLAGS) -MMD -MP
# The mnist_ddp binary links everything but the CUDA libraries (its GPU backend is a plugin that
# links them: CUDA_PLUGIN below); the test and benchmark binaries link the backend directly.
BASE_LIBS := $(DNNL_LIBS) $(HDF5_LIBS) $(BLAS_LIBS) $(SPDLOG_LIBS) -lz -lgomp -ldl -pthread
LDLIBS += $(CUDA_LIBS) $(BASE_LIBS)

# BUILD/BIN let both configurations live side by side (CI builds USE_CUDA=0 in build/cpu-only).
BUILD ?= build
BIN ?= mnist_ddp
# ARCH=x86-64-v3 (any -march value): the whole tree for that instruction set in its own folder,
# build/<ARCH>/ (binary build/<ARCH>/mnist_ddp), beside the native build: e.g. the AVX2 path of
# an AVX-512 machine (bench/compare_isa.sh), or a binary for older compute nodes.
ARCH ?=
ifneq ($(ARCH),)
ARCH_FLAGS := -march=$(ARCH)
BUILD := build/$(ARCH)
BIN := build/$(ARCH)/mnist_ddp
endif
# ---- sources -----------------------------------------------------------------------------------
LOADER_SRC := src/app/cuda_loader.cpp
ifeq ($(USE_CUDA),1)
# Sources by folder (src/<concern>/, backends in src/<concern>/{cpu,cuda}/); src/stub/ only
# without CUDA.
LIB_SRCS := $(filter-out src/app/main.cpp src/stub/% $(LOADER_SRC),$(wildcard src/*/*.cpp src/*/*/*.cpp))
CU_SRCS := $(wildcard src/*/*.cu src/*/*/*.cu)
# The GPU backend as a plugin beside the binary (app/cuda_backend.hpp): the CUDA objects and
# the CUDA libraries, loaded by the binary's loader only when a run asks a GPU something.
CUDA_PLUGIN := $(dir $(BIN))libmnist_ddp_cuda.so
MAIN_SEAM_OBJ := $(BUILD)/$(LOADER_SRC:.cpp=.o)
CUDA_LIBDIRS := $(sort $(CUDA_HOME)/lib64 $(CUDNN_HOME)/lib64 $(NCCL_HOME)/lib64)
CUDA_LIBS := $(foreach d,$(CUDA_LIBDIRS),-L$(d) -Wl,-rpath,$(d)) -lcudnn -lcublas -lnccl -lcudart -ldl
CUDA_INCLUDES := $(sort -I$(CUDA_HOME)/include -I$(CUDNN_HOME)/include -I$(NCCL_HOME)/include)
NVCCFLAGS ?= -O3 -std=c++20 $(CUDA_ARCH) -lineinfo --expt-relaxed-constexpr
else
LIB_SRCS := $(filter-out src/app/main.cpp $(LOADER_SRC),$(wildcard src/*/*.cpp src/*/*/*.cpp))
CUDA_PLUGIN :=
MAIN_SEAM_OBJ :=
CU_SRCS :=
CUDA_LIBS :=
CUDA_INCLUDES :=
endif
CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.o)
LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/%.o) $(CU_OBJS)
MAIN_OBJ := $(BUILD)/src/app/main.o
# tests/common: helpers both test binaries share (the GPU probe).
TEST_COMMON_SRCS := $(wildcard tests/common/*.cpp)
# UNIT_TESTS narrows the unit binary (the ThreadSanitizer build takes the tests that start threads).
UNIT_TESTS ?= $(wildcard tests/unit/*.cpp)
UNIT_SRCS := $(UNIT_TESTS) $(TEST_COMMON_SRCS)
UNIT_OBJS := $(UNIT_SRCS:%.cpp=$(BUILD)/%.o)
MPI_TEST_SRCS := $(wildcard tests/mpi/*.cpp) $(TEST_COMMON_SRCS)
MPI_TEST_CU := $(if $(filter 1,$(USE_CUDA)),$(wildcard tests/mpi/*.cu))
MPI_TEST_OBJS := $(MPI_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(MPI_TEST_CU:%.cu=$(BUILD)/%.o)
BENCH_SRCS := bench/ops_bench.cpp
BENCH_OBJS := $(BENCH_SRCS:%.cpp=$(BUILD)/%.o)

MPI_CFLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null)
UNIT_BIN := $(BUILD)/tests/unit_tests
MPI_TEST_BIN := $(BUILD)/tests/mpi_tests
BENCH_BIN := $(BUILD)/bench/ops_bench
COMM_BENCH_BIN := $(BUILD)/bench/comm_bench
GPU_OPS_BENCH_BIN := $(BUILD)/bench/gpu_ops_bench
# cuDNN's algorithms timed per convolution: a CUDA program, built with the CUDA backend only.
GPU_CONV_ALGOS_BIN := $(if $(filter 1,$(USE_CUDA)),$(BUILD)/bench/gpu_conv_algos)

.PHONY: test-build lib-objs sanitize-build sanitize-build-asan sanitize-build-tsan fuzz-build all summary test test-only test-unit test-mpi test-e2e test-slurm test-numeric test-aarch64 test-mpich test-sanitize test-chaos fuzz bench bench-only run deps data clean format help bundle install uninstall
all: summary $(BIN)

summary:
	@echo "mnist_ddp build configuration"
	@echo "  MPI     : $(MPICXX) -> $$($(MPICXX) --showme:version 2>/dev/null || $(MPICXX) -show 2>/dev/null | head -c 60 || echo 'NOT FOUND (make deps)')"
	@echo "  BLAS    : OpenBLAS $(if $(OPENBLAS_HOME),in $(OPENBLAS_HOME),(system)) $$(test -n '$(OPENBLAS_HOME)' || (ldconfig -p | grep -q libopenblas && echo found || echo 'NOT FOUND (make deps)'))"
	@echo "  oneDNN  : $(if $(DNNL_HOME),in $(DNNL_HOME),(system)) $$(test -n '$(DNNL_HOME)' || (ldconfig -p | grep -q libdnnl && echo found || echo 'NOT FOUND (make deps)'))"
	@echo "  HDF5    : $(HDF5_FOUND) $(HDF5_LIBS) (checkpoints)"
	@echo "  CUDA    : nvcc $(NVCC_FOUND) at $(CUDA_HOME); backend built: $(if $(filter 1,$(USE_CUDA)),yes (cuDNN, cuBLAS, NCCL; $(CUDA_ARCH)),no) (USE_CUDA=$(USE_CUDA))"
	@$(if $(filter no,$(NVCC_FOUND)),$(if $(filter file,$(origin USE_CUDA)),echo "  WARNING : nvcc not found at $(NVCC): building WITHOUT the GPU backend (--device cuda will say so). Set CUDA_HOME; or USE_CUDA=0 to build CPU-only on purpose",true),true)
	@echo "  flags   : $(CXXFLAGS)"

# With CUDA: the binary holds the loader instead of the CUDA objects, links no CUDA library, and
# exports its symbols (-rdynamic) for the plugin to bind to. The plugin binds its own functions
# to itself (-Bsymbolic-functions): the loader's forwarding functions share their names.
ifeq ($(USE_CUDA),1)
$(BIN): $(filter-out $(CU_OBJS),$(LIB_OBJS)) $(MAIN_SEAM_OBJ) $(MAIN_OBJ) | $(CUDA_PLUGIN)
	$(CXX) $(CXXFLAGS) -rdynamic -o $@ $^ $(BASE_LIBS)

$(CUDA_PLUGIN): $(CU_OBJS)
	$(CXX) $(CXXFLAGS) -shared -Wl,-Bsymbolic-functions -o $@ $^ $(CUDA_LIBS) $(BASE_LIBS)
else
$(BIN): $(LIB_OBJS) $(MAIN_OBJ)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)
endif

$(BUILD)/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c -o $@ $<

# The unit, MPI and fuzz test code itself at -O1 (the library it drives, and bench/, stay -O3):
# GoogleTest bodies gain nothing from -O3; rebuilding the unit and MPI test objects took 2 min 25 s
# at -O3 and 1 min 35 s at -O1 on the 2-core machine.
TEST_OPT ?= -O1
$(BUILD)/tests/%.o: CXXFLAGS += $(TEST_OPT)
# KERNEL_OPT: the CPU kernels' own level in a sanitizer tree (sanitize-build-asan: -O2). At the
# sanitizers' -O1 our AVX2 kernels run unvectorised with every access checked: a 60-step training
# run under ASan on the AVX2 path took 13.2 s at -O1, 8.6-9.0 s with these at -O2, same results.
KERNEL_OPT ?=
$(BUILD)/src/ops/cpu/%.o: CXXFLAGS += $(KERNEL_OPT)

# CUDA translation units: nvcc with the host compiler's MPI flags (nvcc cannot drive mpicxx); -fPIC:
# they make the plugin (a shared object) as well as the test binaries.
$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC $(CUDA_INCLUDES) -DOMPI_SKIP_MPICXX=1 -Iinclude -Isrc $(MPI_CFLAGS) $(HDF5_CFLAGS) -MMD -MP -c -o $@ $<

$(UNIT_BIN): $(UNIT_OBJS) $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ -lgtest -lgtest_main $(LDLIBS)

$(MPI_TEST_BIN): $(MPI_TEST_OBJS) $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ -lgtest $(LDLIBS)

$(BENCH_BIN): $(BENCH_OBJS) $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ -lbenchmark $(LDLIBS)

$(COMM_BENCH_BIN): $(BUILD)/bench/comm_bench.o $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ -lbenchmark $(LDLIBS)

$(GPU_OPS_BENCH_BIN): $(BUILD)/bench/gpu_ops_bench.o $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ -lbenchmark $(LDLIBS)

$(BUILD)/bench/gpu_conv_algos: $(BUILD)/bench/gpu_conv_algos.o $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

# ---- user-facing targets ----------------------------------------------------------------------
# deps/run/test install what they need first, then re-enter make so library detection sees it.
deps:
	@tools/install-deps.sh

data:
	@data/prepare.sh

# `make run` and `make test` build with one job per core unless make was given -j: the README's
# two commands carry no -j, and a serial build of this tree took 6 min of the 2-core machines' CPU
# (3.2 min at -j2). JOBS=1 builds serially.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
PARALLEL = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

# `make run` is the README's CPU job (2 CPU ranks) on any machine; DEVICE=cuda|auto to change it.
# It continues the run in checkpoints/ when there is one (--resume auto; ARGS='--resume none' with
# another --checkpoint-dir starts a second run): a new run there would have to overwrite the
# first one's checkpoints, which mnist_ddp refuses.
DEVICE ?= cpu
run:
	@tools/install-deps.sh
	@$(MAKE) --no-print-directory $(PARALLEL) all
	@data/prepare.sh
	@source tests/mpi_env.sh && $(MPIRUN) -np 2 ./mnist_ddp --device $(DEVICE) --resume auto $(ARGS)

test:
	@tools/install-deps.sh --tests
	@data/prepare.sh
	@$(MAKE) --no-print-directory $(PARALLEL) test-only

# test-build: everything the suites run, built, nothing run (CI builds it while the test-only
# packages install). The suites start their own makes as a user would (readme_test's `make run`):
# outside this build's job server, whose -j they would otherwise inherit without its file
# descriptors.
test-build: all $(UNIT_BIN) $(MPI_TEST_BIN) $(BENCH_BIN) $(COMM_BENCH_BIN) $(GPU_OPS_BENCH_BIN) $(GPU_CONV_ALGOS_BIN)
test-only: test-build
	@MAKEFLAGS= MFLAGS= tests/run_tests.sh

# One layer of the suite; FILTER= narrows it (a GoogleTest filter for unit/mpi, a name pattern for
# e2e/slurm), e.g. `make test-unit FILTER='IdxFiles.*'`, `make test-e2e FILTER=checkpoint`.
test-unit: all $(UNIT_BIN)
	@tests/run_tests.sh unit
test-mpi: all $(MPI_TEST_BIN)
	@tests/run_tests.sh mpi
test-e2e: all $(BENCH_BIN) $(COMM_BENCH_BIN) $(GPU_OPS_BENCH_BIN)
	@tests/run_tests.sh e2e
# The numeric tests (unit, MPI, and the end-to-end oracle comparisons) on kernel families other than
# this CPU's own (tests/kernel_variant.sh: another OpenBLAS SGEMM, oneDNN one instruction set
# lower), so a bound read off one machine's kernels fails here too; KERNELS='VAR=value ...' to pick
# them (KERNELS=native: this CPU's own).
KERNELS ?=
test-numeric: all $(UNIT_BIN) $(MPI_TEST_BIN)
	@kernels="$(KERNELS)"; [[ -n "$$kernels" ]] || kernels=$$(tests/kernel_variant.sh); \
	 [[ "$$kernels" == native ]] && kernels=""; \
	 echo "== numeric tests on kernels: $${kernels:-native}"; \
	 env $$kernels tests/run_tests.sh numeric

# aarch64 (GH200's Grace): cross-built against an arm64 Debian root and tested there under
# qemu-user (tests/aarch64/run.sh; as root). The root is made once, kept in
# /var/cache/mnist_ddp/arm64-root (MNIST_DDP_ARM64_ROOT).
test-aarch64:
	@tools/install-deps.sh --aarch64
	@data/prepare.sh
	@MAKEFLAGS= MFLAGS= tests/aarch64/run.sh
# MPICH (the family of Cray MPICH, Intel MPI, MVAPICH): Debian's MPICH beside Open MPI, its own
# tree build/mpich/, the unit and MPI suites and the end-to-end cases under mpiexec.hydra
# (tests/mpich/run.sh).
test-mpich:
	@tools/install-deps.sh --mpich
	@data/prepare.sh
	@MAKEFLAGS= MFLAGS= tests/mpich/run.sh

# The CPU configuration under the sanitizers (tests/run_sanitized.sh): ASan + UBSan + LSan on the
# unit, MPI and end-to-end suites (build/asan), then ThreadSanitizer on the threaded paths
# (build/tsan). Zero reports required; suppressions (third-party only) in tests/sanitizers/.
# -O1 (after the default -O3, so it wins), as the sanitizers' documentation advises: reports keep
# their frames, and the two builds compile in half the time (CLI11's cli.cpp: 74 s -> 38 s).
# The ASan + UBSan build uses Debian's clang (as `make fuzz` does): GCC 12's UBSan instrumentation
# takes 3x as long on CLI11's cli.cpp (102 s against 34 s), the whole build 6.3 min against 4.4.
# The TSan build's unit binary holds the unit tests of code that starts threads: the flight
# recorder's dump thread and the checkpoint lock's heartbeat (the watchdog and the communication
# thread are the MPI suite's and threads_test.sh's); the other unit tests run single-threaded
# code, under ASan above.
SANITIZE_FLAGS := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
TSAN_FLAGS := -O1 -fsanitize=thread -fno-omit-frame-pointer
TSAN_UNIT_TESTS := tests/unit/flight_recorder_test.cpp tests/unit/dir_lock_test.cpp tests/unit/test_util.cpp
test-sanitize:
	@tools/install-deps.sh --tests
	@data/prepare.sh
	@$(MAKE) --no-print-directory sanitize-build-asan
	@tests/run_sanitized.sh asan
	@$(MAKE) --no-print-directory sanitize-build-tsan
	@tests/run_sanitized.sh tsan

# The sanitizer trees (and the fuzz targets, which link the ASan objects) without running anything:
# CI builds them at nice 19 while `make test` runs, on the CPU time its tests leave idle.
# sanitize-build-asan / -tsan: one tree each (CI runs the ASan suite while the TSan tree builds).
sanitize-build: sanitize-build-asan sanitize-build-tsan

sanitize-build-asan:
	@OMPI_CXX=clang++ $(MAKE) --no-print-directory USE_CUDA=0 BUILD=build/asan BIN=build/asan/mnist_ddp \
	  SANITIZE="$(SANITIZE_FLAGS)" KERNEL_OPT=-O2 build/asan/mnist_ddp build/asan/tests/unit_tests build/asan/tests/mpi_tests

sanitize-build-tsan:
	@$(MAKE) --no-print-directory USE_CUDA=0 BUILD=build/tsan BIN=build/tsan/mnist_ddp \
	  UNIT_TESTS="$(TSAN_UNIT_TESTS)" SANITIZE="$(TSAN_FLAGS)" \
	  build/tsan/mnist_ddp build/tsan/tests/unit_tests build/tsan/tests/mpi_tests

# libFuzzer targets (Debian's clang through mpicxx) on the parsers of untrusted bytes: IDX files,
# checkpoints, the command line, the launcher environment. FUZZ_SECONDS per target.
# FUZZ_TARGETS=checkpoint_hostile: checkpoints whose file CRC line is re-stamped over the mutated
# bytes, so they reach HDF5 itself (not in CI: it finds HDF5 1.10's own bugs; tests/fuzz/README.md).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= idx checkpoint cli env
# libFuzzer's coverage instrumentation goes on the parsers under test (FUZZ_COVERED); the rest of
# the library links from the ASan + UBSan build (build/asan: the same clang and sanitizers).
# Coverage everywhere made every other function 2.6x slower and cost a third build of the tree.
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_COVERED := src/data/idx.cpp src/checkpoint/checkpoint.cpp src/checkpoint/schema.cpp \
  src/checkpoint/hdf5_io.cpp src/checkpoint/file_crc.cpp src/app/cli.cpp src/app/flags.cpp \
  src/app/flag_table.cpp src/launch/identity.cpp
FUZZ_BASE ?= $(BUILD)
fuzz:
	@tools/install-deps.sh --tests
	@$(MAKE) --no-print-directory fuzz-build
	@tests/fuzz/run_fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-build:
	@OMPI_CXX=clang++ $(MAKE) --no-print-directory USE_CUDA=0 BUILD=build/asan BIN=build/asan/mnist_ddp \
	  SANITIZE="$(SANITIZE_FLAGS)" KERNEL_OPT=-O2 lib-objs
	@OMPI_CXX=clang++ $(MAKE) --no-print-directory USE_CUDA=0 BUILD=build/fuzz BIN=build/fuzz/mnist_ddp \
	  FUZZ_BASE=build/asan SANITIZE="$(FUZZ_FLAGS)" $(FUZZ_TARGETS:%=build/fuzz/fuzz/fuzz_%)

lib-objs: $(LIB_OBJS)

$(BUILD)/tests/fuzz/fuzz_checkpoint_hostile.o: tests/fuzz/fuzz_checkpoint.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -DFUZZ_RESTAMP -c -o $@ $<

FUZZ_LINK_OBJS = $(FUZZ_COVERED:%.cpp=$(BUILD)/%.o) \
  $(filter-out $(FUZZ_COVERED:%.cpp=$(FUZZ_BASE)/%.o),$(LIB_OBJS:$(BUILD)/%=$(FUZZ_BASE)/%))
$(BUILD)/fuzz/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/fuzz_common.o $(FUZZ_LINK_OBJS)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
# Kept after the link: made by the pattern rules alone they are intermediate files, which make
# deletes; the next `make fuzz` (CI's, right after its `make fuzz-build`) then finds them named in
# their .d files and compiled and linked every target again.
.SECONDARY: $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/fuzz_%.o) $(BUILD)/tests/fuzz/fuzz_common.o

# Randomised fault injection: CHAOS_RUNS (20) runs on 2 CPU ranks, each hit at a random moment;
# CHAOS_SEED=S reproduces a run (tests/chaos/chaos_test.sh prints its seed).
test-chaos: all
	@tools/install-deps.sh --tests
	@data/prepare.sh
	@bash tests/chaos/chaos_test.sh

# The Slurm workflows on a real local two-node Slurm (as root; `make test` includes it).
# Install a built tree under PREFIX (binary, GPU plugin, comm_bench, tools, Slurm scripts, docs,
# and a modulefile for that prefix), and remove exactly that again: tools/install.sh.
PREFIX ?= /usr/local
install: all $(COMM_BENCH_BIN)
	@tools/install.sh "$(PREFIX)"
uninstall:
	@tools/install.sh --uninstall "$(PREFIX)"

test-slurm: all $(COMM_BENCH_BIN)
	@tools/install-deps.sh --tests
	@data/prepare.sh
	@tests/run_tests.sh slurm

bench:
	@tools/install-deps.sh
	@data/prepare.sh
	@$(MAKE) --no-print-directory bench-only

bench-only: all $(BENCH_BIN) $(COMM_BENCH_BIN)
	@bench/run_bench.sh

# Binaries + non-CUDA libraries + Open MPI runtime + data for a GPU machine without MPI/HDF5
# (carry bundle/, run tools/gpu-suite.sh there).
# The bundle runs on another machine's CPU: a portable ISA level instead of -march=native (the
# GPU kernels are sm_80/sm_90 either way; oneDNN and OpenBLAS pick their kernels at run time).
BUNDLE_ARCH ?= -march=x86-64-v3
bundle:
	@$(MAKE) --no-print-directory $(PARALLEL) BUILD=build/bundle BIN=build/bundle/mnist_ddp \
	  ARCH_FLAGS="$(BUNDLE_ARCH)" build/bundle/mnist_ddp build/bundle/tests/unit_tests \
	  build/bundle/tests/mpi_tests build/bundle/bench/ops_bench build/bundle/bench/comm_bench \
	  build/bundle/bench/gpu_ops_bench build/bundle/bench/gpu_conv_algos
	@data/prepare.sh
	@BUNDLE_BUILD=build/bundle tools/make-bundle.sh

format:
	clang-format -i include/mnist_ddp/*/*.hpp include/mnist_ddp/*/*/*.hpp src/*/*.cpp src/*/*/*.cpp src/*/*.hpp src/*/*/*.hpp src/*/*/*.cu src/*/*/*.cuh tests/unit/*.cpp \
	  tests/unit/*.hpp tests/mpi/*.cpp tests/mpi/*.hpp tests/mpi/*.cu tests/common/*.cpp tests/common/*.hpp bench/*.cpp bench/*.cu \
	  tests/fuzz/*.cpp tests/fuzz/*.hpp

clean:
	rm -rf $(BUILD) $(BIN) $(CUDA_PLUGIN)

help:
	@echo "make          build ./mnist_ddp (prints what was found), with CUDA also its GPU backend ./libmnist_ddp_cuda.so"
	@echo "make ARCH=x86-64-v3  that instruction set's build in build/x86-64-v3/ (bench/compare_isa.sh: AVX2 vs native)"
	@echo "make run      install deps, fetch data, train on 2 CPU ranks (ARGS='--epochs 1' to pass flags,"
	@echo "              DEVICE=cuda for the GPU)"
	@echo "make test     install deps, fetch data, run unit, MPI and end-to-end tests (+ Slurm as root)"
	@echo "              (run and test build with JOBS=\$$(nproc) jobs unless make was given -j)"
	@echo "make test-build  build all that make test runs, run nothing"
	@echo "make test-unit | test-mpi | test-e2e  one layer of the suite (FILTER= narrows it)"
	@echo "make test-slurm  the Slurm workflows on a real local 2-node Slurm (root)"
	@echo "make test-aarch64   cross-build for aarch64 and run the suites there under qemu-user (root)"
	@echo "make test-mpich     build with Debian's MPICH and run the suites under mpiexec.hydra"
	@echo "make test-numeric  unit, MPI and oracle e2e tests on other kernel families (KERNELS='VAR=v ...' or native)"
	@echo "make test-sanitize  unit, MPI and e2e suites under ASan + UBSan + LSan, threaded paths under TSan"
	@echo "make test-chaos  20 training runs each hit by a random fault at a random moment (CHAOS_SEED, CHAOS_RUNS,"
	@echo "              CHAOS_DEADLINE: no run starts that would end after it, past CHAOS_MIN_RUNS)"
	@echo "make fuzz     libFuzzer on the IDX reader, checkpoint loader, CLI, launcher env (FUZZ_SECONDS=60 each)"
	@echo "make sanitize-build[-asan|-tsan] | fuzz-build  build those trees only (CI builds them at nice 19 while other stages run)"
	@echo "make bench    microbenchmarks + side-by-side with PyTorch DDP"
	@echo "make deps     install the Debian packages that are missing"
	@echo "make data     prepare data/dataset (MNIST if downloadable, else Fashion-MNIST)"
	@echo "make bundle   bundle/ for a GPU machine without MPI/HDF5 (then tools/gpu-suite.sh there)"
	@echo "make install PREFIX=DIR  copy the built tree there (bin/, tools, Slurm scripts, docs, a modulefile);"
	@echo "              make uninstall PREFIX=DIR removes exactly that"
	@echo "make clean    remove build/ and ./mnist_ddp"

-include $(CU_OBJS:.o=.d) $(LIB_OBJS:.o=.d) $(MAIN_OBJ:.o=.d) $(MAIN_SEAM_OBJ:.o=.d) $(UNIT_OBJS:.o=.d) $(MPI_TEST_OBJS:.o=.d) $(BENCH_OBJS:.o=.d) $(BUILD)/bench/comm_bench.d $(BUILD)/bench/gpu_ops_bench.d $(BUILD)/bench/gpu_conv_algos.d \
  $(wildcard $(BUILD)/tests/fuzz/*.d)
