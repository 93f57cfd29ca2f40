/* slurm_render.c - `dtrain render slurm job.yaml`: the sbatch script of a job.
 *
 * A script a user can read, edit and submit by hand: #SBATCH lines for what
 * the spec's slurm: section asks (nothing else, so the cluster's defaults
 * apply), one task per node (the agent), and a body that runs
 * `srun --kill-on-bad-exit=1 dtrain agent job.yaml` (with the task's CPU count,
 * which srun does not inherit).  With requeue: true the batch shell gets
 * SIGUSR1 slurm.signal_lead (90 s) before the time limit (--signal=B:USR1@90),
 * passes it to the agents (srun forwards it to its tasks, the agents to the
 * ranks), and requeues the job when the ranks stop for it (exit status 75).
 *
 * The spec's setup: lines run once on every node, in its task before its
 * agent (print_node_script; with slurm.tasks: per_rank in the batch shell);
 * `dtrain launch` also embeds the spec as submitted, and render a spec that
 * is not its file as written (print_snapshot).  With max_restarts, a node's
 * task starts its agent again when it is lost (print_watch).  nodes:
 * MIN:MAX asks --nodes=MIN-MAX with --no-kill, and srun keeps the step
 * going when a task ends or a node fails (the agents' elastic rounds go on).
 * nproc_per_node: gpu needs GPUs asked for (gpus_per_node, or an
 * extra_sbatch --gres/--gpus line): a job that asks for none is refused.
 * The run directory is named by the job id, or by DTRAIN_SLURM_RUN_ID when
 * `dtrain launch --resume` continues an earlier job's run (slurm.h), as the
 * agents' is.
 *
 * slurm.tasks: per_rank: one task per rank (--ntasks-per-node=nproc_per_node)
 * and the agent runs in the batch shell itself, starting the ranks with the
 * srun line the script shows in a comment (slurm_ranks.c builds it).
 *
 * Not for submitting (slurm_submit.c) or for the agents' side (slurm.c).
 */
#include "scheduler-adapters/slurm/slurm_internal.h"

#include "base/error.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool per_rank(const struct dt_job *job)
{
    return job->slurm && job->slurm->tasks == DT_SLURM_TASKS_PER_RANK;
}

/* A node's task watches its agent for its loss (per_node): to start a new
 * one (max_restarts), or to leave an elastic job without failing the step. */
static bool watches_agent(const struct dt_job *job)
{
    return !per_rank(job) && (job->max_restarts > 0 || dt_job_elastic(job));
}

/* Each node's task runs a bash script around its agent: the setup: lines, the watch. */
static bool node_script(const struct dt_job *job)
{
    return !per_rank(job) && (job->setup || watches_agent(job));
}

/* "4 nodes", or an elastic job's "2 to 4 nodes". */
static void nodes_words(const struct dt_job *job, char *buf, size_t size)
{
    if (dt_job_elastic(job))
        snprintf(buf, size, "%d to %d nodes", job->nodes_min, job->nodes);
    else
        snprintf(buf, size, "%d node%s", job->nodes, job->nodes == 1 ? "" : "s");
}

/* Slurm's time forms: HH:MM:SS, or D-HH:MM:SS from a day on. */
static void print_time(FILE *out, int64_t s)
{
    int64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, sec = s % 60;
    if (d)
        fprintf(out, "#SBATCH --time=%" PRId64 "-%02" PRId64 ":%02" PRId64 ":%02" PRId64 "\n", d, h, m, sec);
    else
        fprintf(out, "#SBATCH --time=%02" PRId64 ":%02" PRId64 ":%02" PRId64 "\n", h, m, sec);
}

/* --mem takes MiB by default (Slurm's "M" is 1024^2, "G" 1024^3); round up so a job never gets less than
 * it asked (sbatch rounds K up to MiB alike). */
static void print_mem(FILE *out, uint64_t bytes)
{
    const uint64_t mib = 1024 * 1024, gib = mib * 1024;
    if (bytes % gib == 0)
        fprintf(out, "#SBATCH --mem=%" PRIu64 "G\n", bytes / gib);
    else
        fprintf(out, "#SBATCH --mem=%" PRIu64 "M\n", (bytes + mib - 1) / mib);
}

