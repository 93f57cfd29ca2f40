/* agent_requeue.c - a scheduler's time limit is near: pass the signal on, or stop for a requeue.
 *
 * SIGUSR1 (a scheduler's time limit is near: Slurm's --signal=B:USR1@90,
 * passed on by the batch script and srun), and SIGUSR2 or SIGALRM when
 * signals_to_handle lists them, goes on only to processes that catch it, as
 * the kernel says (/proc/<pid>/status SigCgt): a Python script without a
 * handler would die of it (CPython keeps SIGUSR1's default action), and the
 * job would fail with 138.  When every rank has a process that catches it,
 * the outermost such process of each rank gets it (not a forked worker that
 * inherited the handler) and supervision goes on: the bundled trainer
 * writes a checkpoint at a step all ranks agree on and exits with
 * DT_AGENT_EXIT_REQUEUE (75, EX_TEMPFAIL).  Such an exit is neither a failure
 * (the others are not stopped, nothing restarts) nor a success: the agent
 * exits with 75, and the batch script requeues the job, which resumes from
 * that checkpoint; a rank that handles the signal and runs on simply runs
 * on.  When some rank does not catch it, every rank is stopped as for
 * SIGTERM (SIGKILL after the grace period) and the agent exits with 75 all
 * the same: the job is requeued and starts again from whatever the script
 * saved.  A rank killed by such a signal that the agent did not send (it
 * reached the rank directly: Slurm's --signal without B:) stops the job the
 * same way.
 *
 * The agent's loop (agent_supervise.c) catches these signals and hands each
 * one here; what stopping does to the attempt is the state machine's
 * (agent_state.c, DT_AGENT__EV_REQUEUE and DT_AGENT__EV_REQUEUE_STOP).
 */
#include "launcher/agent/agent_internal.h"
#include "base/log.h"
#include "base/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Drops the catchers whose parent catches it too: a rank's DataLoader
 * workers inherit its handler with fork, and must not run it themselves. */
static int outermost(pid_t *pids, const pid_t *ppids, int n)
{
    int kept = 0;
    for (int k = 0; k < n; k++) {
        bool inner = false;
        for (int j = 0; j < n && !inner; j++)
            inner = ppids[k] == pids[j];
        if (!inner)
            pids[kept++] = pids[k];
    }
    return kept;
}

/* The processes of the ranks' groups that catch sig, the outermost of them
 * (a wrapper shell that does not catch it leaves its python the one to get
 * it); per_rank (by index) counts each rank's catchers.  Returns how many
 * are in pids. */
static int find_catchers(const struct dt_agent *a, int sig, pid_t *pids, pid_t *ppids, int max, int *per_rank)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while (n < max && (de = readdir(d)) != NULL) {
        struct dt_proc_stat ps;
        if (!isdigit((unsigned char)de->d_name[0]) || dt_proc_stat_read(de->d_name, &ps) != 0 || ps.state == 'Z')
            continue;
        pid_t pid = (pid_t)atoi(de->d_name);
        for (int i = 0; i < a->nproc; i++)
            if (a->procs[i].running && a->procs[i].pid == ps.pgrp && dt_proc_catches(pid, sig) == 1) {
                ppids[n] = ps.ppid;
                pids[n++] = pid;
                per_rank[i]++;
            }
    }
    closedir(d);
    return outermost(pids, ppids, n);
}

/* "3, 5, 7" of the running ranks with no catcher (the first few); how many there are. */
static int name_ranks(const struct dt_agent *a, const int *per_rank, char *buf, size_t size)
{
    size_t used = 0;
    int listed = 0, left = 0;
    buf[0] = 0;
    for (int i = 0; i < a->nproc; i++) {
        if (!a->procs[i].running || per_rank[i] > 0)
            continue;
        if (listed == 8) {
            left++;
            continue;
        }
        used += (size_t)snprintf(buf + used, used < size ? size - used : 0, "%s%d", listed ? ", " : "",
                                 a->procs[i].rank);
        listed++;
    }
    if (left)
        snprintf(buf + used, used < size ? size - used : 0, " and %d more", left);
    return listed + left;
}

/* No rank runs: before the ranks start, or while a restart is pending, the
 * job stops to be requeued; after they are done there is nothing to do. */
static bool nothing_to_tell(struct dt_agent *a)
{
    const struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    return a->sm.state != DT_AGENT__IDLE && a->sm.state != DT_AGENT__PLACING &&
           !(a->sm.state == DT_AGENT__DECIDING && at->first_failed >= 0);
}

/* Some rank would die of sig (per_rank: who has a process that catches it,
 * NULL when that could not be told): every rank stops for a requeue. */
static void requeue_stop(struct dt_agent *a, int sig, const char *name, const int *per_rank)
{
    char who[160];
    if (a->running == 0)
        dt_log_warn("received %s (a time limit is near) while no rank runs: ending the job for it to be requeued "
                    "(exit status %d)",
                    name, DT_AGENT_EXIT_REQUEUE);
    else {
        int n = per_rank ? name_ranks(a, per_rank, who, sizeof who) : 2;
        if (!per_rank)
            snprintf(who, sizeof who, "(out of memory: which ones cannot be told)");
        dt_log_warn("received %s (a time limit is near): rank%s %s do%s not catch it and would die of it (a "
                    "Python script without a handler does); stopping every rank (SIGTERM, SIGKILL after %g s) for "
                    "the job to be requeued (exit status %d)",
                    name, n == 1 ? "" : "s", who, n == 1 ? "es" : "", a->sm.grace_s, DT_AGENT_EXIT_REQUEUE);
    }
    dt_agent__event(a, DT_AGENT__EV_REQUEUE_STOP, sig);
}

void dt_agent__notice_signal(struct dt_agent *a, int sig)
{
    char tmp[32];
    const char *name = dt_proc_signal_name(sig, tmp, sizeof tmp);
    if (a->sm.end == DT_AGENT__END_REQUEUED)
        return; /* already stopping for it */
    if (a->group) { /* its process passes the signal on to the ranks (mpirun does) */
        dt_log_warn("received %s (a time limit is near): passing it on to %s", name, a->cfg->argv[0]);
        dt_agent__event(a, DT_AGENT__EV_REQUEUE, sig);
        if (a->procs[0].running)
            kill(a->procs[0].pid, sig);
        return;
    }
    if (a->running == 0 && nothing_to_tell(a)) {
        dt_log_info("received %s after the ranks ended: nothing to pass it on to", name);
        return;
    }
    enum { MAX_FOUND = 1024 };
    static pid_t pids[MAX_FOUND], ppids[MAX_FOUND];
    int *per_rank = calloc((size_t)a->nproc, sizeof *per_rank);
    int n = per_rank ? find_catchers(a, sig, pids, ppids, MAX_FOUND, per_rank) : 0;
    bool all = per_rank != NULL && a->running > 0;
    for (int i = 0; all && i < a->nproc; i++)
        all = !a->procs[i].running || per_rank[i] > 0;
    if (!all) {
        requeue_stop(a, sig, name, per_rank);
        free(per_rank);
        return;
    }
    if (!a->sm.requeue_asked)
        dt_log_warn("received %s (a time limit is near): every rank catches it, passing it on; a rank that exits "
                    "with %d has checkpointed and stopped to be requeued",
                    name, DT_AGENT_EXIT_REQUEUE);
    dt_agent__event(a, DT_AGENT__EV_REQUEUE, sig);
    for (int k = 0; k < n; k++)
        kill(pids[k], sig);
    free(per_rank);
}
