/* test_slurm.c - the Slurm adapter without a cluster: the sbatch script for
 * specs with and without a slurm: section (every #SBATCH line, requeue, auth),
 * discover from SLURM_* environments (batch jobs, salloc-style steps, and each
 * missing or contradicting variable), the port rule, and the parsing of
 * scontrol/sacct output into a state and an exit status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "spec/placement.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/slurm/slurm.h"

static struct dt_job *load(const char *yaml)
{
    struct dt_job *job = NULL;
    if (dt_job_load_string(yaml, strlen(yaml), "job.yaml", &job) != 0)
        fail_msg("spec did not load: %s", dt_error_last());
    return job;
}

/* The rendered script, malloc'd. */
static char *render(const struct dt_job *job, const char *path, int *rc)
{
    char tmp[] = "/tmp/dtrain-test-slurm-XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fdopen(fd, "w+");
    *rc = dt_slurm_render(job, path, f);
    long len = ftell(f);
    char *buf = calloc(1, (size_t)len + 1);
    rewind(f);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    unlink(tmp);
    return buf;
}

static void has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("no \"%s\" in:\n%s", needle, text);
}

static void lacks(const char *text, const char *needle)
{
    if (strstr(text, needle))
        fail_msg("unexpected \"%s\" in:\n%s", needle, text);
}

static void registered(void **state)
{
    (void)state;
    assert_ptr_equal(dt_adapter_for(DT_SCHED_SLURM), &dt_adapter_slurm);
    assert_ptr_equal(dt_adapter_by_name("slurm"), &dt_adapter_slurm);
    assert_non_null(dt_adapter_slurm.render);
    assert_non_null(dt_adapter_slurm.plan);
    assert_non_null(dt_adapter_slurm.discover);
}

