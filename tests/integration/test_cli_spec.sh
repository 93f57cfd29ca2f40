# test_cli_spec.sh - the job spec on the command line (docs/cli.md): `dtrain run` without a file,
# ${VAR} and --set with their errors, validate reporting every problem in file order and agreeing
# with launch and render, launch --dry-run starting nothing, and the exit statuses (2 only for
# dtrain's refusals, a job's own status in summary.json).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

# --- dtrain run ---------------------------------------------------------------
expect_status 0 "dtrain run -n 2 -- sh -c 'echo \$RANK'" "$DTRAIN" run -n 2 --log-dir "$T/runs" -- sh -c 'echo $RANK'
contains "$T/last.out" '^\[rank 0\] 0$' "rank 0 printed its RANK"
contains "$T/last.out" '^\[rank 1\] 1$' "rank 1 printed its RANK"
check "dtrain run wrote a run directory with summary.json" test -f "$(ls -d "$T"/runs/sh-*/summary.json | head -n 1)"
check "and removed its spec copy once the job ended" test -z "$(ls -A "$T/runs" | grep '^\.dtrain-')"
expect_status 0 "--print-spec with torchrun's spellings" "$DTRAIN" run --nproc_per_node=3 --max-restarts 1 --auth none --print-spec train.py --lr 1
contains "$T/last.out" '^nproc_per_node: 3$' "--nproc_per_node=3 is nproc_per_node: 3"
contains "$T/last.out" '^  auth: none$' "--auth none is rendezvous.auth"
contains "$T/last.out" '^command: \["python3", "-u", "train.py", "--lr", "1"\]$' "a .py PROGRAM runs under python3 -u (as torchrun), its flags kept"
expect_status 0 "--print-spec of an interpreter and its script" "$DTRAIN" run --print-spec -- python3 train_gpt.py --lr 1
contains "$T/last.out" '^name: "train-gpt"$' "the job is named after the script python3 runs, not python3"
expect_status 0 "--nproc-per-node N" "$DTRAIN" run --nproc-per-node 2 --print-spec -- true
contains "$T/last.out" '^nproc_per_node: 2$' "--nproc-per-node 2 is nproc_per_node: 2"
PYTHON=echo expect_status 0 "-m MODULE runs python -u -m MODULE" "$DTRAIN" run -n 1 --log-dir "$T/runs" -m pkg.mod --flag x
contains "$T/last.out" '^\[rank 0\] -u -m pkg.mod --flag x$' "the rank ran \$PYTHON -u -m pkg.mod --flag x"
expect_status 2 "dtrain run -n x: a spec error" "$DTRAIN" run -n x -- true
contains "$T/last.err" "nproc_per_node: expected an integer" "it names the key the flag stands for"
expect_status 2 "dtrain run without a program" "$DTRAIN" run -n 2

# --- ${VAR} and --set ------------------------------------------------------------
cat >job.yaml <<'YAML'
name: j
nproc_per_node: 2
log_dir: ${CLI_TEST_DIR}/runs
env: {GREETING: '${CLI_GREETING:-hello}', LITERAL: '$${HOME}'}
command: [sh, -c, 'echo "$GREETING $LITERAL rank=$RANK"; exit ${CODE:-0}']
YAML
CLI_TEST_DIR="$T/v" expect_status 0 "a spec with \${VAR} runs" "$DTRAIN" launch job.yaml
contains "$T/last.out" '^\[rank 1\] hello \$\{HOME\} rank=1$' "\${VAR:-default} and \$\$ in values; command left to the shell"
check "log_dir: \${CLI_TEST_DIR}/runs is where the run went" test -d "$(ls -d "$T"/v/runs/j-* | head -n 1)"
expect_status 2 "an unset variable without a default" "$DTRAIN" validate job.yaml
contains "$T/last.err" '^job.yaml:3:10: \$\{CLI_TEST_DIR\}: the environment variable CLI_TEST_DIR is not set' \
  "the error is at its line:column"
CLI_TEST_DIR="$T/v" expect_status 0 "--set overrides a key, an env entry" "$DTRAIN" launch job.yaml \
  --set nproc_per_node=1 --set env.GREETING=hi
contains "$T/last.out" '^\[rank 0\] hi ' "env.GREETING=hi reached the rank"
check "nproc_per_node=1: one rank" test -z "$(grep '^\[rank 1\]' "$T/last.out")"
CLI_TEST_DIR="$T/v" expect_status 2 "--set with an unknown key path" "$DTRAIN" launch job.yaml --set trainer.stepz=5
contains "$T/last.err" "--set trainer.stepz=5: unknown key path: no key 'stepz' in trainer; did you mean 'trainer.steps'" \
  "it names the path and the close key"
