/* agent_supervise.c - dt_agent_run: the agent's poll loop and how it acts on failures.
 *
 * One loop on the calling thread watches every rank's stdout and stderr and
 * a self-pipe fed by the signal handlers (SIGCHLD and the job signals), so a
 * signal can never be lost between a check and the wait.  Policy, as in
 * torchrun: the first rank that fails stops the group (SIGTERM, SIGKILL
 * after the grace period) and the group restarts up to max_restarts times;
 * a signal to the launcher is forwarded and ends the run without restart.
 * An attempt ends only when no process of it is left: the agent is a child
 * subreaper, so it waits until it has no children at all.
 *
 * What is outside this node's ranks takes part through cfg->hooks (agent.h):
 * the loop runs the hook's poll at most once a period and turns its verdict
 * into action (STOP_ATTEMPT stops this node's ranks: another node failed,
 * the attempt is over everywhere; ABORT stops them and ends the job with
 * the hook's status), and after an attempt asks the hook whether the job
 * restarts, so every node of a multi-node job restarts together or not at
 * all.  What the hooks decide is agent_node.c's (the refusal watch) and
 * agent_rounds.c's (the restart rounds).
 *
 * A signal that says a scheduler's time limit is near (SIGUSR1, and SIGUSR2 or
 * SIGALRM when signals_to_handle lists them) goes to agent_requeue.c, which
 * passes it on to the ranks that catch it or stops them for a requeue.
 *
 * What each event does to the attempt (stop, kill, sweep, drain) and when a
 * state's time is up are the state machine's (agent_state.c): this loop
 * notices events and feeds them to it.  Not for spawning and output
 * (agent_procs.c), hangs (agent_watchdog.c), which failure is the first and
 * whether it is final (agent_policy.c) or rendering (agent_summary.c).
 */
#include "launcher/agent/agent_internal.h"
#include "base/args.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- signals ------------------------------------------------------------- */

/* The job's signals, SIGUSR1 (a scheduler's time limit is near: requeue, below)
 * and SIGCHLD all arrive on one pipe the loop polls, so none is lost between
 * a check and the wait.  The stop signals stop the job whatever
 * signals_to_handle says: an agent that died of one would leave its ranks to
 * their guards' SIGKILL, with no grace period. */
static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGCHLD};

/* A signal that says a time limit is near (requeue, below): SIGUSR1, and
 * those signals_to_handle lists beyond the stop signals (SIGUSR2, SIGALRM). */
static bool is_notice(const struct dt_agent *a, int sig)
{
    for (size_t i = 0; i < sizeof caught / sizeof *caught; i++)
        if (caught[i] == sig)
            return sig == SIGUSR1;
    return sig > 0 && sig < 64 && (a->cfg->job->signals_to_handle >> sig & 1);
}

static int install_signals(struct dt_agent *a, struct dt_proc_signals *sv)
{
    int sigs[DT_PROC_SIGNALS_MAX], n = 0;
    for (size_t i = 0; i < sizeof caught / sizeof *caught; i++)
        sigs[n++] = caught[i];
    for (int sig = 1; sig < 64 && n < DT_PROC_SIGNALS_MAX; sig++)
        if (sig != SIGUSR1 && is_notice(a, sig))
            sigs[n++] = sig;
    int rc = dt_proc_signals_catch(sigs, n, sv);
    if (rc < 0)
        return dt_error_prefix("the agent's signals");
    /* A log past RLIMIT_FSIZE must be an error the agent reports (EFBIG),
     * not SIGXFSZ killing it; ranks get the default back (child_exec). */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &a->saved_xfsz);
    /* Orphans of the job (a rank's `cmd &` after the rank exits) become our
     * children instead of init's, so they can be found and stopped. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return 0;
}

/* --- the hooks ----------------------------------------------------------- */

#define DEFAULT_PERIOD_S 0.1
/* The keepalive's period: well within the coordinator's 5 s floor for a silent agent. */
#define KEEPALIVE_S 1.0

static double period(const struct dt_agent *a)
{
    double p = a->cfg->hooks->period_s;
    return p > 0 ? p : DEFAULT_PERIOD_S;
}

