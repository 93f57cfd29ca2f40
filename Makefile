# dtrain - build, test and install.
#
#   make              bin/dtrain and build/libdtrain.a (CUDA parts when nvcc is found)
#   make demo         install what the demo needs (no test tools, no PyTorch), build, run it here
#   make test         install what is missing, build, run every test; ends "N passed, N failed, N skipped"
#   make test-gpu     the GPU tests (needs a GPU; `make test` only compiles them, test-gpu-build)
#   make asan         the same tests under AddressSanitizer + UBSan (build-asan/)
#   make fuzz         build the libFuzzer targets (clang) and run each briefly
#   make install      PREFIX=/usr/local: binary, library, public headers, man page, docs
#   make bundle       build/bundle.tar.xz: dtrain and the GPU tests for a machine without our libraries
#   make generated    configs/job.schema.json, configs/reference.yaml and the key tables of docs/dtrain.1
#                     and README.md, written from the job spec's key tables (spec/jobspec*.c)
#   CUDA=0|1          force the CUDA parts off or on (default: on when nvcc is found)
#   MPI=0|1           force the MPI backend (comm/mpi/) off or on (default: on when mpicc is found)
#   STATIC_DEPS=1     link libyaml, libuv, jansson and OpenBLAS statically (for machines without them)
#   CUDNN=0|1         cuDNN's fused attention (worker/cuda/attention_cudnn.cpp; default: on when the
#                     cuDNN frontend's headers and cudnn.h are found; libcudnn loads at run time)
#   The build keeps these, the compilers and their flags in build/gen/*.cfg: a make with other ones
#   rebuilds what they change (make CUDA=0, then make: a binary with CUDA again).
#
# Sources are found by folder, the layers of docs/architecture.md: base/, spec/,
# comm/ and worker/ make libdtrain.a, scheduler-adapters/ and launcher/ the CLI
# (launcher/ is a folder per process: cli/, agent/, coordinator/, report/);
# GPU code lives in comm/nccl/, worker/cuda/ and worker/models/*_cuda.c (a
# model's GPU half, next to its CPU file), the MPI backend in comm/mpi/.
# Adding a file needs no edit here; adding a folder does.

VERSION   := 0.1.0
PREFIX    ?= /usr/local
BUILD     ?= build
BINDIR    ?= bin
CC        ?= cc
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
SAN       ?= 0
STATIC_DEPS ?= 0
# `make` alone builds bin/dtrain: named here because the first rule of the file would be the default
# goal otherwise, and the conditional blocks below put rules (the cuDNN object's) before `all`.
.DEFAULT_GOAL := all

ifeq ($(origin CUDA),undefined)
CUDA := $(if $(wildcard $(NVCC)),1,0)
endif
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifeq ($(origin MPI),undefined)
MPI := $(if $(MPICC),1,0)
endif

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -g -pthread -MMD -MP \
                 -DDT_VERSION='"$(VERSION)"'
ifeq ($(SAN),1)
# GCC 12's flow-based warnings see the sanitizers' instrumentation and report
# overflows that cannot happen (poll's pollfd array, snprintf into PATH_MAX
# buffers); the -O2 build keeps them as errors, so here they are only warnings.
CFLAGS_COMMON += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
                 -Wno-error=stringop-overflow -Wno-error=format-truncation
LDFLAGS_SAN   := -fsanitize=address,undefined
else
CFLAGS_COMMON += -O2
endif
CFLAGS_EXTRA ?=
CFLAGS_ALL := $(CFLAGS_COMMON) $(CFLAGS_EXTRA)

ifeq ($(STATIC_DEPS),1)
DEP_LIBS := -Wl,-Bstatic -l:libyaml.a -l:libuv_a.a -l:libjansson.a -l:libopenblas.a -l:libz.a -l:libgfortran.a -l:libquadmath.a -Wl,-Bdynamic
else
DEP_LIBS := -lyaml -luv -ljansson -lopenblas -lz
endif
SYS_LIBS := -lm -lpthread -ldl -lrt

