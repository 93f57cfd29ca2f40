/* adapter.h - the contract between dtrain and a scheduler (local, Slurm, Kubernetes, mpirun).
 *
 * An adapter decides only how agents reach nodes and how an agent learns who
 * it is; the agent (launcher/agent/agent.h) is still the one place that forks and
 * supervises ranks, and node 0's agent hosts the coordinator.  Adding a
 * scheduler is adding one file (or folder) that defines a `const struct
 * dt_adapter dt_adapter_<name>` and one line in adapter.c's table, as Slurm
 * adds a plugin behind its ops table: no switch on the scheduler elsewhere.
 *
 *   dtrain render <sched> job.yaml  ->  adapter->render  (sbatch script, manifests, mpirun line)
 *   dtrain launch job.yaml          ->  adapter->plan    (what to run; the launcher carries it out)
 *   dtrain agent job.yaml           ->  adapter->discover, then the agent runs this node's ranks
 *   dtrain status RUN               ->  adapter->status  (the scheduler's word on a launched job)
 *   dtrain cancel RUN               ->  adapter->cancel  (stop it, the scheduler's job included)
 *
 * Adapters sit below the launcher: they see the spec, comm/ and base/, and
 * never reach into the launcher.  For `dtrain launch` an adapter returns a
 * plan (struct dt_adapter_plan), which the launcher (launcher/cli/cli_plan.c)
 * carries out: either node 0 of the job hosted in this process, as `dtrain
 * agent` would run it (local, and mpirun with backend: mpi, whose one process
 * stands for every rank: struct dt_adapter_group), or files to write and a
 * program to run and supervise (mpirun in front of one agent per node,
 * sbatch, kubectl apply), after which the plan's finish follows what the
 * program submitted (Slurm's job, Kubernetes' Job) to its end.
 *
 * Not for spawning ranks, for the coordinator, or for parsing the job spec (spec/).
 */
#ifndef DT_ADAPTER_H
#define DT_ADAPTER_H

#include "spec/jobspec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define DT_ADAPTER_HOST_MAX 256

struct dt_run_record; /* scheduler-adapters/run_record.h: what a launch left in its run directory */

/* Where an agent stands in the job, as its scheduler tells it. */
struct dt_adapter_node {
    int node_rank; /* 0 .. nnodes-1; node 0's agent hosts the coordinator */
    int nnodes;
    char coord_host[DT_ADAPTER_HOST_MAX]; /* how every node reaches node 0 (an address where names may not
                                             resolve); node 0 binds all interfaces */
    int coord_port;                       /* > 0: every agent must know it before it starts */
    char job_id[64];                      /* the scheduler's id (SLURM_JOB_ID, the Job's name, ...) or "" */
    char run_id[64]; /* the same on every node: names the run directory (<log_dir>/<name>-<run_id>) */
    /* Set by discover when this agent starts every rank through one process
     * (Slurm's tasks: per_rank, whose agent runs srun): node 0 only; else NULL. */
    const struct dt_adapter_group *group;
};

/* How one rank of a group ended, as the group's records tell it. */
struct dt_adapter_rank_end {
    int pid;          /* its process, 0 when unknown */
    bool exited;      /* its end is known: wstatus and exit_unix are valid */
    int wstatus;      /* as waitpid(2) reported it */
    bool stopped;     /* it was signalled to stop (another rank's failure, a signal to the job) */
    double exit_unix; /* when it ended, wall-clock seconds */
};

/* One process that stands for every rank of the job: mpirun with backend:
 * mpi, which starts the ranks itself (MPI's ranks must be MPI processes).
 * The agent spawns it once per attempt instead of forking ranks, sends it
 * SIGTERM to stop the job (it passes that on to its ranks; SIGKILL goes to its
 * process group after the grace period), files its output lines under the
 * ranks they belong to, and after each attempt asks how each rank ended: so
 * restarts, signals, logs, the failure report and summary.json are the same
 * code as for ranks the agent forks. */
