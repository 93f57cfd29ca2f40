/* agent_hooks.c - where the agent's loop meets cfg->hooks (agent.h).
 *
 * The supervise loop calls dt_agent_hooks_poll every turn; it runs the
 * hook's poll at most once a period and turns its verdict into action:
 * STOP_ATTEMPT stops this node's ranks (another node failed, the attempt
 * is over everywhere), ABORT stops them and ends the job with the hook's
 * status.  After an attempt, dt_agent_hooks_attempt_end asks the hook
 * whether the job restarts, so every node of a multi-node job restarts
 * together or not at all.
 *
 * Not for what the hooks decide: the refusal watch (agent_refusals.c) and
 * the restart rounds (agent_round.c) do that.
 */
#include "launcher/agent_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "spec/jobspec.h"
#include "base/clock.h"

#include <signal.h>

#define DEFAULT_PERIOD_S 0.1

static double period(const struct dt_agent *a)
{
    double p = a->cfg->hooks->period_s;
    return p > 0 ? p : DEFAULT_PERIOD_S;
}

int dt_agent_hooks_timeout(const struct dt_agent *a, int timeout)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    if (!h || !h->poll || a->abort_status >= 0)
        return timeout;
    double left = a->next_hook_poll - dt_clock_s();
    int ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
    return timeout < 0 || timeout > ms ? ms : timeout;
}

void dt_agent_hooks_poll(struct dt_agent *a)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    double now = dt_clock_s();
    if (!h || !h->poll || a->abort_status >= 0 || a->interrupt_sig || now < a->next_hook_poll)
        return;
    a->next_hook_poll = now + period(a);
    int status = 1;
    enum dt_agent_verdict v = h->poll(h->ctx, a->res, a->attempt, &status);
    if (v == DT_AGENT_GO_ON)
        return;
    if (v == DT_AGENT_ABORT)
        a->abort_status = status >= 0 ? status : 1;
    if (!a->stopping && a->running > 0)
        dt_agent_start_stopping(a, SIGTERM);
}

int dt_agent_hooks_attempt_end(struct dt_agent *a, int sig_fd)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    bool restart = false;
    int status = -1;
    int rc = h->attempt_end(h->ctx, a->res, a->attempt, sig_fd, &restart, &status);
    if (rc < 0) {
        dt_log_error("%s", dt_error_last());
        a->abort_status = 1;
        return rc;
    }
    if (rc == 1) /* a signal came: the caller handles it */
        return 0;
    if (restart && a->attempt >= a->cfg->job->max_restarts) {
        dt_log_error("internal: a restart past max_restarts (%d) was asked for; ending the job",
                     a->cfg->job->max_restarts);
        a->abort_status = 1;
        return 0;
    }
    if (restart)
        return 1;
    a->job_status = status >= 0 ? status : 1;
    return 0;
}