static void print_header(const struct dt_job *job, const struct dt_placement *pl, const char *job_path,
                         FILE *out)
{
    char per_node[48];
    int n = pl->nproc;
    if (n == 0)
        snprintf(per_node, sizeof per_node, "one rank per GPU");
    else
        snprintf(per_node, sizeof per_node, "%d rank%s%s", n, n == 1 ? "" : "s",
                 pl->source == DT_NPROC_FROM_SCHEDULER ? " (one per GPU)" : "");
    char nodes[48];
    nodes_words(job, nodes, sizeof nodes);
    /* The path and log_dir are the user's (a ${SCRATCH} may hold a newline): comment text, never a line. */
    fprintf(out, "#!/bin/bash\n# Slurm batch script of job '%s', rendered by `dtrain render slurm ", job->name);
    dt_adapter_put_comment(out, job_path);
    fprintf(out, "`.\n"
                 "#\n"
                 "# Submit with: sbatch <this file>   (from the directory the paths below are relative to)\n");
    if (per_rank(job))
        fprintf(out,
                "# %s x %s, each rank a Slurm task of its own (slurm.tasks: per_rank);\n"
                "# the agent in this script (node 0) hosts the coordinator and runs their step.\n"
                "# Rank output goes to the files below, each line prefixed [rank N], and in full to\n# ",
                nodes, per_node);
    else
        fprintf(out,
                "# %s; on each, one dtrain agent (the one Slurm task of the node) forks %s;\n"
                "# node 0's agent hosts the coordinator.  Rank output goes to the files below, each\n"
                "# line prefixed [rank N], and in full to ",
                nodes, per_node);
    dt_adapter_put_comment(out, job->log_dir);
    fprintf(out, "/%s-<job id>/.\n", job->name);
    if (dt_job_elastic(job))
        fprintf(out, "# Elastic (nodes: %d:%d): Slurm starts the job on as many nodes of that range as it\n"
                     "# gives; a lost node ends its round and the others go on (--no-kill), as the agents'\n"
                     "# rounds do (docs/elastic.md).\n",
                job->nodes_min, job->nodes);
    fprintf(out, "# Edit freely; `dtrain render slurm` writes it again from the job spec.\n");
}

static void print_sbatch_lines(const struct dt_job *job, const struct dt_placement *pl, FILE *out)
{
    const struct dt_slurm_spec *s = job->slurm;
    fprintf(out, "#SBATCH --job-name=%s\n", job->name);
    if (dt_job_elastic(job)) /* Slurm picks the count in the range; a failed node leaves the job running */
        fprintf(out, "#SBATCH --nodes=%d-%d\n#SBATCH --no-kill\n", job->nodes_min, job->nodes);
    else
        fprintf(out, "#SBATCH --nodes=%d\n", job->nodes);
    fprintf(out, "#SBATCH --ntasks-per-node=%d\n", per_rank(job) ? pl->nproc : 1);
    if (s && s->gpus_per_node > 0)
        fprintf(out, "#SBATCH --gpus-per-node=%s%s%d\n", s->gpu_type ? s->gpu_type : "",
                s->gpu_type ? ":" : "", s->gpus_per_node);
    if (s && s->cpus_per_task > 0)
        fprintf(out, "#SBATCH --cpus-per-task=%d\n", s->cpus_per_task);
    if (s && s->mem_all)
        fprintf(out, "#SBATCH --mem=0\n"); /* all of each node's memory */
    else if (s && s->mem_bytes > 0)
        print_mem(out, s->mem_bytes);
    if (s && s->time_s > 0)
        print_time(out, s->time_s);
    if (s && s->partition)
        fprintf(out, "#SBATCH --partition=%s\n", s->partition);
    if (s && s->account)
        fprintf(out, "#SBATCH --account=%s\n", s->account);
    if (s && s->qos)
        fprintf(out, "#SBATCH --qos=%s\n", s->qos);
    if (s && s->constraint)
        fprintf(out, "#SBATCH --constraint=%s\n", s->constraint);
    if (s && s->exclusive)
        fprintf(out, "#SBATCH --exclusive\n");
    fprintf(out, "#SBATCH --output=%s-%%j.out\n", job->name);
    fprintf(out, "#SBATCH --error=%s-%%j.err\n", job->name);
    if (s && s->requeue)
        fprintf(
            out,
            "#SBATCH --open-mode=append\n" /* a requeued run adds to the files instead of truncating them */
            "#SBATCH --signal=B:USR1@%.0f\n"
            "#SBATCH --requeue\n",
            s->signal_lead_s);
    for (int i = 0; s && i < s->n_extra_sbatch; i++)
        fprintf(out, "#SBATCH %s\n", s->extra_sbatch[i]);
}