struct dt_adapter_group {
    int world;            /* the ranks it stands for: 0 .. world-1 */
    const char *log_name; /* its own lines go to attempt_<k>/<log_name> and to stderr */
    void *ctx;
    /* Its environment for an attempt, made from the one the agent made for
     * a rank of that attempt (every rank's variables; each rank reads its own
     * place from the group's launcher).  *out: malloc'd strings in a malloc'd
     * NULL-terminated array, freed by the agent. */
    int (*env)(void *ctx, char *const *rank_env, char ***out);
    /* Its command line, once, given its environment of attempt 0 (what to
     * pass on to the ranks depends on what that holds).  *argv stays the
     * adapter's until the job has ended; summary.json records it. */
    int (*argv)(void *ctx, char *const *env, char *const **argv);
    /* One line of its output (each of its lines comes here, so the adapter
     * may also read its own ones): the rank it belongs to, with *text, *len
     * and *is_err that rank's line, or -1 for a line of the process itself. */
    int (*route)(void *ctx, const char *line, size_t len, const char **text, size_t *text_len, bool *is_err);
    /* After an attempt (status: the process's exit status; interrupted: a
     * signal to the job stopped it, so no rank failed by itself): how each
     * rank ended into ranks[0..world); returns the rank that failed first
     * by itself, or -1. */
    int (*collect)(void *ctx, const char *attempt_dir, int status, bool interrupted,
                   struct dt_adapter_rank_end *ranks);
};

/* Node 0 of a job, hosted in the launcher's process (a plan's host). */
struct dt_adapter_host {
    int nnodes; /* the job's nodes: 1, or the nodes a group spans */
    int nproc;  /* ranks per node; 0: nproc_per_node resolved here (gpu: this machine's GPUs) */
    /* Where the coordinator listens: "127.0.0.1" when every rank is on this
     * machine, else "0.0.0.0"; and how ranks reach it (MASTER_ADDR). */
    const char *bind;
    const char *advertise;
    const struct dt_adapter_group *group; /* NULL: the agent forks nproc ranks here */
};

/* What `dtrain launch` hands an adapter's plan. */
struct dt_adapter_launch {
    const char *log_dir;     /* --log-dir, or NULL for the spec's */
    const char *ranks;       /* --ranks: stdout of these ranks only, or NULL */
    double grace_s;          /* --grace-period, <= 0 for the spec's grace_period */
    double start_mono;       /* when the launcher started (CLOCK_MONOTONIC seconds) */
    const char *dtrain_path; /* this binary, as the nodes should run it */
    bool detach;             /* --detach: submit and return, leaving the job to the scheduler (Kubernetes) */
    const char *run_id;      /* --resume: continue the run <log_dir>/<name>-<run_id>; NULL: a new run */
};

/* --- what `dtrain launch` does: the adapter's plan ----------------------- */

#define DT_ADAPTER_PLAN_FILES 2

/* A file the launcher writes whole before the plan's program starts: created
 * with its mode (never wider for a moment), not through a symlink at its path. */
struct dt_adapter_file {
    const char *path;
    const char *text; /* len bytes */
    size_t len;
    unsigned mode; /* its permissions: 0600 when it carries the spec */
};

/* How the plan's program ran, as the launcher hands it to finish. */
struct dt_adapter_ran {
    int status;            /* its exit status (the code, or 128 + signal), or a negative DT_E* code when it
                              could not run or did not end in time (the error is set) */
    int signal;            /* a signal to the launcher that was passed on to it (base/proc.h), or 0 */
    bool stopped;          /* it had not ended when the plan's line asked, and was stopped */
    const char *out, *err; /* what it printed, where io[] says DT_PLAN_CAPTURE, else NULL */
};

enum dt_plan_io {
    DT_PLAN_INHERIT, /* to the launcher's console */
    DT_PLAN_CAPTURE, /* kept for finish (struct dt_adapter_ran) */
    DT_PLAN_LINES,   /* line by line to the plan's line */
};

/* What `dtrain launch` does for one job, as its adapter plans it; the
 * launcher carries it out and then calls release.  One of two shapes:
 *  - host_node0: node 0 of the job runs in this process (the job token, the
 *    coordinator, the run directory, the ranks or the group, their restarts,
 *    summary.json and the closing lines), as `dtrain agent` would run it;
 *  - otherwise: files[] written, then argv run to its end (in a session of
 *    its own when grace_s > 0: a signal to the launcher becomes SIGTERM to it,
 *    SIGKILL grace_s later), then finish. */
