#!/usr/bin/env bash
# allreduce.sh - dtrain's CPU allreduce against its peers on this machine, in one run:
#   dtrain shm and tcp     `dtrain bench allreduce` under `dtrain launch`
#   ompi-sm                Open MPI 4.1 MPI_Allreduce, shared memory (vader), defaults
#   ompi-sm+g              the same with GLIBC_TUNABLES=glibc.malloc.mmap_max=0:... (no fresh-page
#                          cliff: Open MPI's per-call temporaries stay in the heap, infra.md §9)
#   ompi-tcp, ompi-tcp+g   --mca btl self,tcp over loopback, without and with the tunable
#   gloo                   torch.distributed all_reduce on the Gloo backend (PyTorch CPU)
# dtrain shm runs with --bind (one core per rank, at <= 2 ranks, as mpirun binds by default);
# tcp does not (on loopback the receiver's softirq work runs on the sender's core, and pinning
# measured slower on the 2-core VM).
# float32 sum, in place, buffers allocated and touched once; 8 B (latency) and 1 KiB - 256 MiB
# by 4x; 2 and 4 ranks.  Every figure is the mean time per call over the timed iterations,
# averaged over ranks; busbw = size/time * 2(n-1)/n in GB/s (1e9), as nccl-tests.
# Prints one table per rank count with the ratios the targets are stated in (docs/bench.md):
#   shm/sm   dtrain shm busbw / the better Open MPI shared-memory variant   (target >= 1.0 at >= 1 MiB)
#   tcp/tcp  dtrain tcp busbw / the better Open MPI TCP variant             (target >= 1.0 at >= 1 MiB)
#   tcp/gloo dtrain tcp busbw / Gloo                                        (target >= 2.0 at >= 1 MiB)
#   8 B row: times in us and shm time / Open MPI sm time                   (target <= 1.5)
# REPS rounds (default 3); each round runs every peer once, one after another, so slow phases
# of a busy machine hit all peers alike; every cell is the median over the rounds
# (on a shared machine one run of the same collective can be up to 10x slower than the next).
#
# QUIET=S: before each peer's run wait up to S seconds for a second in which the machine was
# >= 90% idle (other users' builds), so that the peers are measured alone when possible.
#
#   bench/allreduce.sh [RANKS...]        default: 2 4
#   MAX=64M REPS=1 bench/allreduce.sh 2  a shorter sweep
#
# What it runs, each printed at the start; a missing piece stops the run (no peer is ever
# dropped or replaced silently):
#   DTRAIN=path     dtrain binary (default bin/dtrain)
#   MPI_BENCH=path  a prebuilt bench/mpi_allreduce.c (e.g. `mpicc -O2 -o mpi_allreduce
#                   bench/mpi_allreduce.c` on a machine with mpicc, for a host that has mpirun
#                   but no mpicc); default: built here with mpicc
#   PYTHON=path     a python that imports torch, for the Gloo peer (default .venv/bin/python if
#                   there is one, else python3)
#   MPIRUN=path     (default mpirun)
set -euo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
RANKS=${*:-2 4}
MAX=${MAX:-256M}
REPS=${REPS:-3}
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=$PWD/.venv/bin/python # the repo's peers (scripts/install-deps.sh)
MPIRUN=${MPIRUN:-mpirun}
W=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT

die() { echo "allreduce.sh: $*" >&2; exit 1; }
bytes() { numfmt --from=iec "$1"; }
MAXB=$(bytes "$MAX") || die "MAX=$MAX is not a size (e.g. 64M)"
for n in $RANKS; do [[ $n =~ ^[1-9][0-9]*$ && $n -ge 2 ]] || die "rank count '$n' is not an integer >= 2"; done
[ -x "$DTRAIN" ] || die "no dtrain binary at $DTRAIN: build it first (make) or set DTRAIN=path"
command -v "$MPIRUN" >/dev/null || die "no $MPIRUN on PATH: Open MPI is a peer of this benchmark (set MPIRUN=path)"
MPI_VER=$("$MPIRUN" --version 2>&1 | head -1)
if [ -n "${MPI_BENCH:-}" ]; then
  [ -x "$MPI_BENCH" ] || die "MPI_BENCH=$MPI_BENCH is not an executable file"
  MPI_BIN=$(realpath "$MPI_BENCH") MPI_FROM="prebuilt (MPI_BENCH)"