static void print_token(const struct dt_job *job, FILE *out)
{
    if (job->rendezvous.auth == DT_AUTH_NONE) {
        fprintf(
            out,
            "\n# rendezvous.auth is none: the coordinator serves any client (PyTorch scripts need that).\n");
        return;
    }
    fprintf(out, "\n"
                 "# The job token: the coordinator serves only clients that present it.  It reaches the\n"
                 "# agents in the job's environment (srun passes it on), never on a command line.\n"
                 "# `dtrain launch` sets it; a script submitted by hand makes one here.\n"
                 "if [ -z \"${DTRAIN_JOB_TOKEN:-}\" ]; then\n"
                 "  DTRAIN_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')\n"
                 "  export DTRAIN_JOB_TOKEN\n"
                 "fi\n");
}

/* slurm.tasks: per_rank: setup: in the batch shell, before the agent: srun
 * hands the environment the lines make (module load, a virtual environment)
 * to every rank's task.  A failing line stops the job before it starts.
 * (per_node runs them on every node: print_node_script.) */
static void print_setup(const struct dt_job *job, FILE *out)
{
    if (!job->setup || !per_rank(job))
        return;
    fprintf(out,
            "\n"
            "# setup: run once here, on the batch host, before the agents start; srun passes the\n"
            "# environment these lines make to every agent.\n"
            "trap 'echo \"dtrain: a setup line failed (exit status $?); the agents do not start\" >&2' ERR\n"
            "set +u -e  # module and activate scripts may read unset variables\n");
    for (int i = 0; i < job->n_setup; i++)
        fprintf(out, "%s\n", job->setup[i]);
    fprintf(out, "set -u +e\n"
                 "trap - ERR\n");
}

/* The lines of the node script that watch its agent.  Lost, not ended:
 * the agent died of a signal, nothing asked the task to stop, it is not
 * node 0 (whose agent hosts the coordinator: without it the job has ended),
 * and two seconds later node 0's coordinator still takes connections (an
 * agent that ended with the job, a rank's SIGKILL being the job's status,
 * finds node 0 gone by then).  A lost agent is started again while
 * max_restarts allows: it has the same SLURM_NODEID, so it joins the job's
 * next round as that node (the survivors wait rendezvous.timeout for it; an
 * elastic job's rounds give it a place as to any agent that comes).  An
 * elastic job's node whose agent stays lost ends its task 0: the job goes
 * on without it, and srun's status (the highest of its tasks') stays the
 * job's, node 0's.  Signals: TERM, INT and HUP reach every process of the
 * task (Slurm signals the whole step), the agent stops its ranks and the
 * loop ends; USR1 and USR2 (the requeue warning) are the agent's, and must
 * not end this shell. */
