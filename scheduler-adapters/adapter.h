/* adapter.h - the contract between dtrain and a scheduler (local, Slurm, Kubernetes, mpirun).
 *
 * An adapter decides only how agents reach nodes and how an agent learns who
 * it is; the agent (launcher/agent.h) is still the one place that forks and
 * supervises ranks, and node 0's agent hosts the coordinator.  Adding a
 * scheduler is adding one file that defines a `const struct dt_adapter
 * dt_adapter_<name>` and one line in adapter.c's table, as Slurm adds a
 * plugin behind its ops table: no switch on the scheduler elsewhere.
 *
 *   dtrain render <sched> job.yaml  ->  adapter->render  (sbatch script, manifests, mpirun line)
 *   dtrain launch job.yaml          ->  adapter->submit  (local: run here; slurm: sbatch and follow; ...)
 *   dtrain agent job.yaml           ->  adapter->discover, then the agent runs this node's ranks
 *
 * Not for spawning ranks, for the coordinator, or for parsing the job spec.
 */
#ifndef DT_ADAPTER_H
#define DT_ADAPTER_H

#include "spec/jobspec.h"

#include <stdbool.h>
#include <stdio.h>

#define DT_ADAPTER_HOST_MAX 256

/* Where an agent stands in the job, as its scheduler tells it. */
struct dt_adapter_node {
    int node_rank; /* 0 .. nnodes-1; node 0's agent hosts the coordinator */
    int nnodes;
    char coord_host[DT_ADAPTER_HOST_MAX]; /* how every node reaches node 0 (an address where names may not
                                             resolve); node 0 binds all interfaces */
    int coord_port;                       /* > 0: every agent must know it before it starts */
    char job_id[64];                      /* the scheduler's id (SLURM_JOB_ID, the Job's name, ...) or "" */
    char run_id[64]; /* the same on every node: names the run directory (<log_dir>/<name>-<run_id>) */
};

/* Options of `dtrain launch` that an adapter's submit honours. */
struct dt_adapter_launch {
    const char *log_dir;     /* --log-dir, or NULL for the spec's */
    const char *ranks;       /* --ranks: stdout of these ranks only, or NULL */
    double grace_s;          /* --grace-period, <= 0 for the default */
    double start_mono;       /* when the launcher started (CLOCK_MONOTONIC seconds) */
    const char *dtrain_path; /* this binary, as the nodes should run it */
};

struct dt_adapter {
    const char *name;            /* as written after `scheduler:` and `dtrain render` */
    enum dt_scheduler scheduler; /* the spec value it serves */

    /* Writes what a user would submit by hand (sbatch script, manifests,
     * mpirun line) to out.  NULL: nothing to render (local). */
    int (*render)(const struct dt_job *job, const char *job_path, FILE *out);

    /* `dtrain launch`: runs the job to its end and returns the exit status
     * the launcher exits with (0, the failing rank's code, 128 + signal), or
     * 2 for a problem the user must fix, with dt_error_last() saying what. */
    int (*submit)(const struct dt_job *job, const struct dt_adapter_launch *opts);

    /* `dtrain agent`: learns this node's place from the environment the
     * scheduler set (env is environ, passed in so tests can use their own).
     * Returns 0, or a negative DT_E* code naming the missing or bad variable. */
    int (*discover)(const struct dt_job *job, char *const *env, struct dt_adapter_node *out);
};

/* The adapter serving a scheduler, or by name ("k8s" is an alias of
 * "kubernetes"); NULL when none is built in. */
const struct dt_adapter *dt_adapter_for(enum dt_scheduler s);
const struct dt_adapter *dt_adapter_by_name(const char *name);

/* The value of NAME in env (a NULL-terminated "NAME=value" array), or NULL. */
const char *dt_adapter_getenv(char *const *env, const char *name);

#endif