else
  command -v mpicc >/dev/null ||
    die "no mpicc here to build bench/mpi_allreduce.c: build it where mpicc exists and pass MPI_BENCH=path"
  mpicc -O2 -o "$W/mpi_allreduce" bench/mpi_allreduce.c || die "mpicc could not build bench/mpi_allreduce.c"
  MPI_BIN=$W/mpi_allreduce MPI_FROM="built here by $(command -v mpicc)"
fi
TORCH_VER=$("$PY" -c 'import torch, torch.distributed as d; print(torch.__version__, "gloo" if d.is_gloo_available() else "NO-GLOO")' 2>&1) ||
  die "PYTHON=$PY cannot import torch (set PYTHON to a python with PyTorch): $(echo "${TORCH_VER:-no output}" | tail -1)"
[[ $TORCH_VER == *NO-GLOO ]] && die "PYTHON=$PY: this torch ($TORCH_VER) has no Gloo backend"
# Open MPI 5 renamed the shared-memory BTL vader -> sm.
SM_BTL=vader
[[ $MPI_VER =~ \ ([0-9]+)\. ]] && [ "${BASH_REMATCH[1]}" -ge 5 ] && SM_BTL=sm
echo "allreduce.sh: dtrain  $DTRAIN ($("$DTRAIN" --version 2>&1 | head -1))"
echo "allreduce.sh: mpi     $MPI_BIN, $MPI_FROM; $(command -v "$MPIRUN"): $MPI_VER; shm btl $SM_BTL"
echo "allreduce.sh: gloo    $(command -v "$PY" || echo "$PY"): torch $TORCH_VER"
echo "allreduce.sh: host    $(nproc) CPUs online to this process, $(getconf _NPROCESSORS_ONLN) on the machine; load $(cut -d' ' -f1-3 /proc/loadavg)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
TUNE=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296
"$MPIRUN" -np 1 "$MPI_BIN" 8 8 2 1 0 >"$W/probe" 2>&1 ||
  die "the MPI peer does not run here ($MPIRUN -np 1 $MPI_BIN): $(tail -3 "$W/probe")"

# Each peer prints "size time_us busbw" rows; arguments: RANKS MIN MAX ITERS WARMUP.
peer_dtrain() { # BACKEND N MIN MAX ITERS WARMUP
  local be=$1 n=$2 bind=""
  [ "$be" = shm ] && bind=", --bind"
  cat >"$W/job.yaml" <<YAML
name: bench-allreduce
scheduler: local
log_dir: $W/runs
nproc_per_node: $n
command: ["$DTRAIN", bench, allreduce, -b, "$3", -e, "$4", -f, "4", -n, "$5", -w, "$6", -c, "1", --backend, $be$bind]
YAML
  "$DTRAIN" launch --quiet --ranks 0 "$W/job.yaml" >"$W/out" 2>&1 || { cat "$W/out" >&2; return 1; }
  # in-place columns: time $10, busbw $12, #wrong $13 (out-of-place $9)
  sed -n 's/^\[rank 0\] //p' "$W/out" | awk '!/^#/ { if ($9 != 0 || $13 != 0) { print "wrong values" > "/dev/stderr"; exit 1 }
                                                  print $1, $10, $12 }'
}
peer_mpi() { # BTL TUNED N MIN MAX ITERS WARMUP
  local btl=$1 tuned=$2 n=$3; shift 3
  local env=()
  [ "$tuned" = 1 ] && env=(-x GLIBC_TUNABLES=$TUNE)
  "$MPIRUN" -np "$n" --mca btl "self,$btl" "${env[@]}" "$MPI_BIN" "$1" "$2" 4 "$3" "$4" 2>"$W/err" ||
    { cat "$W/err" >&2; return 1; }
}
peer_gloo() { # N MIN MAX ITERS WARMUP
  local n=$1 port=$((20000 + RANDOM % 20000)) pids=()
  shift
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$PY" bench/gloo_allreduce.py "$1" "$2" 4 "$3" "$4" >"$W/gloo.$r" 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$W"/gloo.* >&2; return 1; }; done
  cat "$W/gloo.0"
}

# quiet: waits up to $QUIET seconds for a second with >= 90% of the CPU time idle
quiet() {
  local end=$((SECONDS + ${QUIET:-0})) a b c d e f g t1 i1 t2 i2
  while [ "$SECONDS" -lt "$end" ]; do
    read -r _ a b c d e f g _ </proc/stat; t1=$((a + b + c + d + e + f + g)); i1=$d
    sleep 1
    read -r _ a b c d e f g _ </proc/stat; t2=$((a + b + c + d + e + f + g)); i2=$d
    [ $((100 * (i2 - i1) / (t2 - t1 + 1))) -ge 90 ] && return 0
  done
  [ "${QUIET:-0}" -gt 0 ] && echo "allreduce.sh: the machine stayed busy for $QUIET s; measuring anyway" >&2
  return 0
}

