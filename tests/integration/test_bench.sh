# test_bench.sh - `dtrain bench` under `dtrain launch`: nccl-tests' table and
# footer, #wrong 0 for every collective, dtype and op, both backends, and
# --min-bw failing the run.
. "$(dirname "$0")/lib.sh"

# job NAME NPROC ARGS...: a job whose ranks run `dtrain bench ARGS`.
job() {
  local name=$1 n=$2; shift 2
  local args
  args=$(printf ', "%s"' "$@")
  { echo "name: $name"; echo "scheduler: local"; echo "log_dir: $T/runs"; echo "nproc_per_node: $n"
    echo "command: [\"$DTRAIN\", bench$args]"; } >"$T/$name.yaml"
}

# rows FILE: the table's data rows (rank prefix removed).
rows() { sed -n 's/^\[rank 0\] //p' "$1" | grep -v '^#'; }

job ar 2 allreduce -b 8 -e 4M -f 4 --backend shm
expect_status 0 "2-rank shm allreduce sweep succeeds" "$DTRAIN" launch --ranks 0 "$T/ar.yaml"
contains "$T/last.out" "# Collective test starting: all_reduce_perf" "preamble names all_reduce_perf"
contains "$T/last.out" "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong" "header columns match nccl-tests"
contains "$T/last.out" "# Out of bounds values : 0 OK" "no wrong values"
contains "$T/last.out" "# Avg bus bandwidth    : [0-9.e+-]+" "average bus bandwidth footer"
rows "$T/last.out" >"$T/ar.rows"
check "10 rows, 8 B to 2 MiB by 4x" test "$(wc -l <"$T/ar.rows")" = 10
check "every row has 13 columns and 0 wrong in both placements" \
  awk 'NF != 13 || $9 != 0 || $13 != 0 || $5 != -1 { exit 1 }' "$T/ar.rows"
check "busbw = algbw at 2 ranks (factor 2(n-1)/n)" awk '$7 != $8 { exit 1 }' "$T/ar.rows"

job all 3 allreduce -b 1K -e 64K -f 8 -d all -o all -n 3 --backend tcp
expect_status 0 "3-rank tcp allreduce over every dtype and op" "$DTRAIN" launch --ranks 0 "$T/all.yaml"
rows "$T/last.out" >"$T/all.rows"
check "6 dtypes x 4 ops x 3 sizes rows" test "$(wc -l <"$T/all.rows")" = 72
check "all rows exact" awk '$9 != 0 || $13 != 0 { exit 1 }' "$T/all.rows"

for coll in allgather reduce_scatter broadcast; do
  for be in tcp shm; do
    name=$(echo "$coll-$be" | tr _ -)
    job "$name" 3 "$coll" -b 96 -e 3M -f 32 -d all -n 3 --backend "$be"
    expect_status 0 "$coll on 3 ranks ($be)" "$DTRAIN" launch --ranks 0 "$T/$name.yaml"
    contains "$T/last.out" "# Out of bounds values : 0 OK" "$coll ($be): no wrong values"
  done
done
contains "$T/last.out" "Collective test concluded: broadcast_perf" "broadcast mirrors broadcast_perf"

job slow 2 allreduce -b 1K -e 1K -n 2 --min-bw 100000
expect_status 1 "--min-bw above what the run reaches fails it" "$DTRAIN" launch --ranks 0 "$T/slow.yaml"
contains "$T/last.out" "Avg bus bandwidth    : [0-9.e+-]+ FAILED" "the footer says FAILED"

expect_status 0 "one rank without a job runs alone" "$DTRAIN" bench allreduce -b 8 -e 8 -n 1
contains "$T/last.out" "Rank  0 Group  0" "one device line"
expect_status 2 "unknown collective is a usage error" "$DTRAIN" bench alltoall
expect_status 2 "bad size is a usage error" "$DTRAIN" bench allreduce -b 12Q
