#!/usr/bin/env bash
# test_build_config.sh - the build follows its configuration.  `make` alone builds bin/dtrain, also
# where nvcc is found and the cuDNN frontend is not; a build with other switches recompiles what they
# touch and a build with the same ones recompiles nothing, so `dtrain version` is true of the binary:
# `make demo` (no Open MPI yet, MPI=0) then `make test` (MPI=1) gives a binary with the MPI backend.
# Builds a copy of this tree's sources with CUDA=0 (the C parts only: about a minute on 2 cores).
# run-tests: uses make
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
src=$T/src
jobs=$(nproc)

# The sources as they are here (committed or not, new files included), without build outputs.
mkdir -p "$src"
if ! (cd "$ROOT" && git ls-files -z -co --exclude-standard) >"$T/files" 2>"$T/git.err"; then
  not_ok "copy the source tree: git ls-files failed in $ROOT: $(head -n1 "$T/git.err")"
  exit 0
fi
tar -C "$ROOT" --null -T "$T/files" --ignore-failed-read -cf - 2>/dev/null | tar -C "$src" -xf -
check "the source tree is copied ($(tr -cd '\0' <"$T/files" | wc -c) files)" test -f "$src/Makefile" -a -d "$src/comm"

# objects DIR: the path of every object in DIR's build, one a line, sorted.
objects() { (cd "$1" && find build -name '*.o' | sort); }
# mk ARGS: make in the copy, its own build/ and bin/: not the BUILD run-tests exports, nor the switches
# of a make this runs under (`make asan` passes SAN=1 down in MAKEFLAGS).
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u BUILD -u BINDIR make -C "$src" "$@"; }
# absent PATTERN FILE: grep -E finds no PATTERN in FILE.
absent() { ! grep -Eq -- "$1" "$2"; }
# compiled LOG: the objects a make run compiled (its compiler lines' -o), one a line, sorted.
compiled() { sed -n 's/^cc .* -c .* -o \(build\/[^ ]*\.o\)$/\1/p' "$1" | sort; }

# 1. No goal, MPI off (what `make demo` builds before Open MPI is installed).
mk -j"$jobs" CUDA=0 MPI=0 >"$T/make1.log" 2>&1
rc=$?
check "make with no goal (CUDA=0 MPI=0) builds bin/dtrain" test $rc -eq 0 -a -x "$src/bin/dtrain"
# What follows reads this build: without it, its checks would say nothing.
[ $rc -eq 0 ] || { tail -n 20 "$T/make1.log" | cut -c1-300 | sed 's/^/    /'; exit 0; }
"$src/bin/dtrain" version >"$T/version1" 2>&1
contains "$T/version1" '^mpi: no' "the MPI=0 binary says mpi: no"
nm "$src/build/comm/comm.o" >"$T/nm1" 2>&1
check "comm.o of the MPI=0 build does not refer to the MPI backend" absent dt_comm_backend_mpi "$T/nm1"
contains "$src/build/gen/c.cfg" '^CUDA=0 MPI=0 SAN=0 ' "build/gen/c.cfg records CUDA=0 MPI=0"
objects "$src" >"$T/objects1"
n_obj=$(wc -l <"$T/objects1")
check "the MPI=0 build has its objects in build/ ($n_obj)" test "$n_obj" -ge 100

# 2. MPI on (what `make test` builds once it installed Open MPI): every C object is compiled again.
if ! command -v mpicc >/dev/null; then
  not_ok "an MPI=1 build: mpicc is not installed (scripts/install-deps.sh installs openmpi-bin and libopenmpi-dev)"
  exit 0
fi
mk -j"$jobs" CUDA=0 MPI=1 >"$T/make2.log" 2>&1
rc=$?
check "make CUDA=0 MPI=1 on the MPI=0 build succeeds" test $rc -eq 0 -a -x "$src/bin/dtrain"
[ $rc -eq 0 ] || { tail -n 20 "$T/make2.log" | cut -c1-300 | sed 's/^/    /'; exit 0; }
"$src/bin/dtrain" version >"$T/version2" 2>&1
contains "$T/version2" '^mpi: yes' "the rebuilt binary says mpi: yes"
contains "$T/version2" '^cuda: no' "and cuda: no (CUDA=0)"
nm "$src/build/comm/comm.o" >"$T/nm2" 2>&1
contains "$T/nm2" 'U dt_comm_backend_mpi$' "comm.o was compiled again and refers to the MPI backend"
compiled "$T/make2.log" >"$T/compiled2"
missing=$(comm -23 "$T/objects1" "$T/compiled2" | head -n 5 | tr '\n' ' ')
check "every object of the MPI=0 build was compiled again${missing:+ (not: $missing)}" test -z "$missing"
check "the MPI backend's objects were compiled" grep -q '^build/comm/mpi/mpi_backend.o$' "$T/compiled2"
contains "$src/build/gen/c.cfg" '^CUDA=0 MPI=1 SAN=0 .*-DDT_HAVE_MPI' "build/gen/c.cfg records MPI=1 and its flags"

# 3. The same switches again: the stamps stay as they are and nothing is compiled or linked.
stamp_before=$(stat -c "%i %.9Y" "$src/build/gen/c.cfg" 2>/dev/null)
mk CUDA=0 MPI=1 >"$T/make3.log" 2>&1
rc=$?
check "make with the same switches succeeds and compiles and links nothing" \
  eval "[ $rc -eq 0 ] && absent '^(cc|g\+\+|nvcc|rm -f) ' '$T/make3.log'"
check "and leaves build/gen/c.cfg as it was" test -n "$stamp_before" -a "$(stat -c "%i %.9Y" "$src/build/gen/c.cfg" 2>/dev/null)" = "$stamp_before"

# 4. `make` alone where nvcc is found and the cuDNN frontend is not: still bin/dtrain, not the cuDNN
#    object alone (a dry run: nvcc need not be here).
mk -n CUDA=1 CUDNN_FE_INC= >"$T/make4.log" 2>&1
check "make with no goal, CUDA=1 and no cuDNN frontend, would link bin/dtrain" \
  grep -Eq -- '-o bin/dtrain( |$)' "$T/make4.log"
check "and would compile the C objects with DT_HAVE_CUDA (CUDA=0 then CUDA=1 gives cuda: yes)" \
  grep -Eq '^cc .*-DDT_HAVE_CUDA.* -c launcher/cli/cmd_version.c' "$T/make4.log"
