/* exit_status.h - the exit statuses every process of the launcher ends with
 * (docs/cli.md, "Exit statuses"): the CLI's commands, and the agent, whose
 * status is the job's.
 *
 * Not for how a process ended (base/proc.h) or for what a rank's status
 * means to the restart policy (spec/jobspec.h).
 */
#ifndef DT_EXIT_STATUS_H
#define DT_EXIT_STATUS_H

enum {
    DT_EXIT_OK = 0,
    /* dtrain failed at run time (no run, or summary.json says dtrain's error),
     * or the job failed with a status that would read as a refusal (2): its
     * own status is summary.json's exit_status. */
    DT_EXIT_FAILED = 1,
    /* dtrain refused before anything ran: a usage error, a spec error, a
     * missing program or tool, a scheduler not built in. */
    DT_EXIT_REFUSED = 2,
};

/* The exit status for a job that ended with `status` (0, a rank's exit code,
 * 128 + signal): itself, unless it would read as dtrain's own refusal. */
static inline int dt_cli_job_exit(int status)
{
    return status == DT_EXIT_REFUSED ? DT_EXIT_FAILED : status;
}

#endif