static void render_every_option(void **state)
{
    (void)state;
    struct dt_job *job =
        load("name: big\nscheduler: slurm\nnodes: 4\nnproc_per_node: 8\ncommand: [python3, t.py]\n"
             "slurm:\n  partition: gpu\n  account: ml\n  time: \"1-02:03:04\"\n"
             "  gpus_per_node: 8\n  cpus_per_task: 32\n  mem: 256Gi\n  qos: high\n"
             "  constraint: h100\n  exclusive: true\n  requeue: true\n"
             "  extra_sbatch: [--mail-type=END, --comment=x y]\n");
    int rc;
    char *s = render(job, "jobs/big job.yaml", &rc);
    assert_int_equal(rc, 0);
    assert_true(strncmp(s, "#!/bin/bash\n", 12) == 0);
    static const char *const lines[] = {"#SBATCH --job-name=big\n",
                                        "#SBATCH --nodes=4\n",
                                        "#SBATCH --ntasks-per-node=1\n",
                                        "#SBATCH --gpus-per-node=8\n",
                                        "#SBATCH --cpus-per-task=32\n",
                                        "#SBATCH --mem=256G\n",
                                        "#SBATCH --time=1-02:03:04\n",
                                        "#SBATCH --partition=gpu\n",
                                        "#SBATCH --account=ml\n",
                                        "#SBATCH --qos=high\n",
                                        "#SBATCH --constraint=h100\n",
                                        "#SBATCH --exclusive\n",
                                        "#SBATCH --output=big-%j.out\n",
                                        "#SBATCH --error=big-%j.err\n",
                                        "#SBATCH --open-mode=append\n",
                                        "#SBATCH --signal=B:USR1@90\n",
                                        "#SBATCH --requeue\n",
                                        "#SBATCH --mail-type=END\n",
                                        "#SBATCH --comment=x y\n",
                                        "JOB='jobs/big job.yaml'", /* quoted for the shell */
                                        "srun --kill-on-bad-exit=1 --cpus-per-task=\"$SRUN_CPUS_PER_TASK\" "
                                        "\"$DTRAIN\" agent \"$JOB\" "
                                        "${DTRAIN_LOG_DIR:+--log-dir \"$DTRAIN_LOG_DIR\"} "
                                        "${DTRAIN_GRACE_PERIOD:+--grace-period \"$DTRAIN_GRACE_PERIOD\"} &\n",
                                        "trap '",
                                        "kill -USR1 \"${step:-}\"",
                                        "if [ \"$status\" = 75 ]; then",
                                        "scontrol requeue \"$SLURM_JOB_ID\"",
                                        "exit \"$status\"\n",
                                        "DTRAIN_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom",
                                        "export DTRAIN_JOB_TOKEN",
                                        "4 nodes",
                                        "forks 8 ranks"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        has(s, lines[i]);
    /* every #SBATCH line comes before the first command, or sbatch ignores it */
    const char *first_cmd = strstr(s, "\nset -u\n");
    assert_non_null(first_cmd);
    size_t cmd_at = (size_t)(first_cmd - s), last_sbatch = 0;
    for (const char *p = s; (p = strstr(p, "\n#SBATCH")) != NULL; p++)
        last_sbatch = (size_t)(p - s);
    assert_true(last_sbatch > 0 && last_sbatch < cmd_at);
    free(s);
    dt_job_free(job);
}

static void render_minimal(void **state)
{
    (void)state;
    struct dt_job *job = load("name: small\nscheduler: slurm\nnodes: 2\nnproc_per_node: 2\n"
                              "rendezvous: {auth: none}\ncommand: [hostname]\n");
    int rc;
    char *s = render(job, "small.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --nodes=2\n");
    has(s, "JOB=small.yaml  #");
    has(s, "\nexec srun --kill-on-bad-exit=1 \"$DTRAIN\" agent \"$JOB\" ${DTRAIN_LOG_DIR:+--log-dir "
           "\"$DTRAIN_LOG_DIR\"} ${DTRAIN_GRACE_PERIOD:+--grace-period \"$DTRAIN_GRACE_PERIOD\"}\n");
    has(s, "rendezvous.auth is none");
    static const char *const absent[] = {
        "--partition", "--account", "--qos",     "--constraint", "--exclusive",       "--gpus", "--cpus",
        "--mem",       "--time",    "--requeue", "--signal",     "DTRAIN_JOB_TOKEN=", "trap"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        lacks(s, absent[i]);
    free(s);
    dt_job_free(job);
}

static void render_units(void **state)
{
    (void)state;
    struct dt_job *job = load("name: u\nscheduler: slurm\ncommand: [a]\nslurm: {mem: 1500MB, time: 90}\n");
    int rc;
    char *s = render(job, "u.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --mem=1431M\n"); /* 1.5e9 B = 1430.5 MiB, rounded up */
    has(s, "#SBATCH --time=01:30:00\n");
    has(s, "forks 1 rank;");
    free(s);
    dt_job_free(job);
}

/* Issue 29: what sbatch and srun read.  srun gets the CPU count (it does not
 * inherit it since Slurm 22.05), --mem as sbatch reads it, typed GPUs, signal_lead. */
static void render_as_sbatch_reads(void **state)
{
    (void)state;
    struct dt_job *job = load("name: u\nscheduler: slurm\nnproc_per_node: gpu\ncommand: [a]\n"
                              "slurm: {mem: 64G, cpus_per_task: 12, gpus_per_node: \"h100:8\", time: 0,\n"
                              "        requeue: true, signal_lead: 5m}\n");
    int rc;
    char *s = render(job, "u.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --mem=64G\n");
    has(s, "#SBATCH --gpus-per-node=h100:8\n");
    has(s, "#SBATCH --cpus-per-task=12\n");
    has(s, "#SBATCH --signal=B:USR1@300\n");
    has(s, "# SIGUSR1 comes 300 s before the time limit.");
    has(s, "\nexport SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-12}\n");
    has(s, "\nsrun --kill-on-bad-exit=1 --cpus-per-task=\"$SRUN_CPUS_PER_TASK\" \"$DTRAIN\" agent");
    lacks(s, "--time");
    has(s, "forks 8 ranks (one per GPU);"); /* nproc_per_node: gpu counts h100:8's 8 */
    struct dt_placement pl;                 /* the same count from the placement the adapter resolves */
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl), 0);
    assert_int_equal(pl.nproc, 8);
    assert_int_equal(pl.source, DT_NPROC_FROM_SCHEDULER);
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SPEC, &pl), 0);
    assert_int_equal(pl.source, DT_NPROC_PER_NODE); /* the spec alone: each node counts its own */
    /* the export comes before the step that reads it */
    assert_true(strstr(s, "export SRUN_CPUS_PER_TASK") < strstr(s, "\nsrun "));
    free(s);
    dt_job_free(job);
    job = load("name: u\nscheduler: slurm\ncommand: [a]\nslurm: {mem: 0, gpus_per_node: 2}\n");
    s = render(job, "u.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --mem=0\n");
    has(s, "#SBATCH --gpus-per-node=2\n");
    lacks(s, "SRUN_CPUS_PER_TASK");
    free(s);
    dt_job_free(job);
    job = load("name: u\nscheduler: slurm\ncommand: [a]\nslurm: {mem: 1500K}\n");
    s = render(job, "u.yaml", &rc);
    has(s, "#SBATCH --mem=2M\n"); /* 1500 KiB rounded up to MiB, as sbatch does */
    free(s);
    dt_job_free(job);
    job = load("name: u\nscheduler: slurm\ncommand: [a]\nslurm: {mem: 4097}\n");
    s = render(job, "u.yaml", &rc);
    has(s, "#SBATCH --mem=4097M\n"); /* a bare number is MiB */
    free(s);
    dt_job_free(job);
}