/* The poll() timeout (ms) capped so the hook's poll runs on time. */
static int hooks_timeout(const struct dt_agent *a, int timeout)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    if (!h || (dt_agent__sm_ending(&a->sm) ? !h->keepalive : !h->poll))
        return timeout;
    double left = a->next_hook_poll - dt_clock_s();
    int ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
    return timeout < 0 || timeout > ms ? ms : timeout;
}

/* Runs the hook's poll when due and acts on its verdict. */
static void hooks_poll(struct dt_agent *a)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    double now = dt_clock_s();
    if (!h || now < a->next_hook_poll)
        return;
    if (dt_agent__sm_ending(&a->sm)) {
        if (h->keepalive) {
            a->next_hook_poll = now + KEEPALIVE_S;
            h->keepalive(h->ctx);
        }
        return;
    }
    if (!h->poll)
        return;
    a->next_hook_poll = now + period(a);
    int status = 1;
    enum dt_agent_verdict v = h->poll(h->ctx, a->res, a->attempt, &status);
    if (v == DT_AGENT_ABORT)
        dt_agent__event(a, DT_AGENT__EV_ABORT, status >= 0 ? status : 1);
    else if (v == DT_AGENT_STOP_ATTEMPT)
        dt_agent__event(a, DT_AGENT__EV_STOP, 0);
}

/* After an attempt: 1 to restart, 0 to end the job, negative on error. */
static int hooks_attempt_end(struct dt_agent *a, int sig_fd)
{
    const struct dt_agent_hooks *h = a->cfg->hooks;
    bool restart = false;
    int status = -1;
    int rc = h->attempt_end(h->ctx, a->res, a->attempt, sig_fd, &restart, &status);
    if (rc < 0) {
        dt_log_error("%s", dt_error_last());
        dt_agent__event(a, DT_AGENT__EV_ABORT, 1);
        return rc;
    }
    if (rc == 1) /* a signal came: the caller handles it */
        return 0;
    if (restart && !a->cfg->elastic && a->attempt >= a->cfg->job->max_restarts) {
        dt_log_error("internal: a restart past max_restarts (%d) was asked for; ending the job",
                     a->cfg->job->max_restarts);
        dt_agent__event(a, DT_AGENT__EV_ABORT, 1);
        return 0;
    }
    if (restart)
        return 1;
    dt_agent__event(a, DT_AGENT__EV_DECIDED, status >= 0 ? status : 1);
    return 0;
}

/* --- failures and hangs -------------------------------------------------- */

/* The first failure's SIGTERM to the other ranks: at once, or, when on_exit
 * lists statuses and the first failure's is not one, after the election's
 * window, unless they all end first.  A PyTorch rank that calls sys.exit(42)
 * tears down for a while, and its peer, told "connection closed", can exit
 * before it; a SIGTERM then would kill the rank with 42 before its status is
 * seen (test_fault.sh met this in CI). */
static void stop_after_failure(struct dt_agent *a, const struct dt_agent_rank_result *r, const char *desc)
{
    bool settle = a->running > 0 && a->first.cause < DT_AGENT__CAUSE_LISTED &&
                  a->cfg->job->restart_policy.n_on_exit > 0;
    char when[64] = "";
    if (settle)
        snprintf(when, sizeof when, " in %g s unless they end first", DT_AGENT__CAUSE_WINDOW_S);
    if (a->running > 0)
        dt_log_warn("rank %d %s; stopping the other %d rank%s (SIGTERM%s, SIGKILL after %g s)", r->rank, desc,
                    a->running, a->running == 1 ? "" : "s", when, a->sm.grace_s);
    dt_agent__event(a, settle ? DT_AGENT__EV_FAILED_ELECT : DT_AGENT__EV_FAILED, 0);
}

/* A rank killed by SIGUSR1 that dtrain did not send: the time limit's
 * warning reached it directly (Slurm's --signal without B: signals every
 * process of the step) and it had no handler.  That is no failure of the
 * rank's: the job stops to be requeued, as when the agent gets it first. */
static bool killed_by_notice(struct dt_agent *a, const struct dt_agent_rank_result *r)
{
    if (!WIFSIGNALED(r->wstatus) || !is_notice(a, WTERMSIG(r->wstatus)) || r->stopped_by_agent)
        return false;
    char tmp[32];
    const char *name = dt_proc_signal_name(WTERMSIG(r->wstatus), tmp, sizeof tmp);
    dt_log_warn("rank %d was killed by %s, sent to it directly (a time limit is near, and it has no handler); "
                "stopping every rank (SIGTERM, SIGKILL after %g s) for the job to be requeued (exit status %d)",
                r->rank, name, a->sm.grace_s, DT_AGENT_EXIT_REQUEUE);
    dt_agent__event(a, DT_AGENT__EV_REQUEUE_STOP, WTERMSIG(r->wstatus));
    return true;
}

