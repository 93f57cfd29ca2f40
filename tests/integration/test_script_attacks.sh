#!/usr/bin/env bash
# test_script_attacks.sh - values that reach a rendered script, each tried as an attacker
# who controls them would (a team's shared environment, a file name in a shared
# directory), with the script then run, Slurm's commands replaced by stand-ins, to see that nothing the
# value holds runs (docs/security.md):
#   1. log_dir: ${SCRATCH:-/tmp}/runs (the docs' own) with SCRATCH=$'...\ntouch PWN #': the
#      sbatch script's comment lines, its RUN_DIR and the spec it carries;
#   2. a spec file whose name holds a newline and a command: the script's header comment;
#   3. the same through `dtrain launch` (a stand-in sbatch keeps the script it is given);
#   4. slurm.tasks: per_rank, a command word holding a newline: the step shown in a comment;
#   5. the mpirun line of a spec given with --set, under such a name;
#   6. a local launch of such a file: the heading comment of the run's job.yaml snapshot.
# Each script is also parsed (bash -n), and no line of it may begin with the injected words: a
# word that holds a newline is written $'...\n...' (bash), on one line.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/bin" "$T/work"
# Slurm's commands, replaced by stand-ins: srun runs nothing, sbatch keeps the script it is given.
cat >"$T/bin/srun" <<'SH'
#!/bin/sh
exit 0
SH
cat >"$T/bin/sbatch" <<'SH'
#!/bin/sh
for a in "$@"; do last=$a; done
cp "$last" "$(dirname "$0")/submitted.sbatch"
echo 7
SH
cat >"$T/bin/scontrol" <<'SH'
#!/bin/sh
echo "JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n1"
SH
chmod +x "$T/bin/srun" "$T/bin/sbatch" "$T/bin/scontrol"

# run_script WHAT FILE: parses it, and runs it as the batch shell would (SLURM_JOB_ID set, the
# stand-in srun on PATH) in $T/work; ok when nothing named PWN* appears anywhere under $T.
run_script() {
  check "$1: the script parses (bash -n)" bash -n "$2"
  if grep -qE '^touch ' "$2"; then not_ok "$1: no line of the script is the injected command"
    grep -nE '^touch ' "$2" | sed 's/^/    /'
  else ok "$1: no line of the script is the injected command"; fi
  (cd "$T/work" && env PATH="$T/bin:$PATH" SLURM_JOB_ID=1 DTRAIN=true bash "$2" >"$T/run.out" 2>&1)
  check "$1: running the script runs nothing it was given (no PWN file)" test -z "$(find "$T" -name 'PWN*' | head -n 1)"
}

# --- 1. log_dir from ${SCRATCH} ---------------------------------------------------------
cat >"$T/scratch.yaml" <<'YAML'
name: inj
scheduler: slurm
nodes: 2
log_dir: ${SCRATCH:-/tmp}/runs
command: [hostname]
YAML
export SCRATCH="$T/s
touch PWN #"
"$DTRAIN" render slurm "$T/scratch.yaml" >"$T/scratch.sbatch" 2>"$T/render.err" || not_ok "render: $(cat "$T/render.err")"
contains "$T/scratch.sbatch" 'in full to .*/s\\ntouch PWN #/runs/inj-<job id>' "log_dir's newline is shown as \\n in the comment"
run_script "log_dir: \${SCRATCH}/runs" "$T/scratch.sbatch"
check "the spec it carries names the same log_dir, newline and all (the job's run directory)" \
  test -d "$SCRATCH/runs/inj-1" -a -f "$SCRATCH/runs/inj-1/job.yaml"
check "render leaves no copy of the spec behind (the script carries it)" \
  test -z "$(find "$T" -name '.dtrain-*' | head -n 1)"
unset SCRATCH

# --- 2. a spec file whose name holds a command --------------------------------------------
evil="$T/job
touch PWN2 #.yaml"
printf 'name: inj2\nscheduler: slurm\nnodes: 2\nlog_dir: %s/runs\ncommand: [hostname]\n' "$T" >"$evil"
"$DTRAIN" render slurm "$evil" >"$T/name.sbatch" 2>"$T/render.err" || not_ok "render: $(cat "$T/render.err")"
contains "$T/name.sbatch" 'rendered by `dtrain render slurm .*/job\\ntouch PWN2 #\.yaml`' "the path's newline is \\n in the header"
run_script "a spec file named with a newline" "$T/name.sbatch"

# --- 3. the same through dtrain launch -------------------------------------------------------
env PATH="$T/bin:$PATH" "$DTRAIN" launch "$evil" >"$T/launch.out" 2>&1
check "launch submitted the script (stand-in sbatch)" test -s "$T/bin/submitted.sbatch"
run_script "dtrain launch of that file" "$T/bin/submitted.sbatch"

# --- 4. per_rank: a command word with a newline, shown in a comment --------------------------
cat >"$T/perrank.yaml" <<YAML
name: inj4
scheduler: slurm
nodes: 2
nproc_per_node: 2
log_dir: $T/runs
command: [sh, -c, "echo hi\ntouch PWN4"]
slurm: {tasks: per_rank}
YAML
"$DTRAIN" render slurm "$T/perrank.yaml" >"$T/perrank.sbatch" 2>"$T/render.err" || not_ok "render: $(cat "$T/render.err")"
contains "$T/perrank.sbatch" "^#   srun .* [\$]'echo hi\\\\ntouch PWN4'$" "the step's comment shows the word as \$'...', its newline as \\n"
run_script "per_rank's step comment" "$T/perrank.sbatch"

# --- 5. the mpirun line -----------------------------------------------------------------------
printf 'name: inj5\nscheduler: mpirun\nnodes: 2\ncommand: [hostname]\nmpirun: {hosts: [a, b]}\n' >"$T/m
touch PWN5 #.yaml"
"$DTRAIN" render mpirun "$T/m
touch PWN5 #.yaml" --set nodes=2 >"$T/mpirun.sh" 2>"$T/render.err" || not_ok "render mpirun: $(cat "$T/render.err")"
check "mpirun: the output parses (bash -n)" bash -n "$T/mpirun.sh"
if grep -q '^touch' "$T/mpirun.sh"; then not_ok "mpirun: no line of the output is the injected command"
else ok "mpirun: no line of the output is the injected command"; fi

# --- 6. the run's job.yaml snapshot -----------------------------------------------------------
snap="$T/snap
name: pwned #.yaml"
printf 'name: snapjob\nlog_dir: %s/runs\ncommand: ["true"]\n' "$T" >"$snap"
expect_status 0 "a local launch of a spec file whose name holds 'name: pwned'" "$DTRAIN" launch "$snap"
js=$(ls "$T"/runs/snapjob-*/job.yaml 2>/dev/null | head -n 1)
check "the run's job.yaml exists ($js)" test -n "$js"
contains "${js:-$T/none}" '^# The spec as `dtrain launch` ran it \(.*/snap\\nname: pwned #\.yaml\)' \
  "its heading comment shows the path's newline as \\n"
if [ -n "$js" ] && "$DTRAIN" validate --print "$js" 2>/dev/null | grep -qx 'name: "snapjob"'; then
  ok "the snapshot reads back as the job it ran (name snapjob, not the path's 'pwned')"
else not_ok "the snapshot reads back as the job it ran"; cat "$js" 2>/dev/null | head -5 | sed 's/^/    /'; fi