LIB_SRC := $(wildcard base/*.c spec/*.c comm/*.c comm/bench/*.c comm/shm/*.c comm/tcp/*.c worker/*.c \
                      worker/data/*.c worker/optim/*.c) $(filter-out %_cuda.c,$(wildcard worker/models/*.c))
APP_SRC := $(filter-out launcher/cli/main.c,$(wildcard launcher/*/*.c scheduler-adapters/*.c scheduler-adapters/*/*.c))
GPU_SRC :=
CU_SRC  :=
CXX_SRC :=
GPU_LIBS :=
ifeq ($(CUDA),1)
GPU_SRC := $(wildcard comm/nccl/*.c worker/cuda/*.c worker/models/*_cuda.c)
CU_SRC  := $(wildcard comm/nccl/*.cu worker/cuda/*.cu)
CXX_SRC := $(wildcard worker/cuda/*.cpp)
CFLAGS_ALL += -DDT_HAVE_CUDA -I$(CUDA_HOME)/include
CXX ?= g++
CXXFLAGS_ALL := -std=c++17 -O2 -g1 -I. -Wall -Wextra -Werror -fPIC -MMD -MP -DDT_HAVE_CUDA -I$(CUDA_HOME)/include
GPU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart
NVCCFLAGS ?= -O3 -std=c++17 -I. -DDT_HAVE_CUDA -MMD -MP -Xcompiler -Wall,-fPIC \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# cuDNN's attention: the frontend is header-only (pip nvidia-cudnn-frontend, in .venv by
# scripts/install-deps.sh), cudnn.h comes with the CUDA toolkit or the nvidia-cudnn-cu13 wheel; the
# frontend's dynamic loading means no -lcudnn (attention_cudnn.cpp dlopens it when asked for).
CUDNN_FE_INC ?= $(patsubst %/cudnn_frontend.h,%,$(firstword $(wildcard \
                  .venv/lib/python3*/site-packages/include/cudnn_frontend.h /usr/include/cudnn_frontend.h)))
CUDNN_INC ?= $(patsubst %/cudnn.h,%,$(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h \
               .venv/lib/python3*/site-packages/nvidia/cudnn/include/cudnn.h /usr/include/cudnn.h)))
ifeq ($(origin CUDNN),undefined)
CUDNN := $(if $(and $(CUDNN_FE_INC),$(CUDNN_INC)),1,0)
endif
ifeq ($(CUDNN),1)
# -O1 and no JSON (graph dumps in the frontend's logs): host code that builds a plan per shape; the
# frontend's templates took 78 s of CI's build at -O2, 33 s so.
CUDNN_CXXFLAGS := -DDT_HAVE_CUDNN -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -DCUDNN_FRONTEND_SKIP_JSON_LIB -O1 -g0 \
                  -isystem $(CUDNN_FE_INC) -isystem $(CUDNN_INC)
$(BUILD)/worker/cuda/attention_cudnn.o: CXXFLAGS_ALL += $(CUDNN_CXXFLAGS)
else
CUDNN_CXXFLAGS :=
$(BUILD)/worker/cuda/attention_cudnn.o: worker/cuda/attention_cudnn.cpp $(BUILD)/gen/cxx.cfg
	@echo "dtrain: building without cuDNN attention (CUDNN=0, or no cuDNN frontend headers: scripts/install-deps.sh installs them)"
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -c $< -o $@
endif
endif