static void print_watch(const struct dt_job *job, FILE *out)
{
    int n = job->max_restarts;
    fprintf(out, "restarts=0 stop=0\n"
                 "trap 'stop=1' TERM INT HUP\n"
                 "trap ':' USR1 USR2\n");
    if (job->rendezvous.port > 0)
        fprintf(out, "port=%d\n", job->rendezvous.port);
    else
        fprintf(out, "port=$((%d + ${SLURM_JOB_ID%%%%_*} %% %d))  # as the agents compute it\n", DT_SLURM_PORT_BASE,
                DT_SLURM_PORT_SPAN);
    fprintf(out,
            "while :; do\n"
            "  \"$@\"; status=$? lost=0\n"
            "  if [ \"$status\" -gt 128 ] && [ \"$stop\" = 0 ] && [ \"${SLURM_NODEID:-0}\" != 0 ]; then\n"
            "    sleep 2\n"
            "    [ \"$stop\" = 0 ] && timeout 5 bash -c ': >\"/dev/tcp/$1/$2\"' dtrain-probe \\\n"
            "      \"${SLURM_LAUNCH_NODE_IPADDR:-}\" \"$port\" 2>/dev/null && lost=1\n"
            "  fi\n"
            "  [ \"$lost\" = 1 ] && [ \"$restarts\" -lt %d ] || break\n"
            "  restarts=$((restarts + 1))\n"
            "  echo \"dtrain: node $SLURM_NODEID: its agent ended with status $status while the job runs on: \"\\\n"
            "\"starting a new agent for node $SLURM_NODEID ($restarts of %d)\" >&2\n"
            "done\n",
            n, n);
    if (dt_job_elastic(job))
        fprintf(out, "if [ \"$lost\" = 1 ]; then\n"
                     "  echo \"dtrain: node $SLURM_NODEID: its agent was lost (status $status); the elastic job goes \"\\\n"
                     "\"on without this node\" >&2\n"
                     "  exit 0\n"
                     "fi\n");
    fprintf(out, "exit \"$status\"\n");
}

/* per_node: what each node's task runs around its agent ("$@"), in bash:
 * the setup: lines, once on every node before its agent (their environment,
 * module load or a virtual environment, is the agent's and so its ranks'; a
 * failing line stops that node, and with it the step), then the agent,
 * watched for its loss (print_watch) or exec'ed. */
static void print_node_script(const struct dt_job *job, FILE *out)
{
    if (!node_script(job))
        return;
    fprintf(out, "\n# What each node's task runs around its agent (srun runs it with bash -c):\n");
    if (job->setup)
        fprintf(out, "# - the setup: lines, once on every node before its agent (set -e: a failing line stops\n"
                     "#   that node, and the step with it); their environment is the agent's and its ranks';\n");
    if (job->max_restarts > 0 && !per_rank(job))
        fprintf(out,
                "# - the agent, started again when it is lost (killed by a signal) while node 0's coordinator\n"
                "#   still answers, at most max_restarts (%d) times: the new agent joins the job's next\n"
                "#   round %s.  Node 0's agent (the coordinator's) is never restarted.\n",
                job->max_restarts, dt_job_elastic(job) ? "for a place, as any agent that comes" : "as the same node");
    if (dt_job_elastic(job) && !per_rank(job))
        fprintf(out, "# - an elastic job's node whose agent is lost (and not started again) ends its task 0:\n"
                     "#   the job goes on without it, and srun's status stays node 0's, the job's.\n");
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return;
    if (job->setup) {
        fprintf(m, "trap 'echo \"dtrain: node ${SLURM_NODEID:-?}: a setup line failed (exit status $?); its agent "
                   "does not start\" >&2' ERR\n"
                   "set +u -e  # module and activate scripts may read unset variables\n");
        for (int i = 0; i < job->n_setup; i++)
            fprintf(m, "%s\n", job->setup[i]);
        fprintf(m, "set +e\ntrap - ERR\n");
    }
    if (watches_agent(job))
        print_watch(job, m);
    else
        fprintf(m, "exec \"$@\"\n");
    if (fclose(m) == 0) {
        fprintf(out, "NODE=$(cat <<");
        dt_adapter_put_heredoc(out, "DTRAIN_NODE", text);
        fprintf(out, ")\n");
    }
    free(text);
}

/* The spec travels in the script (sbatch keeps the script as it was at
 * submission, a requeue included) and is written into the run directory
 * when the job starts; the agents and ranks read that copy, so editing the
 * file while the job waits in the queue changes nothing, and the script
 * reads no file but its own.  The run directory is made 0700 (the spec may
 * hold what ${VAR} read); its parent, the log directory, as the user's umask says. */