/* setup: lines run on every node, in its task before its agent; `dtrain launch` embeds the spec it submits. */
static void render_setup_and_snapshot(void **state)
{
    (void)state;
    const char *yaml = "name: s\nscheduler: slurm\ncommand: [a]\nlog_dir: my runs\n"
                       "setup: ['module load cuda/12.4', 'source venv/bin/activate', DTRAIN_NODE]\n"
                       "env: {X: \"DTRAIN_JOB_SPEC\"}\n";
    struct dt_job *job = load(yaml);
    int rc;
    char *s = render(job, "s.yaml", &rc);
    assert_int_equal(rc, 0);
    /* the node script, in a heredoc whose end word no setup line is */
    has(s, "\nNODE=$(cat <<'DTRAIN_NODE_1'\n"
           "trap 'echo \"dtrain: node ${SLURM_NODEID:-?}: a setup line failed (exit status $?); its agent does not "
           "start\" >&2' ERR\n"
           "set +u -e  # module and activate scripts may read unset variables\n"
           "module load cuda/12.4\nsource venv/bin/activate\nDTRAIN_NODE\nset +e\ntrap - ERR\n"
           "exec \"$@\"\nDTRAIN_NODE_1\n)\n");
    has(s, "\nexec srun --kill-on-bad-exit=1 bash -c \"$NODE\" dtrain-node \"$DTRAIN\" agent \"$JOB\" ");
    lacks(s, "RUN_DIR"); /* `dtrain render` leaves the spec where it is */
    lacks(s, "restarts=0");  /* max_restarts 0: no agent is started again */
    assert_true(strstr(s, "NODE=") < strstr(s, "\nexec srun"));
    free(s);
    char tmp[] = "/tmp/dtrain-test-slurm-XXXXXX";
    FILE *f = fdopen(mkstemp(tmp), "w+");
    /* a line equal to the heredoc's end word must not end it early */
    const char *text = "name: s\nscheduler: slurm\ncommand: [a]\nsetup: [x]\nenv:\n  X: |\nDTRAIN_JOB_SPEC\n";
    assert_int_equal(dt_slurm_render_script(job, "/abs/s.yaml", text, f), 0);
    long len = ftell(f);
    char *out = calloc(1, (size_t)len + 1);
    rewind(f);
    assert_int_equal(fread(out, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    unlink(tmp);
    has(out, "\nRUN_DIR=${DTRAIN_LOG_DIR:-'my runs'}/s-$SLURM_JOB_ID\n");
    /* `dtrain launch --resume`: the run it continues names the directory instead */
    has(out, "\nif [ -n \"${DTRAIN_SLURM_RUN_ID:-}\" ]; then");
    has(out, "\n  RUN_DIR=${DTRAIN_LOG_DIR:-'my runs'}/s-$DTRAIN_SLURM_RUN_ID\nfi\n"
             "mkdir -p \"${RUN_DIR%/*}\" && { mkdir -m 700 \"$RUN_DIR\" 2>/dev/null || [ -d \"$RUN_DIR\" ]; }\n");
    has(out, "cat >\"$RUN_DIR/job.yaml.tmp\" <<'DTRAIN_JOB_SPEC_1'\nname: s\n");
    has(out, "\nDTRAIN_JOB_SPEC\nDTRAIN_JOB_SPEC_1\nmv -f \"$RUN_DIR/job.yaml.tmp\" \"$RUN_DIR/job.yaml\"\n"
             "JOB=$RUN_DIR/job.yaml\n");
    assert_true(strstr(out, "JOB=$RUN_DIR/job.yaml") < strstr(out, "\nexec srun"));
    free(out);
    dt_job_free(job);
    /* a spec that is not its file as written (--set, ${VAR}) travels in the script, as printed */
    struct dt_job_load_opts o = {.set = (char *[]){"nodes=3", NULL}, .n_set = 1};
    assert_int_equal(dt_job_load_string_with(yaml, strlen(yaml), "s.yaml", &o, &job), 0);
    assert_true(job->derived);
    s = render(job, "s.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "cat >\"$RUN_DIR/job.yaml.tmp\" <<'DTRAIN_JOB_SPEC'\nname: \"s\"\n");
    has(s, "\nnodes: 3\n");
    has(s, "#SBATCH --nodes=3\n");
    free(s);
    dt_job_free(job);
}

/* slurm.tasks: per_rank: a task per rank, the agent in the batch shell runs their step. */
static void render_per_rank(void **state)
{
    (void)state;
    struct dt_job *job = load("name: pr\nscheduler: slurm\nnodes: 2\nnproc_per_node: gpu\ncommand: [a, 'b c']\n"
                              "slurm: {tasks: per_rank, gpus_per_node: \"h100:4\", cpus_per_task: 8, "
                              "cpu_bind: cores, gpu_bind: closest}\n");
    int rc;
    char *s = render(job, "pr.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --ntasks-per-node=4\n");
    has(s, "#   srun --kill-on-bad-exit=1 --label --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=8 "
           "--cpu-bind=cores --gpu-bind=closest \"$DTRAIN\" mpirank -- a 'b c'\n");
    has(s, "\nexec \"$DTRAIN\" agent \"$JOB\" ");
    lacks(s, "exec srun");
    free(s);
    /* the agent in the batch shell: node 0 with a group of every rank; under srun it is refused */
    char *env[] = {"SLURM_JOB_ID=7", "ENVIRONMENT=BATCH", "SLURM_NNODES=2", "SLURM_PROCID=0", NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), 0);
    assert_int_equal(n.node_rank, 0);
    assert_int_equal(n.nnodes, 2);
    assert_non_null(n.group);
    assert_int_equal(n.group->world, 8);
    char *step[] = {"SLURM_JOB_ID=7", "ENVIRONMENT=BATCH", "SLURM_NNODES=2", "SLURM_STEP_ID=0", NULL};
    assert_int_equal(dt_slurm_discover(job, step, &n), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "runs in the batch script itself, not under srun"));
    dt_job_free(job);
    /* per_node passes the binding to the agents' srun */
    job = load("name: pn\nscheduler: slurm\nnproc_per_node: 2\ncommand: [a]\nslurm: {cpu_bind: \"map_cpu:0,1\"}\n");
    s = render(job, "pn.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --ntasks-per-node=1\n");
    has(s, "exec srun --kill-on-bad-exit=1 --cpu-bind=map_cpu:0,1 \"$DTRAIN\" agent");
    free(s);
    dt_job_free(job);
    /* per_rank with nproc_per_node: gpu and GPUs asked another way: the tasks per node are unknown */
    job = load("name: pg\nscheduler: slurm\nnproc_per_node: gpu\ncommand: [a]\n"
               "slurm: {tasks: per_rank, extra_sbatch: [--gres=gpu:4]}\n");
    free(render(job, "pg.yaml", &rc));
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "per_rank needs the ranks per node"));
    dt_job_free(job);
    /* per_rank's one step has a fixed task count: an elastic job is refused */
    job = load("name: pe\nscheduler: slurm\nnodes: 2:3\nnproc_per_node: 2\ncommand: [a]\nslurm: {tasks: per_rank}\n");
    free(render(job, "pe.yaml", &rc));
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "per_rank starts every rank with one step of a fixed task count, but "
                                            "nodes: 2:3 is elastic"));
    dt_job_free(job);
}

