/* agent_requeue.c - SIGUSR1 before a scheduler's time limit: checkpoint, stop, be requeued.
 *
 * Slurm sends SIGUSR1 (--signal=B:USR1@90, passed on by the batch script and
 * srun) some time before it would kill the job.  The agent passes it to every
 * rank's process group and keeps supervising: the bundled trainer writes a
 * checkpoint at a step all ranks agree on and exits with
 * DT_AGENT_EXIT_REQUEUE (75, EX_TEMPFAIL).  Such an exit is neither a failure
 * (the others are not stopped, nothing restarts) nor a success: the agent
 * exits with 75, and the batch script requeues the job, which resumes from
 * that checkpoint.  A rank that ignores the signal simply runs on.
 *
 * Not for the other signals (agent_supervise.c ends the run on those).
 */
#include "launcher/agent_internal.h"

#include "base/log.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

/* Not dt_agent_signal_groups: that marks the ranks as stopped by the agent, and
 * these are only asked to stop; one that then fails has failed. */
void dt_agent_requeue_signal(struct dt_agent *a)
{
    if (!a->requeue_asked)
        dt_log_warn("received SIGUSR1 (the time limit is near): passing it on to the ranks; a rank that "
                    "exits with %d has checkpointed and stopped to be requeued",
                    DT_AGENT_EXIT_REQUEUE);
    a->requeue_asked = true;
    if (a->group) { /* its process passes SIGUSR1 on to the ranks (mpirun does) */
        if (a->procs[0].running)
            kill(a->procs[0].pid, SIGUSR1);
        return;
    }
    for (int i = 0; i < a->nproc; i++) {
        const struct dt_agent_proc *p = &a->procs[i];
        if (p->pid > 0 && p->running && kill(-p->pid, SIGUSR1) != 0 && errno == ESRCH)
            kill(p->pid, SIGUSR1); /* not yet in its own group (see dt_agent_signal_groups) */
    }
}

bool dt_agent_requeue_exit(struct dt_agent *a, int wstatus)
{
    if (!a->requeue_asked || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != DT_AGENT_EXIT_REQUEUE)
        return false;
    a->requeue_exits++;
    return true;
}

bool dt_agent_requeue_outcome(struct dt_agent *a, const struct dt_agent_attempt *last)
{
    /* job_status: what the nodes of a multi-node job agreed on; 75 there is another
     * node's ranks stopping the same way. */
    bool other_failed = a->job_status > 0 && a->job_status != DT_AGENT_EXIT_REQUEUE;
    if (a->requeue_exits == 0 || a->abort_status >= 0 || other_failed || last->first_failed >= 0)
        return false;
    a->res->status = DT_AGENT_INTERRUPTED;
    a->res->exit_status = DT_AGENT_EXIT_REQUEUE;
    return true;
}
