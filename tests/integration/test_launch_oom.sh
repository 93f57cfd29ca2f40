# test_launch_oom.sh - a rank killed by the kernel's out-of-memory killer is
# reported as such (the memory cgroup's oom_kill counter), not as a bare SIGKILL.
# The test puts the launcher in a child memory cgroup limited to 128 MiB and a
# rank allocates 400 MiB.  It needs a writable memory cgroup (root, cgroup v1
# or v2 with the memory controller delegated); without one it fails and says
# why: a skip would read as a pass.
. "$(dirname "$0")/lib.sh"

cg=""
v1=$(sed -n 's/^[0-9]*:[^:]*memory[^:]*://p' /proc/self/cgroup)
v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
if [ -n "$v1" ] && [ -d "/sys/fs/cgroup/memory$v1" ]; then
  cg="/sys/fs/cgroup/memory$v1/dtrain-oom-$$"
  mkdir "$cg" 2>/dev/null && echo $((128 << 20)) >"$cg/memory.limit_in_bytes" 2>/dev/null || cg=""
elif [ -n "$v2" ] && [ -f "/sys/fs/cgroup$v2/cgroup.subtree_control" ]; then
  cg="/sys/fs/cgroup${v2%/}/dtrain-oom-$$"
  { mkdir "$cg" && echo $((128 << 20)) >"$cg/memory.max"; } 2>/dev/null || cg=""
fi
if [ -z "$cg" ]; then
  not_ok "a writable memory cgroup to run a rank out of memory in (run as root with cgroup v1's memory" \
    "controller or cgroup v2 with memory delegated; /proc/self/cgroup: $(tr '\n' ' ' </proc/self/cgroup))"
  exit 1
fi
trap 'rmdir "$cg" 2>/dev/null; rm -rf "$T"' EXIT

cat >"$T/oom.yaml" <<EOF2
name: oom
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
command: [python3, -c, 'import os, time; x = b"x" * (400 << 20) if os.environ["RANK"] == "1" else time.sleep(30)']
EOF2
# Only this subshell (and so the launcher and its ranks) moves into the limited cgroup.
( echo "$BASHPID" >"$cg/cgroup.procs" && exec "$DTRAIN" launch "$T/oom.yaml" ) >"$T/out" 2>"$T/err"
status=$?
check "a rank killed by the OOM killer: exit status 137 (got $status)" test "$status" = 137
contains "$T/err" "rank 1 failed first.*killed by SIGKILL" "the first failure is rank 1, killed by SIGKILL"
contains "$T/err" "out-of-memory killer ran in this job's memory cgroup" "the launcher says it was the OOM killer"
rd=$(ls -d "$T"/runs/oom-*)
check "summary.json: oom_killer is true" test "$(python3 -c "import json; print(json.load(open('$rd/summary.json'))['first_failure']['oom_killer'])")" = True