PEERS="shm tcp ompi-sm ompi-sm+g ompi-tcp ompi-tcp+g gloo"
run_peer() { # PEER N MIN MAX ITERS WARMUP
  local p=$1; shift
  case $p in
    shm|tcp) peer_dtrain "$p" "$@" ;;
    ompi-sm) peer_mpi "$SM_BTL" 0 "$@" ;;
    ompi-sm+g) peer_mpi "$SM_BTL" 1 "$@" ;;
    ompi-tcp) peer_mpi tcp 0 "$@" ;;
    ompi-tcp+g) peer_mpi tcp 1 "$@" ;;
    gloo) peer_gloo "$@" ;;
  esac
}

# median FILE: "size time busbw" rows -> one row per size, median time and median busbw
median() {
  sort -k1,1n -k2,2g "$1" | awk '
    function flush(  i, j, t) {
      if (!n) return
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (B[j] < B[i]) { t = B[i]; B[i] = B[j]; B[j] = t }
      print s, T[int((n + 1) / 2)], B[int((n + 1) / 2)]; n = 0
    }
    $1 != s { flush(); s = $1 }
    { n++; T[n] = $2; B[n] = $3 }
    END { flush() }'
}

for n in $RANKS; do
  for ((rep = 1; rep <= REPS; rep++)); do
    for p in $PEERS; do
      quiet
      echo "allreduce.sh: $n ranks, $p, round $rep of $REPS" >&2
      {
        run_peer "$p" "$n" 8 8 2000 100
        run_peer "$p" "$n" 1024 65536 200 20
        run_peer "$p" "$n" 262144 $((MAXB < 4194304 ? MAXB : 4194304)) 50 5
        [ "$MAXB" -ge 16777216 ] && run_peer "$p" "$n" 16777216 "$MAXB" 5 2
      } >>"$W/$n.$p.raw"
    done
  done
  for p in $PEERS; do median "$W/$n.$p.raw" >"$W/$n.$p"; done
  [ -n "${KEEP:-}" ] && cp "$W"/"$n".* "$KEEP"/
  echo
  echo "# allreduce, float32 sum, in place, $n ranks on $(getconf _NPROCESSORS_ONLN) cores, median of $REPS round(s): busbw GB/s (8 B row: time in us)"
  awk -v peers="$PEERS" -v dir="$W" -v n="$n" '
    BEGIN {
      np = split(peers, P, " ")
      for (i = 1; i <= np; i++) {
        f = dir "/" n "." P[i]
        while ((getline line < f) > 0) { split(line, a, " "); T[P[i], a[1]] = a[2]; B[P[i], a[1]] = a[3]; S[a[1]] = 1 }
      }
      printf "%10s", "size"; for (i = 1; i <= np; i++) printf " %10s", P[i]
      printf " %8s %8s %8s\n", "shm/sm", "tcp/tcp", "tcp/gloo"
      m = 0; for (s in S) Z[++m] = s + 0
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (Z[j] < Z[i]) { t = Z[i]; Z[i] = Z[j]; Z[j] = t }
      for (k = 1; k <= m; k++) {
        s = Z[k]; lat = s < 1024
        printf "%10d", s
        for (i = 1; i <= np; i++) { v = lat ? T[P[i], s] : B[P[i], s]; printf " %10s", v }
        if (lat) {
          sm = T["ompi-sm", s]; if (T["ompi-sm+g", s] < sm) sm = T["ompi-sm+g", s]
          r = sm > 0 ? T["shm", s] / sm : 0
          printf " %8.2f %8s %8s   (time ratio, lower is better)\n", r, "-", "-"
          continue
        }
        sm = B["ompi-sm", s]; if (B["ompi-sm+g", s] > sm) sm = B["ompi-sm+g", s]
        tc = B["ompi-tcp", s]; if (B["ompi-tcp+g", s] > tc) tc = B["ompi-tcp+g", s]
        r1 = sm > 0 ? B["shm", s] / sm : 0; r2 = tc > 0 ? B["tcp", s] / tc : 0
        r3 = B["gloo", s] > 0 ? B["tcp", s] / B["gloo", s] : 0
        printf " %8.2f %8.2f %8.2f\n", r1, r2, r3
      }
    }'
done
