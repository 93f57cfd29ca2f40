# test_layers.sh - the include rules between layers (docs/architecture.md) hold, and
# comments name files that exist.
#
# scripts/check-layers.py reads the table of allowed edges (scripts/layers.txt),
# every #include "..." under base/, spec/, comm/, worker/, scheduler-adapters/
# and launcher/, and the drawing of the table in docs/architecture.md; the tree
# must pass, and small made-up trees (or tables, or drawings) that break each
# rule must fail, naming the file and line, so the check is never vacuous.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

if python3 scripts/check-layers.py . >"$T/tree.out" 2>&1; then
  ok "every include in the tree follows an edge of the layer table, which docs/architecture.md draws; every file a comment names exists"
else
  not_ok "every include in the tree follows an edge of the layer table, which docs/architecture.md draws; every file a comment names exists"; sed 's/^/    /' "$T/tree.out"
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
refused up '^base/log.c:1: base/ includes "launcher/agent/agent.h" of launcher/agent/, an edge the layer table does not have' \
  "base/ including a launcher/ header is refused, with file and line"
tree adapters scheduler-adapters/slurm.c '#include "spec/jobspec.h"' '#include "launcher/coordinator.h"'
refused adapters '^scheduler-adapters/slurm.c:2: ' "an adapter including a launcher/ header is refused"
# Not merely a lower layer: an edge of the table (layer numbers let an adapter include worker/).
tree downward scheduler-adapters/mpirun/mpirun.c '#include "comm/comm.h"' '#include "worker/trainer.h"'
refused downward '^scheduler-adapters/mpirun/mpirun.c:2: .*scheduler-adapters/ may include base/ comm/ spec/' \
  "an adapter including worker/, a layer below it but no edge of the table, is refused"
tree sideways launcher/coordinator/coord_server.c '#include "launcher/agent/agent.h"'
refused sideways '^launcher/coordinator/coord_server.c:1: launcher/coordinator/ includes' \
  "one process's folder including another's without an edge (the coordinator the agent's) is refused"
printf 'base\nspec base\ncomm base spec\nspec2 comm\n' >"$T/cycle.txt"
sed -i 's/^spec base$/spec base spec2/' "$T/cycle.txt"
if python3 scripts/check-layers.py "$T/fine-none" --table "$T/cycle.txt" >"$T/cycle.out" 2>&1; then
  not_ok "a table whose edges go round is refused (the check passed)"
elif grep -q 'the edges go round (.*spec.*); layers only point down' "$T/cycle.out"; then
  ok "a table whose edges go round is refused"
else not_ok "a table whose edges go round is refused"; sed 's/^/    /' "$T/cycle.out"; fi
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
# The drawing: an arrow too many, an arrow missing, a folder missing; each named.
drawing() {
  rm -rf "$T/doc"; mkdir -p "$T/doc/docs"
  sed "$1" docs/architecture.md >"$T/doc/docs/architecture.md"
  mkdir -p "$T/doc/scripts"; cp scripts/layers.txt "$T/doc/scripts/"
}
drawing 's|^comm/  *─► base/$|comm/                  ─► spec/ base/|'
refused doc 'docs/architecture.md: draws comm/ ─► spec/, an edge the table does not have' \
  "a drawing with an arrow the table does not have (comm/ to spec/) is refused"
drawing 's|^launcher/coordinator/  ─► comm/ spec/ base/$|launcher/coordinator/  ─► comm/ base/|'
refused doc 'does not draw launcher/coordinator/ ─► spec/, an edge of the table' \
  "a drawing without an edge of the table is refused"
drawing '/^launcher\/report\/  *─►/d'
refused doc 'draws no line for launcher/report/' "a drawing without a folder of the table is refused"
tree fine launcher/cli/main.c '#include "base/error.h"' '#include "spec/jobspec.h"' '#include "comm/comm.h"' \
  '#include "worker/trainer.h"' '#include "scheduler-adapters/adapter.h"' '#include "comm/nccl/nccl_comm.h"'
check "a file including every layer below its own passes" python3 scripts/check-layers.py "$T/fine"