static void print_snapshot(const struct dt_job *job, const char *spec, FILE *out)
{
    fprintf(out,
            "\n"
            "# The job spec as it was submitted (`dtrain launch`) or rendered: written into the run\n"
            "# directory when the job starts, and read from there, so an edit of the file after\n"
            "# submission changes nothing.\n"
            "RUN_DIR=${DTRAIN_LOG_DIR:-");
    dt_adapter_put_word(out, job->log_dir);
    fprintf(out, "}/%s-$SLURM_JOB_ID\n", job->name);
    /* The agents take the same run id from the environment (slurm.c's discover). */
    fprintf(out, "if [ -n \"${" DT_SLURM_RUN_ID_ENV ":-}\" ]; then  # --resume: the run this job continues\n"
                 "  RUN_DIR=${DTRAIN_LOG_DIR:-");
    dt_adapter_put_word(out, job->log_dir);
    fprintf(out,
            "}/%s-$" DT_SLURM_RUN_ID_ENV "\n"
            "fi\n"
            "mkdir -p \"${RUN_DIR%%/*}\" && { mkdir -m 700 \"$RUN_DIR\" 2>/dev/null || [ -d \"$RUN_DIR\" ]; }\n"
            "cat >\"$RUN_DIR/job.yaml.tmp\" <<",
            job->name);
    dt_adapter_put_heredoc(out, "DTRAIN_JOB_SPEC", spec);
    fprintf(out, "mv -f \"$RUN_DIR/job.yaml.tmp\" \"$RUN_DIR/job.yaml\"\n"
                 "JOB=$RUN_DIR/job.yaml\n");
}

/* Since Slurm 22.05 srun no longer takes --cpus-per-task from sbatch: without
 * it a step's task gets one CPU, and under task binding the agent and all its
 * ranks share it.  SRUN_CPUS_PER_TASK is srun's own variable for -c; exported,
 * it also reaches any srun the ranks run. */
static void print_cpus(const struct dt_job *job, FILE *out)
{
    if (!job->slurm || job->slurm->cpus_per_task <= 0)
        return;
    fprintf(out,
            "\n"
            "# srun does not inherit --cpus-per-task from sbatch (Slurm >= 22.05): pass it on, so the\n"
            "# agent and its ranks get every CPU of the task and not one.\n"
            "export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-%d}\n",
            job->slurm->cpus_per_task);
}

/* The step: every agent (per_node), or the one agent that runs the ranks'
 * step (per_rank), with the flags `dtrain launch` passes through the environment. */
static void print_srun(const struct dt_job *job, FILE *out)
{
    const struct dt_slurm_spec *s = job->slurm;
    if (!per_rank(job)) {
        /* Elastic: a task that ends (a lost node) must not stop the others, nor a failed node the step. */
        fprintf(out, "srun %s", dt_job_elastic(job) ? "--kill-on-bad-exit=0 --no-kill " : "--kill-on-bad-exit=1 ");
        if (s && s->cpus_per_task > 0)
            fprintf(out, "--cpus-per-task=\"$SRUN_CPUS_PER_TASK\" ");
        if (s && s->cpu_bind)
            fprintf(out, "--cpu-bind=%s ", s->cpu_bind);
        if (s && s->gpu_bind)
            fprintf(out, "--gpu-bind=%s ", s->gpu_bind);
        if (node_script(job))
            fprintf(out, "bash -c \"$NODE\" dtrain-node ");
    }
    fprintf(out, "\"$DTRAIN\" agent \"$JOB\" ${DTRAIN_LOG_DIR:+--log-dir \"$DTRAIN_LOG_DIR\"} "
                 "${DTRAIN_GRACE_PERIOD:+--grace-period \"$DTRAIN_GRACE_PERIOD\"}");
}

/* per_rank: the step the agent runs, as a comment (the agent builds the same line). */
static int print_rank_step(const struct dt_job *job, const struct dt_placement *pl, FILE *out)
{
    if (!job->slurm || job->slurm->tasks != DT_SLURM_TASKS_PER_RANK)
        return 0;
    struct dt_slurm__argv a = {0};
    int rc = dt_slurm__ranks_argv(job, pl, "$DTRAIN", "$JOB", &a);
    if (rc < 0)
        return rc;
    fprintf(out, "\n"
                 "# slurm.tasks: per_rank.  The agent below runs here, on node 0: it hosts the coordinator\n"
                 "# and starts every rank, one Slurm task each, with this step (again after a failure,\n"
                 "# up to max_restarts); each task's `dtrain mpirank` reads its rank from SLURM_PROCID,\n"
                 "# SLURM_LOCALID, SLURM_STEP_NUM_TASKS and SLURM_NODEID:\n"
                 "#  ");
    /* The command's words quoted as the shell reads them, then shown as comment text. */
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    for (int i = 0; m && a.argv[i]; i++) {
        fputc(' ', m);
        if (a.argv[i][0] == '$')
            fprintf(m, "\"%s\"", a.argv[i]);
        else
            dt_adapter_put_word(m, a.argv[i]);
    }
    if (!m || fclose(m) != 0) {
        free(line);
        dt_slurm__argv_free(&a);
        return dt_error_set(DT_ENOMEM, "out of memory writing the sbatch script");
    }
    dt_adapter_put_comment(out, line);
    fputc('\n', out);
    free(line);
    dt_slurm__argv_free(&a);
    return 0;
}

