/* agent_refusals.c - stopping a job whose PyTorch ranks the coordinator refuses.
 *
 * With rendezvous.auth: token, PyTorch's TCPStore client (which cannot
 * present dtrain's token) is turned away; it then retries for as long as its
 * timeout, 30 minutes in init_process_group, so the job would look hung.
 * The coordinator counts such refusals (dt_coord_refusals); this poll, run
 * by the agent of the node that hosts the coordinator, ends the job at the
 * first one with an error that names the setting to change.  A refusal for
 * a wrong token is not PyTorch's and only logged by the coordinator.
 *
 * Not for the coordinator's own log line (coordinator_ops.c writes it).
 */
#include "launcher/agent.h"

#include "base/log.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"

#include <string.h>

enum dt_agent_verdict dt_agent_watch_refusals(struct dt_coord *c, const struct dt_job *job, unsigned long *seen,
                                              int *status)
{
    if (!c)
        return DT_AGENT_GO_ON;
    char last[512];
    unsigned long n = dt_coord_refusals(c, last, sizeof last);
    if (n == *seen)
        return DT_AGENT_GO_ON;
    *seen = n;
    if (!strstr(last, "PyTorch"))
        return DT_AGENT_GO_ON;
    dt_log_error("job %s: a rank connected to the coordinator without the job token and was refused: it "
                 "looks like PyTorch's TCPStore client, which cannot present dtrain's token and would retry "
                 "until its timeout. Set `rendezvous: {auth: none}` in %s to run PyTorch scripts. Stopping the "
                 "job.",
                 job->name, job->path);
    *status = 1;
    return DT_AGENT_ABORT;
}
