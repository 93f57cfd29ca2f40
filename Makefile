# dtrain - build, test and install.
#
#   make              bin/dtrain and build/libdtrain.a (CUDA parts when nvcc is found)
#   make demo         install what is missing, build, run the demo job here
#   make test         install what is missing, build, run every test; ends "N passed, N failed"
#   make asan         the same tests under AddressSanitizer + UBSan (build-asan/)
#   make fuzz         build the libFuzzer targets (clang) and run each briefly
#   make install      PREFIX=/usr/local: binary, library, headers, man page
#   CUDA=0|1          force the CUDA parts off or on (default: on when nvcc is found)
#   STATIC_DEPS=1     link libyaml, libuv and OpenBLAS statically (for machines without them)
#
# Sources are found by folder: comm/ and worker/ make libdtrain.a, launcher/ and
# scheduler-adapters/ make the CLI, GPU code lives in comm/nccl/ and worker/cuda/.
# Adding a file needs no edit here.

VERSION   := 0.1.0
PREFIX    ?= /usr/local
BUILD     ?= build
BINDIR    ?= bin
CC        ?= cc
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
SAN       ?= 0
STATIC_DEPS ?= 0

ifeq ($(origin CUDA),undefined)
CUDA := $(if $(wildcard $(NVCC)),1,0)
endif

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -g -pthread -MMD -MP \
                 -DDT_VERSION='"$(VERSION)"'
ifeq ($(SAN),1)
CFLAGS_COMMON += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_SAN   := -fsanitize=address,undefined
else
CFLAGS_COMMON += -O2
endif
CFLAGS_EXTRA ?=
CFLAGS_ALL := $(CFLAGS_COMMON) $(CFLAGS_EXTRA)

ifeq ($(STATIC_DEPS),1)
DEP_LIBS := -Wl,-Bstatic -l:libyaml.a -l:libuv_a.a -l:libopenblas.a -l:libz.a -l:libgfortran.a -l:libquadmath.a -Wl,-Bdynamic
else
DEP_LIBS := -lyaml -luv -lopenblas -lz
endif
SYS_LIBS := -lm -lpthread -ldl -lrt

LIB_SRC := $(wildcard comm/*.c worker/*.c)
APP_SRC := $(filter-out launcher/main.c,$(wildcard launcher/*.c scheduler-adapters/*.c))
GPU_SRC :=
CU_SRC  :=
GPU_LIBS :=
ifeq ($(CUDA),1)
GPU_SRC := $(wildcard comm/nccl/*.c worker/cuda/*.c)
CU_SRC  := $(wildcard comm/nccl/*.cu worker/cuda/*.cu)
CFLAGS_ALL += -DDT_HAVE_CUDA -I$(CUDA_HOME)/include
GPU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart
NVCCFLAGS ?= -O3 -std=c++17 -I. -DDT_HAVE_CUDA -Xcompiler -Wall,-fPIC \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
endif

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(GPU_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.o)
APP_OBJ := $(APP_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(BUILD)/launcher/main.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(BUILD)/tests/helpers/%)
LIBS := $(DEP_LIBS) $(GPU_LIBS) $(SYS_LIBS) $(LDFLAGS_SAN)

.PHONY: all deps demo test test-only unit asan fuzz install clean format
.DELETE_ON_ERROR:

all: $(BINDIR)/dtrain $(BUILD)/libdtrain.a

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libdtrain.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdtrain-app.a: $(APP_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BINDIR)/dtrain: $(MAIN_OBJ) $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) -pthread -o $@ $(MAIN_OBJ) $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(LIBS) $(if $(CU_SRC),-lstdc++)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a -lcmocka $(LIBS) $(if $(CU_SRC),-lstdc++)

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libdtrain-app.a $(BUILD)/libdtrain.a $(LIBS) $(if $(CU_SRC),-lstdc++)

deps:
	@scripts/install-deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	$(BINDIR)/dtrain launch configs/demo.yaml

# `make test`: every suite, one closing "N passed, N failed" line.
test: deps
	@$(MAKE) --no-print-directory test-only

test-only: all $(UNIT_BIN) $(HELPER_BIN)
	@DTRAIN=$(abspath $(BINDIR)/dtrain) BUILD=$(abspath $(BUILD)) scripts/run-tests.sh

unit: $(UNIT_BIN)

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan BINDIR=build-asan/bin SAN=1 CUDA=0 test-only

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_SECONDS ?= 20
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz BINDIR=build-fuzz/bin CC=clang CUDA=0 \
	  CFLAGS_EXTRA='-fsanitize=fuzzer-no-link,address,undefined' build-fuzz/libdtrain.a build-fuzz/libdtrain-app.a
	@mkdir -p build-fuzz/fuzz
	@set -e; for src in $(FUZZ_SRC); do \
	  name=$$(basename $$src .c); \
	  clang -std=c11 -D_GNU_SOURCE -I. -g -O1 -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz/$$name $$src \
	    build-fuzz/libdtrain-app.a build-fuzz/libdtrain.a $(DEP_LIBS) $(SYS_LIBS); \
	  mkdir -p build-fuzz/corpus/$$name; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  build-fuzz/fuzz/$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 build-fuzz/corpus/$$name $$( [ -d tests/fuzz/corpus/$$name ] && echo tests/fuzz/corpus/$$name ) 2>&1 | tail -n 3; \
	done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/dtrain/comm \
	  $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BINDIR)/dtrain $(DESTDIR)$(PREFIX)/bin/dtrain
	install -m 644 $(BUILD)/libdtrain.a $(DESTDIR)$(PREFIX)/lib/libdtrain.a
	install -m 644 comm/*.h $(DESTDIR)$(PREFIX)/include/dtrain/comm/
	install -m 644 docs/dtrain.1 $(DESTDIR)$(PREFIX)/share/man/man1/dtrain.1

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf build build-asan build-fuzz bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
