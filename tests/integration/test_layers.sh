# test_layers.sh - the include rules between layers (docs/architecture.md) hold, and
# comments name files that exist.
#
# scripts/check-layers.py reads every #include "..." under base/, spec/,
# comm/, worker/, scheduler-adapters/ and launcher/; the tree must pass, and
# small made-up trees that break each rule must fail, naming the file and
# line, so the check is never vacuous.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

if python3 scripts/check-layers.py . >"$T/tree.out" 2>&1; then
  ok "every include in the tree points to its own layer or a lower one; every file a comment names exists"
else
  not_ok "every include in the tree points to its own layer or a lower one; every file a comment names exists"; sed 's/^/    /' "$T/tree.out"
fi

# tree NAME FILE TEXT...: a made-up tree with one file holding TEXT (and every
# header it names, empty), then the check's verdict on it in $T/NAME.out.
tree() {
  local name=$1 file=$2; shift 2
  rm -rf "$T/$name"; mkdir -p "$T/$name/$(dirname "$file")"
  printf '%s\n' "$@" > "$T/$name/$file"
  for inc in $(printf '%s\n' "$@" | sed -n 's/^#include "\(.*\)"$/\1/p'); do
    mkdir -p "$T/$name/$(dirname "$inc")"; touch "$T/$name/$inc"
  done
}
# refused NAME PATTERN WHAT: the check fails on tree NAME and says PATTERN.
refused() {
  if python3 scripts/check-layers.py "$T/$1" >"$T/$1.out" 2>&1; then
    not_ok "$3 (the check passed)"
  elif grep -Eq -- "$2" "$T/$1.out"; then ok "$3"
  else not_ok "$3 (no /$2/ in its output)"; sed 's/^/    /' "$T/$1.out"
  fi
}

tree up base/log.c '#include "launcher/agent/agent.h"'
refused up '^base/log.c:1: .*layers only point down' "base/ including a launcher/ header is refused, with file and line"
tree adapters scheduler-adapters/slurm.c '#include "spec/jobspec.h"' '#include "launcher/coordinator.h"'
refused adapters '^scheduler-adapters/slurm.c:2: ' "an adapter including a launcher/ header is refused"
tree backends comm/tcp/tcp.c '#include "comm/shm/shm.h"'
refused backends 'backends never include each other' "one backend including another is refused"
tree inside worker/reducer.c '#include "comm/tcp/tcp.h"'
refused inside 'reached through comm/comm.h' "the trainer reaching into a backend is refused"
tree missing worker/model.c '#include "worker/gone.h"'
rm -f "$T/missing/worker/gone.h"
refused missing 'does not exist' "an include of a file that is not there is refused"
tree stale worker/reducer.c '/* the buckets start in worker/reducer_start.c and in model_amp.c */'
refused stale 'names worker/reducer_start.c, which does not exist' "a comment naming a file that is not in the tree is refused"
grep -q 'no file of the tree has that name' "$T/stale.out" && ok "so is a comment naming a bare file name no file has" \
  || not_ok "so is a comment naming a bare file name no file has"
tree fine launcher/cli/main.c '#include "base/error.h"' '#include "spec/jobspec.h"' '#include "comm/comm.h"' \
  '#include "worker/trainer.h"' '#include "scheduler-adapters/adapter.h"' '#include "comm/nccl/nccl_comm.h"'
check "a file including every layer below its own passes" python3 scripts/check-layers.py "$T/fine"