static void print_run(const struct dt_job *job, FILE *out)
{
    if (!job->slurm || !job->slurm->requeue) {
        fprintf(out, "\nexec ");
        print_srun(job, out);
        fprintf(out, "\n");
        return;
    }
    fprintf(
        out,
        "\n"
        "# SIGUSR1 comes %.0f s before the time limit.  srun passes it to the agents, they to the ranks;\n"
        "# the trainer writes a checkpoint and stops with status %d, and the job is requeued (same\n"
        "# job id, same run directory): the next run resumes from that checkpoint.\n"
        "trap 'echo \"dtrain: SIGUSR1 (time limit near): passing it to the agents\" >&2; kill -USR1 "
        "\"${step:-}\" 2>/dev/null; interrupted=1' USR1\n",
        job->slurm->signal_lead_s, DT_SLURM_EXIT_REQUEUE);
    print_srun(job, out);
    fprintf(out,
            " &\n"
            "step=$!\n"
            "while :; do\n"
            "  interrupted=0\n"
            "  wait \"$step\"; status=$?\n"
            "  [ \"$interrupted\" = 1 ] || break  # a trapped signal ends wait early: wait again\n"
            "done\n"
            "if [ \"$status\" = %d ]; then\n"
            "  echo \"dtrain: the ranks stopped to be requeued; requeueing job $SLURM_JOB_ID\" >&2\n"
            "  scontrol requeue \"$SLURM_JOB_ID\"\n"
            "fi\n"
            "exit \"$status\"\n",
            DT_SLURM_EXIT_REQUEUE);
}

/* A line break in a value would end its #SBATCH line and put the rest in the script's body. */
static int check_one_line(const char *job_path, const char *key, const char *v)
{
    if (v && strpbrk(v, "\n\r"))
        return dt_error_set(DT_EINVAL, "%s: slurm.%s: a line break cannot be part of an sbatch option",
                            job_path, key);
    return 0;
}

/* An extra_sbatch line that asks for GPUs itself (--gres=gpu..., --gpus...). */
static bool asks_gpus(const struct dt_slurm_spec *s)
{
    static const char *const opts[] = {"--gres=gpu", "--gres gpu", "--gpus", "-G", NULL};
    for (int i = 0; s && i < s->n_extra_sbatch; i++)
        for (int j = 0; opts[j]; j++)
            if (strncmp(s->extra_sbatch[i], opts[j], strlen(opts[j])) == 0)
                return true;
    return false;
}

/* nproc_per_node: gpu is one rank per GPU Slurm gives each node: a job that
 * asks for none would get none (as Kubernetes' check says of pods). */
static int check_gpus(const struct dt_job *job, const struct dt_placement *pl, const char *job_path)
{
    if (pl->source != DT_NPROC_PER_NODE || asks_gpus(job->slurm))
        return 0;
    return dt_error_set(DT_EINVAL,
                        "%s: nproc_per_node: gpu starts one rank per GPU, but slurm.gpus_per_node is not set, "
                        "so the job asks Slurm for no GPU: set slurm.gpus_per_node (8, or \"h100:8\"), or ask "
                        "for them in slurm.extra_sbatch (--gres=gpu:8)",
                        job_path);
}