/* nproc_per_node: gpu asks Slurm for the GPUs or is refused, as Kubernetes refuses pods without them. */
static void render_gpus_asked(void **state)
{
    (void)state;
    struct dt_job *job = load("name: g\nscheduler: slurm\nnproc_per_node: gpu\ncommand: [a]\n");
    int rc;
    free(render(job, "g.yaml", &rc));
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "g.yaml: nproc_per_node: gpu starts one rank per GPU, but "
                                            "slurm.gpus_per_node is not set, so the job asks Slurm for no GPU"));
    assert_int_equal(dt_slurm_check(job), DT_EINVAL); /* validate and launch refuse it the same way */
    dt_job_free(job);
    job = load("name: g\nscheduler: slurm\nnproc_per_node: gpu\ncommand: [a]\nslurm: {gpus_per_node: 4}\n");
    char *s = render(job, "g.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --gpus-per-node=4\n");
    has(s, "forks 4 ranks (one per GPU)");
    free(s);
    dt_job_free(job);
    job = load("name: g\nscheduler: slurm\nnproc_per_node: gpu\ncommand: [a]\n"
               "slurm: {extra_sbatch: [\"--gres=gpu:a100:2\"]}\n");
    s = render(job, "g.yaml", &rc);
    assert_int_equal(rc, 0); /* asked in the user's own line: each node counts what it got */
    has(s, "#SBATCH --gres=gpu:a100:2\n");
    has(s, "forks one rank per GPU");
    free(s);
    assert_int_equal(dt_slurm_check(job), 0);
    dt_job_free(job);
}