static void on_rank_exit(struct dt_agent *a, int i, int wstatus)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    struct dt_agent_rank_result *r = &at->ranks[i];
    r->exited = true;
    r->wstatus = wstatus;
    r->exit_s = dt_clock_s() - a->t0;
    a->procs[i].running = false;
    a->running--;
    bool ok = (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) || dt_agent__sm_requeue_exit(&a->sm, wstatus);
    if (ok || a->sm.end == DT_AGENT__END_INTERRUPTED || a->sm.end == DT_AGENT__END_REQUEUED)
        return;
    if (killed_by_notice(a, r))
        return;
    enum dt_agent__cause cause = dt_agent__cause(a, r);
    if (at->first_failed >= 0 ? !dt_agent__outranks(a, i, cause) : r->stopped_by_agent)
        return;
    int before = at->first_failed;
    at->first_failed = i;
    a->first.cause = cause;
    a->first.oom_verdict = -1;
    long long oom_now;
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL && a->first.oom_base >= 0 &&
        dt_agent__oom_count(&oom_now) == 0)
        a->first.oom_verdict = oom_now > a->first.oom_base;
    char desc[160];
    dt_proc_describe(wstatus, true, desc, sizeof desc);
    if (a->first.oom_verdict >= 0)
        snprintf(desc, sizeof desc, "killed by SIGKILL%s",
                 a->first.oom_verdict ? " (out of memory: the kernel's OOM killer)" : "");
    if (before < 0)
        stop_after_failure(a, r, desc);
    else
        dt_log_warn("rank %d %s, about when rank %d failed: %s, so rank %d is the first failure", r->rank, desc,
                    at->ranks[before].rank,
                    cause == DT_AGENT__CAUSE_LISTED ? "restart_policy.on_exit lists that status"
                                                    : "dtrain did not send that signal",
                    r->rank);
}

/* A group's process ended: how its ranks did, its records say (collect_group). */
static void on_proc_exit(struct dt_agent *a, int i, int wstatus)
{
    if (!a->group) {
        on_rank_exit(a, i, wstatus);
        return;
    }
    a->group_wstatus = wstatus;
    a->procs[i].running = false;
    a->running--;
}

/* The watchdog's verdict: the capture first (the states and stacks of the
 * hang itself), then SIGKILL for the hung rank's group (a stopped process
 * would hold SIGTERM pending for ever) and the usual stop for the others;
 * the group restarts like after any failure. */
static void on_hang(struct dt_agent *a, int i, const char *why)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    struct dt_agent_failure *ff = &a->res->first_failure;
    struct dt_agent__proc *p = &a->procs[i];
    at->hung = i;
    at->first_failed = i;
    a->first.oom_verdict = -1;
    ff->hung_step = p->watch.has_hb ? p->watch.step : -1;
    ff->hang_detected_s = dt_clock_s() - a->t0;
    snprintf(ff->hang_reason, sizeof ff->hang_reason, "%s", why);
    if (dt_agent__watchdog_capture(a, i, why, ff->hang_report, sizeof ff->hang_report) < 0)
        dt_log_warn("%s", dt_error_last());
    dt_agent__watchdog_tracebacks(a, i, ff->hang_report, ff->hang_traceback, sizeof ff->hang_traceback);
    dt_log_error("rank %d is hung: %s; what it looked like: %s; stopping the group", p->rank, why,
                 ff->hang_report[0] ? ff->hang_report : "(no report)");
    at->ranks[i].stopped_by_agent = true;
    if (kill(-p->pid, SIGKILL) != 0)
        kill(p->pid, SIGKILL);
    dt_agent__event(a, DT_AGENT__EV_STOP, 0);
}