static int check_values(const struct dt_job *job, const struct dt_placement *pl, const char *job_path)
{
    const struct dt_slurm_spec *s = job->slurm;
    int gpus = check_gpus(job, pl, job_path);
    if (!s || gpus)
        return gpus;
    int rc = check_one_line(job_path, "partition", s->partition);
    if (!rc)
        rc = check_one_line(job_path, "account", s->account);
    if (!rc)
        rc = check_one_line(job_path, "qos", s->qos);
    if (!rc)
        rc = check_one_line(job_path, "constraint", s->constraint);
    if (!rc && s->tasks == DT_SLURM_TASKS_PER_RANK && dt_job_elastic(job))
        rc = dt_error_set(DT_EINVAL,
                          "%s: slurm.tasks: per_rank starts every rank with one step of a fixed task count, "
                          "but nodes: %d:%d is elastic: use tasks: per_node (the default), whose agents "
                          "join and leave between rounds",
                          job_path, job->nodes_min, job->nodes);
    if (!rc && s->tasks == DT_SLURM_TASKS_PER_RANK && pl->nproc <= 0)
        rc = dt_error_set(DT_EINVAL,
                          "%s: slurm.tasks: per_rank needs the ranks per node before the job starts: "
                          "nproc_per_node as a number, or slurm.gpus_per_node with nproc_per_node: gpu",
                          job_path);
    for (int i = 0; !rc && i < s->n_extra_sbatch; i++)
        rc = check_one_line(job_path, "extra_sbatch", s->extra_sbatch[i]);
    return rc;
}

int dt_slurm_check(const struct dt_job *job)
{
    if (job->scheduler != DT_SCHED_SLURM)
        return dt_error_set(
            DT_EINVAL,
            "%s: scheduler: %s; an sbatch script needs scheduler: slurm in the spec (the agents "
            "read it to learn their place from Slurm's variables)",
            job->path, dt_scheduler_name(job->scheduler));
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl); /* fails only on a host's GPUs */
    return check_values(job, &pl, job->path);
}

/* A spec that is not its file as written (${VAR}, --set, rendered for
 * Slurm from another scheduler's spec) travels in the script as dt_job_print
 * writes it, as `dtrain launch` embeds its spec: the script never depends
 * on a copy left somewhere for it. */
int dt_slurm_render(const struct dt_job *job, const char *job_path, FILE *out)
{
    if (!job->derived)
        return dt_slurm_render_script(job, job_path, NULL, out);
    char *spec = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&spec, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory rendering the sbatch script");
    dt_job_print(job, m);
    int rc = fclose(m) == 0 ? dt_slurm_render_script(job, job_path, spec, out)
                            : dt_error_set(DT_ENOMEM, "out of memory rendering the sbatch script");
    free(spec);
    return rc;
}

int dt_slurm_render_script(const struct dt_job *job, const char *job_path, const char *spec, FILE *out)
{
    if (job->scheduler != DT_SCHED_SLURM)
        return dt_error_set(
            DT_EINVAL,
            "%s: scheduler: %s; an sbatch script needs scheduler: slurm in the spec (the agents "
            "read it to learn their place from Slurm's variables)",
            job_path, dt_scheduler_name(job->scheduler));
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl); /* fails only on a host's GPUs */
    int rc = check_values(job, &pl, job_path);
    if (rc < 0)
        return rc;
    print_header(job, &pl, job_path, out);
    print_sbatch_lines(job, &pl, out);
    fprintf(out,
            "\nset -u\n"
            "DTRAIN=${DTRAIN:-dtrain}  # the dtrain binary as the nodes see it (`dtrain launch` sets it,\n"
            "                          # DTRAIN_LOG_DIR when --log-dir is given, and with --resume\n"
            "                          # " DT_SLURM_RUN_ID_ENV ", the run that continues, in place of\n"
            "                          # this job's id)\n"
            "JOB=");
    dt_adapter_put_word(out, job_path);
    fprintf(out, "  # the job spec, read by every agent\n");
    if (spec)
        print_snapshot(job, spec, out);
    print_token(job, out);
    print_setup(job, out);
    print_node_script(job, out);
    print_cpus(job, out);
    rc = print_rank_step(job, &pl, out);
    if (rc < 0)
        return rc;
    print_run(job, out);
    if (ferror(out))
        return dt_error_set(DT_EIO, "cannot write the sbatch script for %s", job_path);
    return 0;
}