struct dt_adapter_plan {
    bool host_node0;
    struct dt_adapter_host host;

    struct dt_adapter_file files[DT_ADAPTER_PLAN_FILES];
    int n_files;
    char *const *argv; /* argv[0] is looked up on PATH */
    char *const *envp; /* its whole environment; NULL: the launcher's */
    const char *in;    /* written to its stdin; NULL: /dev/null */
    size_t in_len;
    enum dt_plan_io io[2]; /* its stdout, its stderr */
    double timeout_s;      /* > 0: killed after this long (status DT_ETIMEDOUT) */
    double grace_s;
    /* DT_PLAN_LINES: one line of stream 0 (stdout) or 1 (stderr).  Returns s
     * > 0 to have the program stopped s seconds from now should it not have
     * ended by then (the first such answer counts), else 0. */
    double (*line)(void *ctx, int stream, const char *line, size_t len);
    /* After the program: what follows it (a submitted job followed to its
     * end), having said on stderr what went wrong; returns the launcher's exit
     * status (the job's: 0, the failing rank's code, 128 + signal; 2 for a
     * problem the user must fix; 1 when the job could not run).  NULL: the
     * program's status is the launcher's. */
    int (*finish)(void *ctx, const struct dt_adapter_ran *ran);
    /* Frees ctx and what the plan points at (files, argv, envp, in, the group); NULL: nothing to free. */
    void (*release)(void *ctx);
    void *ctx;
};

/* A copy of env (NULL-terminated "NAME=value", normally environ) changed by
 * set (NULL-terminated): an entry "NAME=value" replaces the one of its name
 * or is added at the end, an entry "NAME" removes it.  Every string and the
 * array are malloc'd: free with dt_adapter_env_free.  NULL when out of
 * memory (the error is set). */
char **dt_adapter_env_with(char *const *env, char *const *set);
void dt_adapter_env_free(char **env);

/* A launched job as its scheduler sees it now (`dtrain status`, `dtrain list`). */
struct dt_adapter_state {
    bool known;      /* the scheduler answered; false: it could not be asked or has forgotten the job */
    bool active;     /* queued or running there: not ended */
    char state[64];  /* the scheduler's own word (PENDING, RUNNING, Complete, ...) or "" */
    char where[512]; /* where it runs: "dtrain launch pid 4242 on host", "Slurm job 17 on n[1-2]", ... */
};

struct dt_adapter {
    const char *name;            /* as written after `scheduler:` and `dtrain render` */
    enum dt_scheduler scheduler; /* the spec value it serves */

    /* Writes what a user would submit by hand (sbatch script, manifests,
     * mpirun line) to out.  NULL: nothing to render (local). */
    int (*render)(const struct dt_job *job, const char *job_path, FILE *out);

    /* The problems of the spec alone that render or launch would refuse it for
     * (nothing is run, written or asked of the scheduler), so that `dtrain
     * validate`, `launch` and `render` agree: all three call it.  Returns 0, or
     * a negative DT_E* code with "<file>: <key>: <why>" set.  NULL: none. */
    int (*check)(const struct dt_job *job);

    /* `dtrain launch --dry-run`: what the plan would submit, as it submits
     * it (the sbatch script with the spec it carries, the manifests under
     * the launch's names and in its order), with placeholders for what only
     * the launch knows; nothing is made, written or asked.  NULL: render's
     * output is what launch submits. */
    int (*dry_run)(const struct dt_job *job, const struct dt_adapter_launch *opts, FILE *out);

    /* `dtrain launch`: what to do, into *out (zeroed by the caller), for the
     * launcher to carry out.  May make what the plan names (the run id, the
     * job token, the log directory).  Returns 0, or a negative DT_E* code with
     * the error set: DT_ENOMEM makes the launcher exit 1, any other 2 (a
     * problem the user must fix: no mpirun, no kubectl, a bad --resume). */
    int (*plan)(const struct dt_job *job, const struct dt_adapter_launch *opts, struct dt_adapter_plan *out);

