#!/usr/bin/env bash
# mpi_backend.sh - dtrain's MPI backend against Open MPI itself, in one run, under the same
# mpirun settings:
#   dtrain mpi   `dtrain bench allreduce` in a `scheduler: mpirun, backend: mpi` job: each call
#                is MPI_Iallreduce polled with MPI_Test under a deadline (comm/mpi/mpi_coll.c)
#   ompi-nb      bench/mpi_allreduce.c built with mpi_iallreduce_shim.h: MPI_Iallreduce + MPI_Wait,
#                Open MPI's nonblocking algorithms (coll/libnbc), the ones the backend runs
#   ompi         bench/mpi_allreduce.c: plain blocking MPI_Allreduce (coll/tuned)
# float32 sum, in place, buffers allocated and touched once; 8 B and 1 KiB - MAX by 4x.  Every
# figure is the mean time per call over the timed iterations, averaged over ranks; busbw =
# size/time * 2(n-1)/n in GB/s.  Ratios are dtrain busbw / the peer's (the 8 B row compares
# times, peer / dtrain): vs ompi-nb is what the backend's wrapper costs, vs ompi what the
# deadline design (nonblocking collectives) costs.  Shared memory (vader) and TCP over
# loopback.  On a busy machine repeat and look at medians.
#
#   bench/mpi_backend.sh [RANKS...]      default: 2 4
#   MAX=16M ITERS=20 bench/mpi_backend.sh 2
set -euo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
RANKS=${*:-2 4}
MAX=${MAX:-64M}
ITERS=${ITERS:-20}
W=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
[ -x "$DTRAIN" ] || { echo "mpi_backend.sh: build dtrain first (make)"; exit 1; }
mpicc -O2 -o "$W/mpi_allreduce" bench/mpi_allreduce.c
mpicc -O2 -include bench/mpi_iallreduce_shim.h -o "$W/mpi_iallreduce" bench/mpi_allreduce.c
MAXB=$(numfmt --from=iec "$MAX")
root=false; [ "$(id -u)" = 0 ] && root=true

# Each prints "size time_us busbw" rows.
run_dtrain() { # BTL N MIN MAX
  cat >"$W/job.yaml" <<YAML
name: bench-mpi
scheduler: mpirun
log_dir: $W/runs
nproc_per_node: $2
backend: mpi
mpirun: {allow_run_as_root: $root, oversubscribe: true, interfaces: [lo], extra_args: [--mca, btl, "self,$1"]}
command: ["$DTRAIN", bench, allreduce, -b, "$3", -e, "$4", -f, "4", -n, "$ITERS", -w, "2", -c, "1"]
YAML
  "$DTRAIN" launch --quiet --ranks 0 "$W/job.yaml" >"$W/out" 2>&1 || { cat "$W/out" >&2; return 1; }
  sed -n 's/^\[rank 0\] //p' "$W/out" | awk '!/^#/ { if ($9 != 0 || $13 != 0) { print "wrong values" > "/dev/stderr"; exit 1 }
                                                  print $1, $10, $12 }'
}
run_ompi() { # PROGRAM BTL N MIN MAX
  local a=(-np "$3" --oversubscribe --mca btl "self,$2" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
  $root && a+=(--allow-run-as-root)
  mpirun "${a[@]}" "$W/$1" "$4" "$5" 4 "$ITERS" 2 2>"$W/err" || { cat "$W/err" >&2; return 1; }
}

echo "# dtrain backend: mpi vs Open MPI $(mpirun --version | head -n1 | awk '{print $NF}'), $(nproc) cores, $(date -u +%F)"
for n in $RANKS; do
  for btl in vader tcp; do
    echo
    echo "## $n ranks, btl $btl"
    printf "%12s %10s %10s %10s %8s %8s %8s %7s %7s\n" size dtrain_us nb_us ompi_us dtrain_GB nb_GB ompi_GB vs_nb vs_ompi
    { run_dtrain $btl "$n" 8 8; run_dtrain $btl "$n" 1024 "$MAXB"; } >"$W/d"
    { run_ompi mpi_iallreduce $btl "$n" 8 8; run_ompi mpi_iallreduce $btl "$n" 1024 "$MAXB"; } >"$W/nb"
    { run_ompi mpi_allreduce $btl "$n" 8 8; run_ompi mpi_allreduce $btl "$n" 1024 "$MAXB"; } >"$W/o"
    awk 'FILENAME == ARGV[1] { t[$1] = $2; b[$1] = $3; next }
         FILENAME == ARGV[2] { nt[$1] = $2; nb[$1] = $3; next }
         ($1 in t) && ($1 in nt) {
           if ($1 == 8) { r1 = t[$1] > 0 ? nt[$1] / t[$1] : 0; r2 = t[$1] > 0 ? $2 / t[$1] : 0 }
           else { r1 = nb[$1] > 0 ? b[$1] / nb[$1] : 0; r2 = $3 > 0 ? b[$1] / $3 : 0 }
           printf "%12d %10.2f %10.2f %10.2f %8.3f %8.3f %8.3f %7.2f %7.2f\n", $1, t[$1], nt[$1], $2, b[$1], nb[$1], $3, r1, r2 }' \
      "$W/d" "$W/nb" "$W/o"
  done
done