/* nodes: MIN:MAX: --nodes=MIN-MAX, and neither a lost task nor a failed node ends the step. */
static void render_elastic(void **state)
{
    (void)state;
    struct dt_job *job = load("name: el\nscheduler: slurm\nnodes: 2:4\nnproc_per_node: 2\ncommand: [a]\n");
    int rc;
    char *s = render(job, "el.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "#SBATCH --nodes=2-4\n#SBATCH --no-kill\n");
    has(s, "# 2 to 4 nodes; on each, one dtrain agent");
    has(s, "\nexec srun --kill-on-bad-exit=0 --no-kill bash -c \"$NODE\" dtrain-node \"$DTRAIN\" agent \"$JOB\" ");
    lacks(s, "--kill-on-bad-exit=1");
    /* a node whose agent stays lost leaves the job without failing the step: srun's status stays node 0's */
    has(s, "  [ \"$lost\" = 1 ] && [ \"$restarts\" -lt 0 ] || break\n");
    has(s, "if [ \"$lost\" = 1 ]; then\n  echo \"dtrain: node $SLURM_NODEID: its agent was lost (status $status); "
           "the elastic job goes \"\\\n\"on without this node\" >&2\n  exit 0\nfi\nexit \"$status\"\n");
    free(s);
    dt_job_free(job);
    /* a fixed job keeps one count and stops the step when an agent fails */
    job = load("name: f\nscheduler: slurm\nnodes: 3\ncommand: [a]\n");
    s = render(job, "f.yaml", &rc);
    has(s, "#SBATCH --nodes=3\n");
    lacks(s, "--no-kill");
    free(s);
    dt_job_free(job);
}

/* max_restarts: a node's task starts a lost agent again (never node 0's), up to max_restarts times. */
static void render_agent_restarts(void **state)
{
    (void)state;
    struct dt_job *job = load("name: r\nscheduler: slurm\nnodes: 2\nmax_restarts: 3\ncommand: [a]\n");
    int rc;
    char *s = render(job, "r.yaml", &rc);
    assert_int_equal(rc, 0);
    has(s, "\nNODE=$(cat <<'DTRAIN_NODE'\nrestarts=0 stop=0\ntrap 'stop=1' TERM INT HUP\ntrap ':' USR1 USR2\n"
           "port=$((20000 + ${SLURM_JOB_ID%%_*} % 10000))");
    has(s, "  if [ \"$status\" -gt 128 ] && [ \"$stop\" = 0 ] && [ \"${SLURM_NODEID:-0}\" != 0 ]; then\n");
    has(s, "  [ \"$lost\" = 1 ] && [ \"$restarts\" -lt 3 ] || break\n");
    has(s, "done\nexit \"$status\"\n");
    lacks(s, "exit 0"); /* a fixed job's node never leaves it quietly */
    has(s, "timeout 5 bash -c ': >\"/dev/tcp/$1/$2\"' dtrain-probe \\\n      \"${SLURM_LAUNCH_NODE_IPADDR:-}\" \"$port\"");
    has(s, "\nexec srun --kill-on-bad-exit=1 bash -c \"$NODE\" dtrain-node \"$DTRAIN\" agent ");
    lacks(s, "exec \"$@\"");
    free(s);
    dt_job_free(job);
    job = load("name: r\nscheduler: slurm\nnodes: 2\nmax_restarts: 1\nrendezvous: {port: 29400}\ncommand: [a]\n");
    s = render(job, "r.yaml", &rc);
    has(s, "\nport=29400\n"); /* the spec's port, as the agents use it */
    free(s);
    dt_job_free(job);
}

static void render_refuses(void **state)
{
    (void)state;
    struct dt_job *job = load("name: l\ncommand: [a]\n");
    int rc;
    free(render(job, "l.yaml", &rc));
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(
        strstr(dt_error_last(), "l.yaml: scheduler: local; an sbatch script needs scheduler: slurm"));
    dt_job_free(job);
    job = load("name: l\nscheduler: slurm\ncommand: [a]\nslurm: {partition: \"gpu\\nrm -rf /\"}\n");
    free(render(job, "l.yaml", &rc));
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "slurm.partition: a line break"));
    dt_job_free(job);
}