/* The watchdog's verdicts (agent_watchdog.c), while the ranks run undisturbed. */
static void watchdog(struct dt_agent *a)
{
    char why[256];
    bool watching = a->running > 0 && a->sm.state == DT_AGENT__RUNNING;
    int hung = watching ? dt_agent__watchdog_tick(a, why, sizeof why) : -1;
    if (hung >= 0)
        on_hang(a, hung, why);
    if (hung == DT_AGENT__COORD_LOST) {
        snprintf(a->res->coordinator_lost, sizeof a->res->coordinator_lost, "%s", why);
        dt_log_error("%s; stopping every rank, no restart", why);
        dt_agent__event(a, DT_AGENT__EV_COORD_LOST, 0);
    }
}

/* --- the poll loop ------------------------------------------------------- */

/* A rank's wait status from its guard, when it has come. */
static void rank_status(struct dt_agent *a, int i)
{
    int st;
    if (a->procs[i].running && dt_agent__guard_status(&a->procs[i], &st) == 1)
        on_proc_exit(a, i, st);
}

/* Reaps every child that has exited: guards (which outlive their rank
 * while it left something behind) and orphans alike.  A guard that is gone
 * without a word for its rank was killed itself; its rank died with it
 * (PR_SET_PDEATHSIG), and the guard's status stands for the rank's.
 * Returns true while the agent still has children. */
static bool reap(struct dt_agent *a)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid == 0)
            return true;
        if (pid < 0)
            return errno == EINTR ? true : false;
        for (int i = 0; i < a->nproc; i++) {
            struct dt_agent__proc *p = &a->procs[i];
            if (p->guard != pid)
                continue;
            p->guard = 0;
            rank_status(a, i);
            if (p->running)
                on_proc_exit(a, i, st);
        }
    }
}

static void on_interrupt(struct dt_agent *a, int sig)
{
    char tmp[32];
    const char *name = dt_proc_signal_name(sig, tmp, sizeof tmp);
    enum dt_agent__state was = a->sm.state;
    if (a->sm.end != DT_AGENT__END_INTERRUPTED) {
        if (a->cfg->hooks && a->cfg->hooks->interrupted)
            a->cfg->hooks->interrupted(a->cfg->hooks->ctx, sig);
        dt_log_warn("received %s: passing it on to the ranks (SIGKILL after %g s; send it again to kill now)",
                    name, a->sm.grace_s);
    }
    dt_agent__event(a, DT_AGENT__EV_INTERRUPT, sig);
    if (was != DT_AGENT__KILLING && a->sm.state == DT_AGENT__KILLING)
        dt_log_warn("received %s again: killing every process of the job now", name);
}

/* Returns false once no child is left. */
static bool handle_signals(struct dt_agent *a, int fd)
{
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++)
            if (is_notice(a, buf[i]))
                dt_agent__notice_signal(a, buf[i]);
            else if (buf[i] != SIGCHLD)
                on_interrupt(a, buf[i]);
    return reap(a);
}

/* The poll set: the signal pipe first, then each rank's guard status pipe
 * (its stream NULL) and output pipes. */
static int open_streams(struct dt_agent *a, int sig_fd)
{
    int n = 0;
    a->pfds[n] = (struct pollfd){.fd = sig_fd, .events = POLLIN};
    a->pfd_stream[n++] = NULL;
    for (int i = 0; i < a->nproc; i++) {
        if (a->procs[i].status_fd >= 0 && a->procs[i].running) {
            a->pfds[n] = (struct pollfd){.fd = a->procs[i].status_fd, .events = POLLIN};
            a->pfd_proc[n] = &a->procs[i];
            a->pfd_stream[n++] = NULL;
        }
        struct dt_agent__stream *ss[2] = {&a->procs[i].out, &a->procs[i].err};
        for (int k = 0; k < 2; k++) {
            if (ss[k]->fd < 0)
                continue;
            a->pfds[n] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
            a->pfd_proc[n] = &a->procs[i];
            a->pfd_stream[n++] = ss[k];
        }
    }
    return n;
}

/* The poll() timeout (ms): the state's (its deadline, or the sweep's and
 * SIGKILL's pace), a stalled line's (shown as it stands once due: the look
 * for it happens here, before each wait), then the progress line's, the
 * watchdog's and the hook's. */