    /* `dtrain agent`: learns this node's place from the environment the
     * scheduler set (env is environ, passed in so tests can use their own).
     * Returns 0, or a negative DT_E* code naming the missing or bad variable. */
    int (*discover)(const struct dt_job *job, char *const *env, struct dt_adapter_node *out);

    /* `dtrain status`: asks the scheduler about the job a launch recorded
     * (run_record.h) into *out.  Returns 0, or a negative DT_E* code when it
     * cannot ask (out->known false). */
    int (*status)(const struct dt_run_record *rec, struct dt_adapter_state *out);

    /* `dtrain cancel`: stops every process of the recorded job, the
     * scheduler's job included (scancel, kubectl delete, a signal to the
     * launcher that hosts it), and waits up to wait_s for it to end.  Returns
     * 0 once it has ended (or was not running), DT_ETIMEDOUT when it still
     * runs, or another negative DT_E* code with the error set. */
    int (*cancel)(const struct dt_run_record *rec, double wait_s);

    /* --resume: whether a run of this spec can continue in its directory.
     * Submit then names the run directory by dt_adapter_launch.run_id, not
     * by a new one (local and mpirun: the launcher's run id; Slurm: the
     * agents get it instead of the new job's id; Kubernetes: the new Job's
     * pods get it).  Returns 0, or DT_EUNSUPPORTED with the reason set when
     * nothing of the run is left for a new launch to continue (Kubernetes
     * without kubernetes.log_volume).  NULL: every run can continue. */
    int (*resume_check)(const struct dt_job *job);
};

/* The adapter serving a scheduler, or by name ("k8s" is an alias of
 * "kubernetes"); NULL when none is built in. */
const struct dt_adapter *dt_adapter_for(enum dt_scheduler s);
const struct dt_adapter *dt_adapter_by_name(const char *name);

/* setup: before the agent where no batch script runs it (Kubernetes' pod,
 * mpirun's hosts): the agent's command becomes
 *   sh -c "$(dt_adapter_setup_script(job))" DT_ADAPTER_SETUP_ARG0 dtrain agent ...
 * The script is "set -e", the spec's lines, then `exec "$@"`: a failing line
 * stops the node before its agent starts, and the environment the lines make
 * (module load, a virtual environment) is the agent's and so its ranks'.
 * Malloc'd; NULL when the job has no setup: (or out of memory: then
 * job->setup is still set). */
#define DT_ADAPTER_SETUP_ARG0 "dtrain-setup"
char *dt_adapter_setup_script(const struct dt_job *job);

/* The value of NAME in env (a NULL-terminated "NAME=value" array), or NULL. */
const char *dt_adapter_getenv(char *const *env, const char *name);

/* Text for the shell scripts and command lines adapters write (the sbatch
 * script, the mpirun line, both read by bash).  put_word: one shell word, as
 * it is when it holds only characters no shell reads specially, else in
 * single quotes (a quote inside as '\''), or as $'...' when it holds a
 * control character (newline, tab, ESC: \n, \t, \x1b), so a word always
 * stays on its line and no line of a script is a value's.  put_comment: s inside a "# ..." comment line, where a
 * line break would end the comment and make the rest a command: every
 * control character (newline, carriage return, tab, ESC, DEL, ...) is
 * written as \n, \r, \t or \xHH, so nothing a value holds (a log_dir from
 * ${SCRATCH}, a file name) becomes a line of the script. */
void dt_adapter_put_word(FILE *out, const char *s);
void dt_adapter_put_comment(FILE *out, const char *s);
/* `text` as the body of a quoted here-document, after whatever the caller
 * wrote before "<<": writes "'END'\n", text (a newline added when it lacks
 * one) and the terminator line, END being `word`, or it with _1, _2, ...
 * appended while the text holds that as a whole line.  Quoted, so the shell
 * expands nothing in it: the text arrives byte for byte. */
void dt_adapter_put_heredoc(FILE *out, const char *word, const char *text);

#endif