#define JOB2 "name: d\nscheduler: slurm\nnodes: 2\nnproc_per_node: 2\ncommand: [a]\n"

static void discover_batch_job(void **state)
{
    (void)state;
    struct dt_job *job = load(JOB2 "rendezvous: {port: 1}\n"); /* port 1: never checked on node 1 */
    char *env[] = {"ENVIRONMENT=BATCH",
                   "SLURM_JOB_ID=4242",
                   "SLURM_NODEID=1",
                   "SLURM_PROCID=1",
                   "SLURM_STEP_NUM_NODES=2",
                   "SLURM_NNODES=2",
                   "SLURM_STEP_NUM_TASKS=2",
                   "SLURM_STEP_NODELIST=gpu[07-08]",
                   "SLURM_JOB_NODELIST=gpu[07-08]",
                   "SLURMD_NODENAME=gpu08",
                   "SLURM_LAUNCH_NODE_IPADDR=10.1.2.3",
                   NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), 0);
    assert_int_equal(n.node_rank, 1);
    assert_int_equal(n.nnodes, 2);
    assert_string_equal(n.coord_host, "10.1.2.3");
    assert_int_equal(n.coord_port, 1);
    assert_string_equal(n.job_id, "4242");
    assert_string_equal(n.run_id, "4242");
    dt_job_free(job);
}

/* `dtrain launch --resume`: the job's environment names the run it continues;
 * the job id still names the job (and derives the port). */
/* nodes: MIN:MAX: any count Slurm gave in the range; node 0 named, the others placed by the rounds. */
static void discover_elastic(void **state)
{
    (void)state;
    struct dt_job *job =
        load("name: el\nscheduler: slurm\nnodes: 2:4\ncommand: [a]\nrendezvous: {port: 1}\n");
    char *env[] = {"ENVIRONMENT=BATCH",         "SLURM_JOB_ID=77",        "SLURM_NODEID=2",
                   "SLURM_STEP_NUM_NODES=3",    "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NODELIST=n[1-3]",
                   "SLURM_LAUNCH_NODE_IPADDR=10.0.0.1", NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), 0);
    assert_int_equal(n.node_rank, -1); /* a place from the rounds */
    assert_int_equal(n.nnodes, 4);     /* the rounds' most */
    assert_string_equal(n.coord_host, "10.0.0.1");
    /* fewer nodes than MIN: Slurm did not run it as rendered */
    char *few[] = {"ENVIRONMENT=BATCH",      "SLURM_JOB_ID=77",         "SLURM_NODEID=0",
                   "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1",  "SLURM_STEP_NODELIST=n1",
                   "SLURM_LAUNCH_NODE_IPADDR=10.0.0.1", NULL};
    assert_int_equal(dt_slurm_discover(job, few, &n), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "nodes: 2:4, but this Slurm step runs on 1 node"));
    assert_non_null(strstr(dt_error_last(), "sbatch --nodes=2-4"));
    dt_job_free(job);
}

static void discover_resumed_run(void **state)
{
    (void)state;
    struct dt_job *job = load(JOB2 "rendezvous: {port: 1}\n");
    char *env[] = {"ENVIRONMENT=BATCH",
                   "SLURM_JOB_ID=4243",
                   "SLURM_NODEID=1",
                   "SLURM_STEP_NUM_NODES=2",
                   "SLURM_STEP_NODELIST=gpu[07-08]",
                   "SLURM_LAUNCH_NODE_IPADDR=10.1.2.3",
                   "DTRAIN_SLURM_RUN_ID=4242",
                   NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), 0);
    assert_string_equal(n.job_id, "4243");
    assert_string_equal(n.run_id, "4242");
    dt_job_free(job);
}

static void discover_derives_port(void **state)
{
    (void)state;
    struct dt_job *job = load(JOB2);
    char *env[] = {"ENVIRONMENT=BATCH",
                   "SLURM_JOB_ID=1234567",
                   "SLURM_NODEID=0",
                   "SLURM_NNODES=2",
                   "SLURM_JOB_NODELIST=n[1-2]",
                   "SLURMD_NODENAME=n1",
                   "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1",
                   NULL};
    struct dt_adapter_node n;
    if (dt_slurm_discover(job, env, &n) != 0)
        fail_msg("%s", dt_error_last());
    assert_int_equal(n.coord_port, DT_SLURM_PORT_BASE + 4567);
    int p;
    assert_int_equal(dt_slurm_port(job, "17_3", &p), 0); /* an array task's id */
    assert_int_equal(p, DT_SLURM_PORT_BASE + 17);
    assert_int_equal(dt_slurm_port(job, "x", &p), DT_EINVAL);
    dt_job_free(job);
}

