/* mpirun_internal.h - shared by the mpirun adapter's files only.
 *
 * mpirun_submit.c settles the job (coordinator, run directory, environment)
 * and loops over attempts; mpirun_supervise.c runs one attempt of mpirun and
 * sorts its output.  Not for other adapters.
 */
#ifndef DT_MPIRUN_INTERNAL_H
#define DT_MPIRUN_INTERNAL_H

#include "launcher/agent.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/mpirun.h"

/* One run of mpirun. */
struct dt_mpirun_attempt {
    /* in */
    char *const *argv;
    char *const *envp;
    const char *attempt_dir;      /* logs go here; NULL: do not split per rank (agents log themselves) */
    int world;                    /* ranks whose lines are tagged (0 .. world-1) */
    bool prefix_ranks;            /* rewrite "[j,r]<stdout>:" as "[rank r] " (else drop the tag) */
    const unsigned char *show;    /* per rank: show its stdout on the console; NULL = all */
    double grace_s;
    double t0;                    /* times count from here */
    /* out */
    int status;                   /* mpirun's exit status: code or 128 + signal */
    int interrupt_signal;         /* a signal the launcher got and passed on, or 0 */
    struct dt_mpirun_verdict verdict;
    struct dt_agent_tail *tails;  /* world entries: each rank's last stderr lines */
    int mpirun_pid;
    int leftovers;                /* orphaned processes stopped after mpirun ended */
    double start_s, end_s;
};

/* Runs mpirun to its end, forwarding SIGINT/SIGTERM/SIGHUP/SIGQUIT to it
 * (SIGKILL to its process group after the grace period).  Returns 0 with
 * a->status set, or a negative DT_E* code if mpirun could not be started. */
int dt_mpirun_run_attempt(struct dt_mpirun_attempt *a);

/* -x names an agent needs from the launcher (mpirun.c). */
const char *const *dt_mpirun_agent_exports(const struct dt_job *job);
/* submit for the two shapes (mpirun_submit.c, mpirun_agents.c). */
int dt_mpirun_submit(const struct dt_job *job, const struct dt_adapter_launch *opts);
int dt_mpirun_run_agents(const struct dt_job *job, const struct dt_adapter_launch *opts);

#endif