CLI_TEST_DIR="$T/v" expect_status 2 "--set with a bad value" "$DTRAIN" validate job.yaml --set max_restarts=-1
contains "$T/last.err" "^--set max_restarts=-1: max_restarts: expected an integer from 0" "checked as the file's value"

# --- validate: every problem, in file order; agreement with launch and render ---------
cat >bad.yaml <<'YAML'
name: b
nodes: 0
scheduler: locl
command: [a]
rendezvous: {timeout: 3}
max_restart: 2
YAML
expect_status 2 "validate of a spec with four problems" "$DTRAIN" validate bad.yaml
check "all four, in file order" test "$(cut -d: -f2,3 "$T/last.err" | tr '\n' ' ')" = "2:8 3:12 5:23 6:1 "
expect_status 2 "launch says the same four" "$DTRAIN" launch bad.yaml
check "launch lists them too" test "$(grep -c '^dtrain launch: bad.yaml:' "$T/last.err")" = 4
printf 'name: two\nnodes: 2\ncommand: [true]\n' >two.yaml
expect_status 0 "nodes: 2 with scheduler: local passes validate: one dtrain agent per node runs it" "$DTRAIN" validate two.yaml
contains "$T/last.out" "ok: two, local, 2 nodes x 1 rank, .*runs as one .dtrain agent. per node" "validate says how it runs"
expect_status 2 "launch refuses it: it runs one machine" "$DTRAIN" launch two.yaml
contains "$T/last.err" "nodes: 2 with scheduler: local" "launch says the same"
printf 'name: l\ncommand: [true]\nkubernetes: {image: img}\n' >local.yaml
expect_status 0 "render k8s renders a scheduler: local spec for Kubernetes (the scheduler on the command line)" \
  "$DTRAIN" render k8s local.yaml
contains "$T/last.out" "kind: Job" "the manifests are written"
contains "$T/last.out" "^    scheduler: kubernetes$" "the ConfigMap holds the spec as rendered: scheduler: kubernetes"
expect_status 0 "render slurm of it too" "$DTRAIN" render slurm local.yaml
contains "$T/last.out" "^scheduler: slurm$" "the script carries the spec with scheduler: slurm"
check "render leaves no copy of the spec behind" test -z "$(find . -name '.dtrain-*' | head -n 1)"
printf 'name: l\ncommand: [true]\nsetup: [true]\n' >setup.yaml
expect_status 2 "validate refuses setup: with scheduler: local" "$DTRAIN" validate setup.yaml
expect_status 0 "render slurm reads it as a Slurm spec, where setup: runs" "$DTRAIN" render slurm setup.yaml
expect_status 2 "render k8s refuses it without a kubernetes: section" "$DTRAIN" render k8s setup.yaml
contains "$T/last.err" "needs a kubernetes: section" "it says why"

# --- launch --dry-run ---------------------------------------------------------------
CLI_TEST_DIR="$T/dry" expect_status 0 "launch --dry-run exits 0" "$DTRAIN" launch job.yaml --dry-run
contains "$T/last.out" "1 node x 2 ranks per node = world size 2" "it shows ranks per node"
contains "$T/last.out" "^argv: 'sh' '-c'" "it shows the argv"
contains "$T/last.out" "^    RANK=1$" "it shows each rank's environment"
contains "$T/last.out" "^    GREETING=hello$" "with the spec's env"
check "nothing ran: no run directory" test ! -e "$T/dry"
printf 'name: s\nscheduler: slurm\nnodes: 2\ncommand: [true]\n' >slurm.yaml
expect_status 0 "a slurm job's dry run" "$DTRAIN" launch slurm.yaml --dry-run
contains "$T/last.out" "^#SBATCH --nodes=2" "it shows the sbatch script launch would submit"

# --- exit statuses ----------------------------------------------------------------
CODE=2 CLI_TEST_DIR="$T/x" expect_status 1 "a rank exiting 2 exits 1: 2 is kept for dtrain's refusals" "$DTRAIN" launch job.yaml
contains "$(ls -d "$T"/x/runs/j-*/summary.json | head -n 1)" '"exit_status": 2' "summary.json keeps the rank's own status"
CODE=3 CLI_TEST_DIR="$T/x" expect_status 3 "a rank exiting 3 exits 3" "$DTRAIN" launch job.yaml
expect_status 2 "a usage error exits 2" "$DTRAIN" launch job.yaml --set
expect_status 2 "a command not on PATH exits 2" "$DTRAIN" run -- no-such-program-xyz