static void discover_port_taken(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    char yaml[256];
    snprintf(yaml, sizeof yaml, JOB2 "rendezvous: {port: %d}\n", ntohs(a.sin_port));
    struct dt_job *job = load(yaml);
    char *env[] = {"ENVIRONMENT=BATCH",
                   "SLURM_JOB_ID=7",
                   "SLURM_NODEID=0",
                   "SLURM_NNODES=2",
                   "SLURM_JOB_NODELIST=n[1-2]",
                   "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1",
                   NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), DT_EIO);
    has(dt_error_last(), "already in use on node 0; set rendezvous.port to a free port");
    close(fd);
    dt_job_free(job);
}

static void discover_outside_batch_resolves(void **state)
{
    (void)state;
    struct dt_job *job = load(JOB2 "rendezvous: {port: 1}\n");
    char *env[] = {"SLURM_JOB_ID=9",
                   "SLURM_NODEID=1",
                   "SLURM_NNODES=2",
                   "SLURM_JOB_NODELIST=localhost,n2",
                   "SLURM_LAUNCH_NODE_IPADDR=10.9.9.9",
                   NULL};
    struct dt_adapter_node n;
    assert_int_equal(dt_slurm_discover(job, env, &n), 0);
    assert_true(strcmp(n.coord_host, "127.0.0.1") == 0 || strcmp(n.coord_host, "::1") == 0);
    char *env2[] = {"SLURM_JOB_ID=9", "SLURM_NODEID=1", "SLURM_NNODES=2",
                    "SLURM_JOB_NODELIST=no-such-host.invalid,n2", NULL};
    assert_int_equal(dt_slurm_discover(job, env2, &n), DT_ENOTFOUND);
    has(dt_error_last(), "cannot resolve node 0's name 'no-such-host.invalid'");
    dt_job_free(job);
}

struct bad_env {
    const char *vars[10];
    int code;
    const char *needle;
};

static const struct bad_env bad_envs[] = {
    {{"SLURM_NODEID=0", NULL}, DT_ENOTFOUND, "SLURM_JOB_ID is not set: this is not a Slurm job"},
    {{"SLURM_JOB_ID=5", "SLURM_NNODES=2", NULL}, DT_ENOTFOUND, "SLURM_NODEID is not set"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", NULL},
     DT_ENOTFOUND,
     "neither SLURM_STEP_NUM_NODES nor SLURM_NNODES"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=x", "SLURM_NNODES=2", NULL}, DT_EINVAL, "SLURM_NODEID='x'"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=3", NULL},
     DT_EINVAL,
     "job.yaml: nodes: 2, but this Slurm step runs on 3 nodes (SLURM_NNODES)"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_STEP_NUM_NODES=1", "SLURM_NNODES=2", NULL},
     DT_EINVAL,
     "runs on 1 node (SLURM_STEP_NUM_NODES)"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_STEP_NUM_TASKS=4", NULL},
     DT_EINVAL,
     "srun started 4 tasks on 2 nodes; dtrain needs exactly one agent per node"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=2", "SLURM_NNODES=2", NULL}, DT_EINVAL, "SLURM_NODEID=2, but the step"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=2", NULL},
     DT_ENOTFOUND,
     "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-", NULL},
     DT_EINVAL,
     "SLURM_JOB_NODELIST: hostlist \"n[1-\": column 5"},
    {{"SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-3]", NULL},
     DT_EINVAL,
     "SLURM_JOB_NODELIST='n[1-3]' names 3 hosts, but the step has 2 nodes"},
    {{"ENVIRONMENT=BATCH", "SLURM_JOB_ID=5", "SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]",
      "SLURMD_NODENAME=n2", "SLURM_LAUNCH_NODE_IPADDR=10.0.0.1", NULL},
     DT_EINVAL,
     "node 0 is n1 by SLURM_JOB_NODELIST, but srun runs on n2"},
};