static int poll_timeout(struct dt_agent *a, bool children)
{
    double now = dt_clock_s();
    int timeout = dt_agent__sm_wait_ms(&a->sm, now, children && a->running == 0);
    int partial = dt_agent__pump_partial(a, now);
    if (partial >= 0 && (timeout < 0 || timeout > partial))
        timeout = partial;
    /* the progress line redraws 4 times a second; the ranks' progress rows are read as often */
    if ((a->progress || a->rows) && (timeout < 0 || timeout > 250))
        timeout = 250;
    int watch_ms = (int)(DT_AGENT__WATCH_PERIOD_S * 1000);
    if (a->wd.next > 0 && a->running > 0 && a->sm.state == DT_AGENT__RUNNING &&
        (timeout < 0 || timeout > watch_ms))
        timeout = watch_ms;
    return hooks_timeout(a, timeout);
}

/* From spawn until no process of the attempt is left and their output is
 * read (the state machine leaves RUNNING..DRAINING). */
static void supervise(struct dt_agent *a, int sig_fd)
{
    bool children = true;
    for (;;) {
        int n = open_streams(a, sig_fd);
        if (a->sm.state == DT_AGENT__DRAINING)
            dt_agent__event(a, n == 1 ? DT_AGENT__EV_DRAINED : DT_AGENT__EV_TICK, 0);
        if (!dt_agent__sm_supervising(&a->sm))
            return;
        int rc = poll(a->pfds, (nfds_t)n, poll_timeout(a, children));
        if (rc < 0 && errno != EINTR) {
            dt_log_error("the agent cannot watch the ranks any more: poll: %s", strerror(errno));
            dt_agent__event(a, DT_AGENT__EV_ABANDON, 0);
            return;
        }
        for (int k = 1; k < n && rc > 0; k++) {
            if (!a->pfds[k].revents)
                continue;
            if (a->pfd_stream[k])
                dt_agent__pump(a, a->pfd_proc[k], a->pfd_stream[k]);
            else
                rank_status(a, (int)(a->pfd_proc[k] - a->procs));
        }
        /* the live line draws over the line the cursor is on; until a row comes
         * there is none, and a rank's \r progress bar keeps its line */
        if (dt_progress_drawing(a->progress))
            dt_agent__console_settle(a);
        dt_agent__rows_poll(a);
        dt_progress_update(a->progress, dt_clock_s(), a->attempt);
        children = handle_signals(a, sig_fd);
        if (!children)
            dt_agent__event(a, DT_AGENT__EV_NO_CHILDREN, 0);
        else if (a->running == 0)
            dt_agent__event(a, DT_AGENT__EV_RANKS_GONE, 0);
        dt_agent__event(a, DT_AGENT__EV_TICK, 0);
        watchdog(a);
        hooks_poll(a);
    }
}

/* --- one attempt --------------------------------------------------------- */

static void record_failure(struct dt_agent *a, const char *attempt_dir)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    if (at->first_failed < 0)
        return;
    const struct dt_agent_rank_result *r = &at->ranks[at->first_failed];
    struct dt_agent_failure *ff = &a->res->first_failure;
    a->res->have_failure = true;
    ff->attempt = a->attempt;
    ff->rank = r->rank;
    ff->wstatus = r->wstatus;
    ff->time_s = r->exit_s;
    ff->n_tail = dt_agent_tail_copy(&a->sinks[at->first_failed].tail, ff->tail);
    ff->oom_killer = a->first.oom_verdict;
    ff->hung = at->hung == at->first_failed;
    if (!ff->hung) {
        ff->hung_step = -1;
        ff->hang_reason[0] = ff->hang_report[0] = ff->hang_traceback[0] = 0;
    }
    snprintf(ff->error_file, sizeof ff->error_file, "%s/rank_%d.error.json", attempt_dir, r->rank);
    if (access(ff->error_file, F_OK) != 0)
        ff->error_file[0] = 0;
    dt_agent_error_file_read(ff->error_file, ff);
}

/* After a group's attempt: how each rank ended, from the group's records,
 * and which failed first.  Times come as wall-clock seconds: the ranks may
 * have run on other hosts. */
