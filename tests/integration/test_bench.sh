# test_bench.sh - `dtrain bench` under `dtrain launch`: nccl-tests' table and
# footer, #wrong 0 for every collective, dtype and op, both backends, and
# --min-bw failing the run; nccl-tests' flags and layout, read back by a
# parser that cuts nccl-tests' fixed columns (nccl_tests_parse.py).
. "$(dirname "$0")/lib.sh"

# job NAME NPROC ARGS...: a job whose ranks run `dtrain bench ARGS`.
job() {
  local name=$1 n=$2; shift 2
  local args
  args=$(printf ', "%s"' "$@")
  { echo "name: $name"; echo "scheduler: local"; echo "log_dir: $T/runs"; echo "nproc_per_node: $n"
    echo "command: [\"$DTRAIN\", bench$args]"; } >"$T/$name.yaml"
}

PY=$(command -v python3) || { not_ok "python3 is needed to parse the output (scripts/install-deps.sh)"; exit 1; }
PARSE=$(dirname "$0")/nccl_tests_parse.py

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

# A malformed tuning knob is refused with its name, not replaced by the default.
job knob 2 allreduce -b 8 -e 8 --backend tcp
expect_status 1 "a malformed DTRAIN_TCP_SEGMENT_BYTES stops the bench" \
  env DTRAIN_TCP_SEGMENT_BYTES=8k "$DTRAIN" launch --ranks 0 "$T/knob.yaml"
contains "$T/last.err" 'DTRAIN_TCP_SEGMENT_BYTES="8k": expected a whole number' "the message names the variable and the range"
job knob2 2 allreduce -b 8 -e 8 --backend shm
expect_status 1 "a malformed DTRAIN_SHM_SLOT_BYTES stops the bench" \
  env DTRAIN_SHM_SLOT_BYTES=lots "$DTRAIN" launch --ranks 0 "$T/knob2.yaml"
contains "$T/last.err" 'DTRAIN_SHM_SLOT_BYTES="lots"' "the message names it"

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
contains "$T/last.out" "average bus bandwidth [0-9.e+-]+ GB/s is below --min-bw 100000 GB/s" \
  "a sentence says which bandwidth missed which threshold"
check "the output parses as nccl-tests' with verdict FAILED" "$PY" "$PARSE" "$T/last.out" --rows 1 --bw-verdict FAILED
job fast 2 allreduce -b 1K -e 1K -n 2 --min-bw 0.000001
expect_status 0 "--min-bw below what the run reaches passes" "$DTRAIN" launch --ranks 0 "$T/fast.yaml"
check "... and the footer says OK" "$PY" "$PARSE" "$T/last.out" --rows 1 --bw-verdict OK

# nccl-tests' flags, read back through a parser that cuts nccl-tests' columns.
job fl 2 allreduce -b 1K -e 64K -f 2 -n 3 -w 0 --backend tcp
expect_status 0 "-b 1K -e 64K -f 2 -n 3 -w 0 runs" "$DTRAIN" launch --ranks 0 "$T/fl.yaml"
check "7 rows 1K..64K by 2, iters 3, warmup 0, busbw = algbw at 2 ranks" \
  "$PY" "$PARSE" "$T/last.out" --rows 7 --iters 3 --warmup 0 --factor 1
job st 3 allreduce -b 8 -e 24K -i 8K -n 2 -c 0 --backend tcp
expect_status 0 "-i 8K (step bytes) with -c 0 runs" "$DTRAIN" launch --ranks 0 "$T/st.yaml"
check "3 rows 8, 8200, 16392; #wrong N/A without validation; busbw = algbw x 4/3" \
  "$PY" "$PARSE" "$T/last.out" --rows 3 --no-check --factor 1.3333333
contains "$T/last.out" "^\[rank 0\]         8200 " "the second row is 8 + 8K bytes"
job ty 2 allreduce -b 4K -e 4K -d double -o max -n 2 --backend shm
expect_status 0 "-d double -o max runs" "$DTRAIN" launch --ranks 0 "$T/ty.yaml"
check "one row, exact" "$PY" "$PARSE" "$T/last.out" --rows 1
contains "$T/last.out" "^\[rank 0\]         4096           512    double     max      -1 " "-d double -o max: 512 doubles, max"
job ag 4 allgather -b 1K -e 4K -f 4 -n 2 --backend tcp
expect_status 0 "allgather on 4 ranks runs" "$DTRAIN" launch --ranks 0 "$T/ag.yaml"
check "allgather parses as all_gather_perf, busbw = algbw x 3/4" \
  "$PY" "$PARSE" "$T/last.out" --program all_gather_perf --rows 2 --factor 0.75

expect_status 0 "one rank without a job runs alone" "$DTRAIN" bench allreduce -b 8 -e 8 -n 1
contains "$T/last.out" "Rank  0 Group  0" "one device line"
expect_status 2 "unknown collective is a usage error" "$DTRAIN" bench alltoall
expect_status 2 "bad size is a usage error" "$DTRAIN" bench allreduce -b 12Q