static void discover_names_what_is_wrong(void **state)
{
    (void)state;
    struct dt_job *job = load(JOB2);
    for (size_t i = 0; i < sizeof bad_envs / sizeof bad_envs[0]; i++) {
        struct dt_adapter_node n;
        int rc = dt_slurm_discover(job, (char *const *)bad_envs[i].vars, &n);
        if (rc != bad_envs[i].code || !strstr(dt_error_last(), bad_envs[i].needle))
            fail_msg("case %zu: got %d \"%s\", expected %d with \"%s\"", i, rc, dt_error_last(),
                     bad_envs[i].code, bad_envs[i].needle);
    }
    dt_job_free(job);
}

static void parses_job_info(void **state)
{
    (void)state;
    struct dt_slurm_job_info i = {.exit_status = -1};
    dt_slurm_parse_job_info(
        "JobId=12 JobName=q UserId=root(0) JobState=RUNNING Reason=None Dependency=(null) "
        "Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 ReqNodeList=(null) "
        "ExcNodeList=(null) NodeList=n[1-2] BatchHost=n1\n",
        &i);
    assert_string_equal(i.state, "RUNNING");
    assert_string_equal(i.reason, "None");
    assert_string_equal(i.nodes, "n[1-2]");
    assert_int_equal(i.restarts, 2);
    assert_int_equal(i.exit_status, 0);
    struct dt_slurm_job_info f = {.exit_status = -1};
    dt_slurm_parse_job_info("JobId=3 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=n1", &f);
    assert_string_equal(f.state, "FAILED");
    assert_int_equal(f.exit_status, 3);
    struct dt_slurm_job_info c = {.exit_status = -1};
    dt_slurm_parse_job_info("JobId=4 JobState=CANCELLED Reason=None ExitCode=0:15 NodeList=(null)", &c);
    assert_int_equal(c.exit_status, 128 + 15);
    assert_string_equal(c.nodes, "");
    struct dt_slurm_job_info s = {.exit_status = -1};
    dt_slurm_parse_job_info("CANCELLED by 0|0:9|n[3-4]\n", &s);
    assert_string_equal(s.state, "CANCELLED");
    assert_int_equal(s.exit_status, 137);
    assert_string_equal(s.nodes, "n[3-4]");
    assert_true(dt_slurm_state_final("COMPLETED"));
    assert_true(dt_slurm_state_final("TIMEOUT"));
    assert_false(dt_slurm_state_final("COMPLETING"));
    assert_false(dt_slurm_state_final("PENDING"));
    assert_false(dt_slurm_state_final("REQUEUED"));
}

static void runs_commands(void **state)
{
    (void)state;
    char out[64], err[64];
    char *ok[] = {"sh", "-c", "echo hi; echo oops >&2; exit 3", NULL};
    assert_int_equal(dt_slurm_cmd(ok, NULL, 10, out, sizeof out, err, sizeof err), 3);
    assert_string_equal(out, "hi\n");
    assert_string_equal(err, "oops\n");
    char *missing[] = {"no-such-slurm-command", NULL};
    assert_int_equal(dt_slurm_cmd(missing, NULL, 10, out, sizeof out, err, sizeof err), DT_ENOTFOUND);
    has(dt_error_last(), "no-such-slurm-command was not found on PATH");
    char *slow[] = {"sleep", "5", NULL};
    assert_int_equal(dt_slurm_cmd(slow, NULL, 0.2, out, sizeof out, err, sizeof err), DT_ETIMEDOUT);
    has(dt_error_last(), "sleep did not answer within 0.2 s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registered),
        cmocka_unit_test(render_every_option),
        cmocka_unit_test(render_minimal),
        cmocka_unit_test(render_units),
        cmocka_unit_test(render_as_sbatch_reads),
        cmocka_unit_test(render_setup_and_snapshot),
        cmocka_unit_test(render_per_rank),
        cmocka_unit_test(render_gpus_asked),
        cmocka_unit_test(render_elastic),
        cmocka_unit_test(render_agent_restarts),
        cmocka_unit_test(render_refuses),
        cmocka_unit_test(discover_elastic),
        cmocka_unit_test(discover_batch_job),
        cmocka_unit_test(discover_resumed_run),
        cmocka_unit_test(discover_derives_port),
        cmocka_unit_test(discover_port_taken),
        cmocka_unit_test(discover_outside_batch_resolves),
        cmocka_unit_test(discover_names_what_is_wrong),
        cmocka_unit_test(parses_job_info),
        cmocka_unit_test(runs_commands),
    };
    return cmocka_run_group_tests_name("slurm", tests, NULL, NULL);
}