static int collect_group(struct dt_agent *a, const char *attempt_dir)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    struct dt_adapter_rank_end *ends = calloc((size_t)a->nranks, sizeof *ends);
    if (!ends)
        return dt_error_set(DT_ENOMEM, "out of memory reading how the ranks ended");
    int status = dt_proc_exit_status(a->group_wstatus);
    bool interrupted = a->sm.end == DT_AGENT__END_INTERRUPTED;
    int q = a->group->collect(a->group->ctx, attempt_dir, status, interrupted, ends);
    for (int i = 0; i < a->nranks; i++) {
        struct dt_agent_rank_result *r = &at->ranks[i];
        r->pid = ends[i].pid;
        r->exited = ends[i].exited;
        r->wstatus = ends[i].wstatus;
        r->stopped_by_agent = ends[i].stopped;
        r->exit_s = ends[i].exited ? ends[i].exit_unix - a->res->started_unix : 0;
    }
    free(ends);
    a->first.oom_verdict = -1; /* the ranks are not in our cgroup, maybe not on this host */
    if (status == 0 || interrupted)
        return 0;
    if (q >= 0 && q < a->nranks) {
        at->first_failed = q;
        at->ranks[q].stopped_by_agent = false;
        return 0;
    }
    a->group_failed = status;
    dt_log_error("%s exited with status %d and no rank says it failed; its messages are in %s/%s",
                 a->cfg->argv[0], status, attempt_dir, a->group->log_name);
    return 0;
}

static void reset_attempt_state(struct dt_agent *a)
{
    a->running = 0;
    a->first.cause = DT_AGENT__CAUSE_OTHER;
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    at->start_s = dt_clock_s() - a->t0;
    at->first_failed = -1;
    at->electing = false;
    at->hung = -1;
    at->leftovers = 0;
    a->group_wstatus = 0;
    a->group_failed = 0;
    a->group_stopped = false;
    if (dt_agent__oom_count(&a->first.oom_base) < 0)
        a->first.oom_base = -1;
    a->res->n_attempts = a->attempt + 1;
}

/* Every rank, each with its log files and environment. */
static int start_ranks(struct dt_agent *a, const char *dir)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent__proc *p = &a->procs[i];
        /* An elastic round numbers the ranks anew. */
        p->rank = a->sinks[i].rank = at->ranks[i].rank = dt_placement_rank_of(a->cfg->nproc, a->cfg->node_rank, i);
        dt_agent_env_free(p->env);
        p->env = NULL;
        int rc = dt_agent_env_build(a->cfg, i, a->attempt, environ, &p->env);
        /* taken before fork: the child may run (and trace) before the parent is scheduled again */
        double spawn_s = dt_clock_s() - a->t0;
        if (rc == 0)
            rc = dt_agent__open_logs(&a->sinks[i], dir);
        dt_agent__console_streams(a, &a->sinks[i], i);
        if (rc == 0)
            rc = dt_agent__spawn(a, p);
        if (rc < 0)
            return rc;
        at->ranks[i].pid = p->pid;
        at->ranks[i].spawn_s = spawn_s;
        a->running++;
    }
    return 0;
}

/* A group's one process, with every rank's log files and its own. */
static int start_group(struct dt_agent *a, const char *dir)
{
    struct dt_agent_attempt *at = &a->res->attempts[a->attempt];
    struct dt_agent__proc *p = &a->procs[0];
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, a->group->log_name);
    a->own_log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, DT_RUN_DIR_FILE_MODE);
    if (a->own_log < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create the log file %s", path);
    for (int i = 0; i < a->nranks; i++) {
        int rc = dt_agent__open_logs(&a->sinks[i], dir);
        if (rc < 0)
            return rc;
        dt_agent__console_streams(a, &a->sinks[i], a->cfg->nproc > 0 ? i % a->cfg->nproc : i);
    }
    char **rank_env = NULL;
    dt_agent_env_free(p->env);
    p->env = NULL;
    int rc = dt_agent_env_build(a->cfg, 0, a->attempt, environ, &rank_env);
    if (rc == 0 && (rc = a->group->env(a->group->ctx, rank_env, &p->env)) < 0)
        p->env = NULL;
    dt_agent_env_free(rank_env);
    double spawn_s = dt_clock_s() - a->t0;
    if (rc == 0)
        rc = dt_agent__spawn(a, p);
    if (rc < 0)
        return rc;
    for (int i = 0; i < a->nranks; i++)
        at->ranks[i].spawn_s = spawn_s;
    a->running++;
    return 0;
}

/* One attempt: spawn every rank (or the group's process), supervise until
 * no process of it is left. */
