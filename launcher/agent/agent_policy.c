/* agent_policy.c - which failure of an attempt is its first, and whether
 * restart_policy makes it final.
 *
 * The first failure names the attempt's cause in summary.json and, under
 * restart_policy.on_exit, decides whether the job restarts.  A failed rank
 * usually makes its peers fail soon after with a status of their own
 * ("connection closed by peer": 1), and the agent may reap one of those
 * first.  So among failures reaped within DT_AGENT__CAUSE_WINDOW_S of the first,
 * the first failure is the one of the heaviest cause, ties going to the
 * earlier:
 *   LISTED  a status restart_policy.on_exit lists, of a rank dtrain had not
 *           signalled: the script chose it to say what went wrong;
 *   SIGNAL  death by a signal dtrain did not send (the OOM killer's SIGKILL):
 *           it leaves no error file with a timestamp to elect by, as
 *           torchrun does;
 *   OTHER   any other status.
 * A hang is the watchdog's verdict and stands.  The loop that reaps the
 * ranks and stops the others is agent_supervise.c's.
 */
#include "launcher/agent/agent_internal.h"
#include "base/log.h"
#include "base/proc.h"
#include "spec/jobspec.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

enum dt_agent__cause dt_agent__cause(const struct dt_agent *a, const struct dt_agent_rank_result *r)
{
    if (!r->stopped_by_agent && dt_job_exit_listed(a->cfg->job, dt_proc_exit_status(r->wstatus)))
        return DT_AGENT__CAUSE_LISTED;
    if (!WIFSIGNALED(r->wstatus))
        return DT_AGENT__CAUSE_OTHER;
    return dt_agent__sm_sent(&a->sm, WTERMSIG(r->wstatus)) ? DT_AGENT__CAUSE_OTHER : DT_AGENT__CAUSE_SIGNAL;
}

bool dt_agent__outranks(const struct dt_agent *a, int i, enum dt_agent__cause cause)
{
    const struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    return at->hung < 0 && cause > a->first.cause &&
           at->ranks[i].exit_s - at->ranks[at->first_failed].exit_s < DT_AGENT__CAUSE_WINDOW_S;
}

int dt_agent__failure_status(const struct dt_agent *a, const struct dt_agent_attempt *at)
{
    if (at->first_failed >= 0)
        return dt_proc_exit_status(at->ranks[at->first_failed].wstatus);
    return a->group_failed > 0 ? a->group_failed : -1;
}

/* A hang is never final: its SIGKILL came from the agent. */
bool dt_agent__final_by_policy(struct dt_agent *a)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    if (at->hung >= 0 && at->hung == at->first_failed)
        return false;
    int status = dt_agent__failure_status(a, at);
    if (dt_job_exit_action(a->cfg->job, status) != DT_EXIT_FAIL)
        return false;
    if (at->first_failed >= 0)
        a->res->first_failure.final = true;
    char who[64];
    if (at->first_failed >= 0)
        snprintf(who, sizeof who, "rank %d", at->ranks[at->first_failed].rank);
    else
        snprintf(who, sizeof who, "%s", a->cfg->argv[0]);
    dt_log_error("%s ended with exit status %d, which restart_policy.%s says is final: not restarting", who,
                 status, dt_job_exit_listed(a->cfg->job, status) ? "on_exit" : "default");
    return true;
}