# The MPI backend: built against the MPI library mpicc names (Open MPI 4.1 on Debian).
MPI_SRC :=
MPI_LIBS :=
ifeq ($(MPI),1)
MPI_SRC := $(wildcard comm/mpi/*.c)
CFLAGS_ALL += -DDT_HAVE_MPI $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -compile_info | cut -d' ' -f2-)
MPI_LIBS := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -link_info | cut -d' ' -f2-)
endif
LIBS := $(DEP_LIBS) $(GPU_LIBS) $(MPI_LIBS) $(SYS_LIBS) $(LDFLAGS_SAN)

# The build's configuration, one stamp per kind of output in $(BUILD)/gen/: c.cfg (CUDA, MPI, SAN, the
# C compiler and its flags), cxx.cfg (CUDNN and the C++ flags), cu.cfg (nvcc's), link.cfg (STATIC_DEPS
# and the libraries linked). A stamp is rewritten only when its text changed and every output of its
# kind depends on it, so a change rebuilds what it touches and no more: `make demo` (no Open MPI) then
# `make test` (MPI=1) recompiles the C objects with DT_HAVE_MPI but not the CUDA kernels, and
# `make CUDA=0` then `make` gives a binary whose `dtrain version` says cuda: yes.
# Simple (:=) variables, fixed here: a stamp's recipe must not see the flags one object adds for itself
# (kernels_cpu.o's -O3), which make hands on to that object's prerequisites.
LINK_LIBS := $(LIBS) $(if $(CU_SRC),-lstdc++)
CONFIG_c    := CUDA=$(CUDA) MPI=$(MPI) SAN=$(SAN) $(CC) $(CFLAGS_ALL)
CONFIG_cxx  := CUDNN=$(CUDNN) $(CXX) $(CXXFLAGS_ALL) $(CUDNN_CXXFLAGS)
CONFIG_cu   := $(NVCC) $(NVCCFLAGS)
CONFIG_link := STATIC_DEPS=$(STATIC_DEPS) $(CC) -pthread $(LINK_LIBS)
CONFIG_STAMPS := $(foreach k,c cxx cu link,$(BUILD)/gen/$(k).cfg)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(GPU_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.o) \
           $(CXX_SRC:%.cpp=$(BUILD)/%.o) \
           $(MPI_SRC:%.c=$(BUILD)/%.o)
APP_OBJ := $(APP_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(BUILD)/launcher/cli/main.o $(BUILD)/gen/cli_table.o
# Subcommands: every launcher/cli/cmd_<name>.c defines dt_cli_<name>; the table is generated.
CMD_NAMES := $(sort $(patsubst launcher/cli/cmd_%.c,%,$(wildcard launcher/cli/cmd_*.c)))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(BUILD)/tests/helpers/%)

.PHONY: FORCE all deps deps-demo demo kjv-data test test-only test-gpu test-gpu-build unit asan fuzz install clean format \
        bundle generated
.DELETE_ON_ERROR:

all: $(BINDIR)/dtrain $(BUILD)/libdtrain.a

# The CPU kernels: vectorised loops need O3, and sqrtf vectorises only without errno (kernels_cpu.c).
$(BUILD)/worker/kernels_cpu.o: CFLAGS_ALL += -O3 -fno-math-errno
$(BUILD)/worker/models/gpt2_layers.o: CFLAGS_ALL += -O3 -fno-math-errno
# Initial parameters (param_init.c): its draw loop vectorises only with its selects if-converted, which
# -fno-trapping-math allows (IEEE results are the same; only exception flags are not kept).
$(BUILD)/worker/models/param_init.o: CFLAGS_ALL += -O3 -fno-math-errno -fno-trapping-math

$(CONFIG_STAMPS): $(BUILD)/gen/%.cfg: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(subst ','\'',$(strip $(CONFIG_$*)))' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(BUILD)/%.o: %.c $(BUILD)/gen/c.cfg
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD)/gen/cu.cfg
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Host-only C++ of the GPU parts (a library's C++ API: attention_cudnn.cpp).
$(BUILD)/%.o: %.cpp $(BUILD)/gen/cxx.cfg
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -c $< -o $@

# Regenerated every run but rewritten only when the list of commands changed.
$(BUILD)/gen/cli_table.c: FORCE
	@mkdir -p $(dir $@)
	@{ echo '/* cli_table.c - generated by the Makefile from launcher/cli/cmd_*.c; do not edit. */'; \
	   echo '#include "launcher/cli/cli.h"'; \
	   for n in $(CMD_NAMES); do echo "extern const struct dt_cli_command dt_cli_$$n;"; done; \
	   echo 'const struct dt_cli_command *const dt_cli_commands[] = {'; \
	   for n in $(CMD_NAMES); do echo "    &dt_cli_$$n,"; done; \
	   echo '    0,'; echo '};'; } > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c $(BUILD)/gen/c.cfg
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libdtrain.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdtrain-app.a: $(APP_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BINDIR)/dtrain: $(MAIN_OBJ) $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(BUILD)/gen/link.cfg
	@mkdir -p $(dir $@)
	$(CC) -pthread -o $@ $(MAIN_OBJ) $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(LINK_LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(BUILD)/gen/c.cfg $(BUILD)/gen/link.cfg
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a -lcmocka $(LINK_LIBS)

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(BUILD)/gen/c.cfg \
                         $(BUILD)/gen/link.cfg
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(LINK_LIBS)

deps:
	@scripts/install-deps.sh

# The demo needs the build's libraries and the dataset only; `make test` installs the rest.
deps-demo:
	@scripts/install-deps.sh --demo

demo: deps-demo
	@$(MAKE) --no-print-directory all
	$(BINDIR)/dtrain launch configs/quickstart.yaml

# configs/gpt-kjv.yaml's text: the King James Bible (Debian's bible-kjv-text,
# printed by its reader `bible` from bible-kjv) as byte-level token shards in
# data/kjv/ (`dtrain data bytes`: train_000000.bin, val_000000.bin; last 10% val).
kjv-data: data/kjv/train_000000.bin
data/kjv/train_000000.bin: | $(BINDIR)/dtrain
	bible gen1:1-rev22:21 </dev/null | $(BINDIR)/dtrain data bytes - -o data/kjv

# `make test`: every suite, one closing "N passed, N failed, N skipped" line.
test: deps
	@$(MAKE) --no-print-directory test-only

test-only: all $(UNIT_BIN) $(HELPER_BIN) $(BUILD)/specgen
	@DTRAIN=$(abspath $(BINDIR)/dtrain) BUILD=$(abspath $(BUILD)) scripts/run-tests.sh

# GPU tests (CUDA kernels against the CPU reference, NCCL collectives): a machine with a GPU.
test-gpu: all
	@BUILD=$(BUILD) CC=$(CC) CFLAGS='$(CFLAGS_ALL)' LIBS='$(LIBS)' tests/gpu/run.sh

# The GPU tests compiled and linked, not run: what `make test` checks on a machine without a GPU.
test-gpu-build: all
	@BUILD=$(BUILD) CC=$(CC) CFLAGS='$(CFLAGS_ALL)' LIBS='$(LIBS)' tests/gpu/run.sh --build

unit: $(UNIT_BIN)

# The job spec's generated files, written from the key tables (spec/jobspec*.c) by spec/gen/:
# the JSON Schema, reference.yaml and the key tables of the man page and README.md.  Committed;
# tests/integration/test_generated.sh fails when they differ from what the tables give.
SPECGEN := $(BUILD)/specgen
$(SPECGEN): $(wildcard spec/gen/*.c spec/gen/*.h) $(BUILD)/libdtrain.a $(BUILD)/gen/c.cfg $(BUILD)/gen/link.cfg
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.c,$^) $(BUILD)/libdtrain.a $(LINK_LIBS)

generated: $(SPECGEN)
	$(SPECGEN) schema > configs/job.schema.json.tmp && mv configs/job.schema.json.tmp configs/job.schema.json
	$(SPECGEN) reference > configs/reference.yaml.tmp && mv configs/reference.yaml.tmp configs/reference.yaml
	$(SPECGEN) man < docs/dtrain.1 > docs/dtrain.1.tmp && mv docs/dtrain.1.tmp docs/dtrain.1
	$(SPECGEN) markdown < README.md > README.md.tmp && mv README.md.tmp README.md

# Leaks of Open MPI and OpenBLAS (allocated once, kept until exit) are
# suppressed by library name (tests/lsan.supp); those libraries have no frame
# pointers, so only the slow unwinder reaches the frame that names them; it
# makes allocation-heavy code ~12x slower, so time guards get 10x (lib.sh).
asan: deps
	@ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	  DTRAIN_TEST_TIME_SCALE=10 $(MAKE) --no-print-directory BUILD=build-asan BINDIR=build-asan/bin SAN=1 CUDA=0 test-only

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_SECONDS ?= 20
# UBSan aborts on its first report: left to recover, it prints and the fuzzer
# carries on as if nothing were found (and only each log's tail is shown).
# An input that runs 25 s is a hang (libFuzzer's default waits 20 minutes).
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# Each target is built and run by its own rule, so `make -j` runs them side by side
# (-O keeps each one's lines together).
FUZZ_RUNS := $(patsubst tests/fuzz/%.c,fuzz-run-%,$(FUZZ_SRC))
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz BINDIR=build-fuzz/bin CC=clang CUDA=0 SAN=0 \
	  CFLAGS_EXTRA='-fsanitize=fuzzer-no-link $(FUZZ_SAN)' build-fuzz/libdtrain.a build-fuzz/libdtrain-app.a
	@mkdir -p build-fuzz/fuzz
	@$(MAKE) --no-print-directory -O $(FUZZ_RUNS)

fuzz-run-%: FORCE
	@clang -std=c11 -D_GNU_SOURCE -I. -g -O1 -fsanitize=fuzzer $(FUZZ_SAN) -o build-fuzz/fuzz/$* tests/fuzz/$*.c \
	  build-fuzz/libdtrain-app.a build-fuzz/libdtrain.a $(DEP_LIBS) $(SYS_LIBS)
	@mkdir -p build-fuzz/corpus/$*
	@echo "fuzz: $* for $(FUZZ_SECONDS)s"
	@UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1} \
	  build-fuzz/fuzz/$* -max_total_time=$(FUZZ_SECONDS) -timeout=25 -print_final_stats=0 \
	    build-fuzz/corpus/$* $$( [ -d tests/fuzz/corpus/$* ] && echo tests/fuzz/corpus/$* ) \
	    > build-fuzz/fuzz/$*.log 2>&1 \
	    || { tail -n 40 build-fuzz/fuzz/$*.log; echo "fuzz: $* found a crash (log: build-fuzz/fuzz/$*.log)"; exit 1; }
	@tail -n 3 build-fuzz/fuzz/$*.log

# `make bundle`: for a GPU machine without libyaml, libuv, jansson or OpenBLAS (the device machines
# here): dtrain and the GPU test programs built with those linked in and without MPI, stripped, in
# build/bundle.tar.xz; unpacked at a checkout's root it gives bin/dtrain and build/tests/gpu/, for
# `tests/gpu/run.sh --run` and bench/gpt2_gpu.sh (docs/gpu.md), and build/fashion-mnist/ (30 MB,
# FMNIST), which the GPU machine lacks and test_cuda_trainer reads (tests/gpu/run.sh points it there).
BUNDLE := $(BUILD)/bundle
FMNIST ?= /usr/share/datasets/fashion-mnist
bundle:
	@$(MAKE) --no-print-directory CUDA=1 STATIC_DEPS=1 MPI=0 BUILD=$(BUNDLE) BINDIR=$(BUNDLE)/bin all test-gpu-build
	@rm -rf $(BUNDLE)/pack && mkdir -p $(BUNDLE)/pack/bin $(BUNDLE)/pack/build/tests/gpu
	@if [ -f $(FMNIST)/train-images-idx3-ubyte.gz ]; then cp -r $(FMNIST) $(BUNDLE)/pack/build/fashion-mnist; \
	  else echo "bundle: no Fashion-MNIST in $(FMNIST) (FMNIST=...): test_cuda_trainer will need DTRAIN_FMNIST"; fi
	@strip -o $(BUNDLE)/pack/bin/dtrain $(BUNDLE)/bin/dtrain
	@for f in $(BUNDLE)/tests/gpu/test_*; do case $$f in *.d) ;; \
	  *) strip -o $(BUNDLE)/pack/build/tests/gpu/$$(basename $$f) $$f || exit 1 ;; esac; done
	@tar -C $(BUNDLE)/pack -cJf $(BUILD)/bundle.tar.xz . && echo "bundle: $(BUILD)/bundle.tar.xz"

DOCDIR ?= $(PREFIX)/share/doc/dtrain

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/dtrain/base \
	  $(DESTDIR)$(PREFIX)/include/dtrain/comm $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(DOCDIR) \
	  $(DESTDIR)$(PREFIX)/share/dtrain/python
	install -m 755 $(BINDIR)/dtrain $(DESTDIR)$(PREFIX)/bin/dtrain
	install -m 644 python/dtrain_progress.py $(DESTDIR)$(PREFIX)/share/dtrain/python/
	install -m 644 $(BUILD)/libdtrain.a $(DESTDIR)$(PREFIX)/lib/libdtrain.a
	install -m 644 base/error.h $(DESTDIR)$(PREFIX)/include/dtrain/base/
	install -m 644 comm/comm.h comm/store.h $(DESTDIR)$(PREFIX)/include/dtrain/comm/
	install -m 644 README.md docs/*.md configs/reference.yaml configs/job.schema.json $(DESTDIR)$(DOCDIR)/
	sed 's|@DOCDIR@|$(DOCDIR)|g' docs/dtrain.1 > $(DESTDIR)$(PREFIX)/share/man/man1/dtrain.1
	chmod 644 $(DESTDIR)$(PREFIX)/share/man/man1/dtrain.1

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-asan build-fuzz bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