static int run_attempt(struct dt_agent *a, int sig_fd)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/attempt_%d", a->cfg->run_dir, a->attempt);
    if (mkdir(dir, DT_RUN_DIR_MODE) != 0 && errno != EEXIST)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s", dir);
    reset_attempt_state(a);
    int rc = a->group ? start_group(a, dir) : start_ranks(a, dir);
    /* After a failed spawn the ranks already started must not wait forever for the rest. */
    dt_agent__event(a, rc < 0 ? DT_AGENT__EV_SPAWN_FAILED : DT_AGENT__EV_SPAWNED, 0);
    if (rc == 0)
        dt_log_debug("attempt %d: started %d rank%s; logs in %s", a->attempt, a->nranks,
                     a->nranks == 1 ? "" : "s", dir);
    if (rc == 0 && dt_agent__rows_begin(a) < 0)
        dt_log_warn("%s: the ranks' progress rows are not read this attempt", dt_error_last());
    if (rc == 0)
        dt_agent__watchdog_begin(a);
    /* The loop (the progress line, the rows, the hooks) sets and clears the
     * last error as it goes: a failed spawn's must outlive it. */
    char *spawn_error = rc < 0 ? strdup(dt_error_last()) : NULL;
    supervise(a, sig_fd);
    dt_agent__rows_end(a);
    if (spawn_error)
        dt_error_set(rc, "%s", spawn_error);
    free(spawn_error);
    dt_agent__close_attempt(a); /* a log that could not be written back fails the job there */
    a->res->attempts[a->attempt].end_s = dt_clock_s() - a->t0;
    if (rc == 0 && a->group)
        rc = collect_group(a, dir);
    if (rc == 0)
        record_failure(a, dir);
    return rc;
}

/* --- the run ------------------------------------------------------------- */

static void finish(struct dt_agent *a)
{
    struct dt_agent_result *res = a->res;
    struct dt_agent_attempt *last = &res->attempts[res->n_attempts > 0 ? res->n_attempts - 1 : 0];
    int failed = res->n_attempts > 0 ? dt_agent__failure_status(a, last) : -1;
    struct dt_agent__outcome o = dt_agent__sm_outcome(&a->sm, failed, last->first_failed >= 0);
    res->wall_s = dt_clock_s() - a->t0;
    res->interrupt_signal = o.signal;
    res->requeue_stopped = a->sm.end == DT_AGENT__END_REQUEUED;
    res->exit_status = o.exit_status;
    res->status = o.interrupted ? DT_AGENT_INTERRUPTED : o.failed ? DT_AGENT_FAILED : DT_AGENT_SUCCEEDED;
}

/* The job is over on this node: 0 for the caller to return. */
static int over(struct dt_agent *a)
{
    dt_agent__event(a, DT_AGENT__EV_OVER, 0);
    return 0;
}

/* After an attempt: 1 to run another, 0 when the job is over, or a negative
 * DT_E* code (new_round could not reset the coordinator). */
static int next_attempt(struct dt_agent *a, int sig_fd)
{
    const struct dt_agent_config *cfg = a->cfg;
    int max = cfg->job->max_restarts;
    if (dt_agent__sm_ending(&a->sm))
        return over(a);
    if (a->res->attempts[a->attempt].first_failed >= 0)
        dt_agent__print_failure(cfg, a->res);
    if (cfg->hooks && cfg->hooks->attempt_end) {
        /* Other nodes take part: the restart is decided with them.  When the
         * job is over, a signal now (srun -K's SIGTERM) does not change how. */
        if (hooks_attempt_end(a, sig_fd) <= 0)
            return over(a);
        handle_signals(a, sig_fd); /* a signal now ends the job (DONE) */
        if (a->sm.state == DT_AGENT__DONE)
            return 0;
        if (!cfg->elastic) /* an elastic round's hook said why */
            dt_log_warn("restarting all %d rank%s of this node with the other nodes (restart %d of %d)",
                        a->nranks, a->nranks == 1 ? "" : "s", a->attempt + 1, max);
        dt_agent__event(a, DT_AGENT__EV_RESTART, 0);
        return 1;
    }
    if (dt_agent__failure_status(a, &a->res->attempts[a->attempt]) < 0 || dt_agent__final_by_policy(a))
        return over(a);
    /* A Ctrl-C that came while the attempt was being cleaned up must not start another. */
    handle_signals(a, sig_fd);
    if (a->sm.state == DT_AGENT__DONE || a->attempt >= max)
        return over(a);
    dt_log_warn("restarting every rank (attempt %d of %d), restart %d of %d", a->attempt + 2, max + 1,
                a->attempt + 1, max);
    if (cfg->new_round) {
        int rc = cfg->new_round(cfg->new_round_ctx, a->attempt + 1);
        if (rc < 0)
            return rc;
    }
    dt_agent__event(a, DT_AGENT__EV_RESTART, 0);
    return 1;
}

/* Rounds node 0 forms (an elastic job's, a fixed-size job's with restarts):
 * waits for this node's place in a round (begin_attempt) and takes its
 * numbers.  1 to run a.attempt, 0 when the job ended without this node (or
 * a newer agent of this node took its place), negative on error. */
static int place_node(struct dt_agent *a, struct dt_agent_config *round, int sig_fd)
{
    const struct dt_agent_hooks *h = round->hooks;
    struct dt_agent_place place;
    int status = -1, k = a->attempt;
    dt_agent__event(a, DT_AGENT__EV_PLACE, 0);
    int rc = h->begin_attempt(h->ctx, &k, sig_fd, &place, &status);
    if (rc < 0) {
        dt_agent__event(a, DT_AGENT__EV_ABORT, 1);
        return rc;
    }
    if (rc == 1) {
        if (status < 0)
            handle_signals(a, sig_fd);
        else
            dt_agent__event(a, DT_AGENT__EV_DECIDED, status);
        return over(a);
    }
    if (rc == 2) { /* fenced out: a newer agent of this node took its place */
        dt_agent__event(a, DT_AGENT__EV_REPLACED, 0);
        return over(a);
    }
    if (k >= a->res->max_attempts) {
        dt_agent__event(a, DT_AGENT__EV_ABORT, 1);
        return dt_error_set(DT_ENOMEM, "round %d: the job has gone through more rounds than this agent keeps "
                                       "(%d): stopping",
                            k, a->res->max_attempts);
    }
    a->attempt = k;
    round->node_rank = place.node_rank;
    round->nnodes = place.nnodes;
    round->restarts = place.restarts;
    dt_agent__event(a, DT_AGENT__EV_PLACED, 0);
    return 1;
}

int dt_agent_run(const struct dt_agent_config *cfg_in, struct dt_agent_result *res)
{
    struct dt_agent a;
    /* An elastic round changes the node's numbers: the agent reads them here. */
    struct dt_agent_config round = *cfg_in;
    const struct dt_agent_config *cfg = &round;
    int rc = dt_agent__init(&a, cfg, res);
    a.t0 = cfg->start_mono > 0 ? cfg->start_mono : dt_clock_s();
    /* the wall-clock time of t0, so `dtrain trace merge` can place spawn_s */
    res->started_unix = dt_clock_wall_s() - (dt_clock_s() - a.t0);
    struct dt_proc_signals sv;
    if (rc == 0)
        rc = install_signals(&a, &sv);
    if (rc < 0) {
        dt_agent__free(&a);
        res->status = DT_AGENT_FAILED;
        res->exit_status = 1;
        return rc;
    }
    bool placed = cfg->hooks && cfg->hooks->begin_attempt; /* node 0 forms each round */
    for (a.attempt = 0;; a.attempt++) {
        if (placed && (rc = place_node(&a, &round, sv.fd)) <= 0)
            break;
        rc = run_attempt(&a, sv.fd);
        if (rc == 0)
            rc = next_attempt(&a, sv.fd);
        if (rc <= 0)
            break;
    }
    rc = rc < 0 ? rc : 0;
    finish(&a);
    if (rc < 0) {
        res->status = DT_AGENT_FAILED;
        res->exit_status = 1;
    }
    dt_proc_signals_release(&sv);
    sigaction(SIGXFSZ, &a.saved_xfsz, NULL);
    dt_agent__free(&a);
    return rc;
}

void dt_agent_result_free(struct dt_agent_result *res)
{
    if (!res->attempts)
        return;
    for (int k = 0; k < res->max_attempts; k++) {
        free(res->attempts[k].ranks);
        free(res->attempts[k].others);
    }
    free(res->attempts);
    res->attempts = NULL;
}
