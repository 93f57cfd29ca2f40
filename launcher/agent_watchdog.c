/* agent_watchdog.c - the agent's hang detection: which rank is stuck, and what it looked like.
 *
 * Every DT_AGENT_WATCH_PERIOD_S (0.5 s) the supervision loop asks the watchdog to
 * look at the running ranks.  Two sources, as torchrun has neither:
 *  - /proc: the state of every process in the rank's process group (a rank
 *    is a session leader, so its pgrp is its pid and a `sh -c` wrapper's
 *    children are seen too).  T (stopped by SIGSTOP or a debugger) for
 *    heartbeat_timeout means hung for any job; D (uninterruptible sleep:
 *    a hung file system or device) too, for jobs without heartbeats, when
 *    the group used no CPU time meanwhile (I/O-bound work passes through D).
 *  - heartbeats (trainer: jobs; worker/heartbeat.h): silence for
 *    heartbeat_timeout, none since the start for rendezvous.timeout +
 *    heartbeat_timeout, or a step below another rank's that has not moved
 *    for heartbeat_timeout.
 * What the watchdog cannot see: a command: rank that is wedged but neither
 * stopped nor in D (a deadlock in a futex, a lost collective) looks like a
 * rank waiting for its peers; its own communicator's timeout must end it.
 * A trainer rank whose compute thread is stuck freezes its peers at the same
 * step in the all-reduce, so no step is "behind": the communicator's
 * deadline (rendezvous.timeout) ends that round and names the stalled peer.
 *
 * On a verdict the capture writes attempt_<k>/hang_rank_<n>.txt before any
 * signal is sent, so the states and stacks are those of the hang.
 *
 * Not for acting on the verdict: agent_supervise.c stops the group and
 * restarts it as it does after any failure.
 */
#include "launcher/agent_internal.h"
#include "base/proc.h"

#include "base/error.h"
#include "spec/jobspec.h"
#include "base/clock.h"

#include <ctype.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAPTURE_LOG_LINES 10
#define CAPTURE_LOG_BYTES 8192

static const char *state_words(char s)
{
    switch (s) {
    case 'T':
        return "stopped: SIGSTOP, SIGTSTP or job control";
    case 't':
        return "stopped by a debugger (tracing stop)";
    case 'D':
        return "uninterruptible sleep: waiting on the kernel, e.g. a hung file system or device";
    case 'R':
        return "running";
    case 'S':
        return "sleeping";
    case 'Z':
        return "zombie";
    default:
        return "?";
    }
}

/* Stopped or in D: what /proc says, for any job. */
static int judge_state(const struct dt_agent_watch *w, int n, double now,
                       const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    for (int i = 0; i < n; i++) {
        char st = w[i].state;
        double in_state = now - w[i].state_since_s;
        if ((st == 'T' || st == 't' || (st == 'D' && !l->heartbeats)) && in_state >= l->hb_timeout) {
            snprintf(why, size, "in process state %c (%s) for %.1f s (heartbeat_timeout %g s)", st,
                     state_words(st), in_state, l->hb_timeout);
            return i;
        }
    }
    return -1;
}

/* Silence: no heartbeat for hb_timeout, or none at all since the start. */
static int judge_silence(const struct dt_agent_watch *w, int n, double now,
                         const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    for (int i = 0; i < n; i++) {
        if (w[i].has_hb && w[i].hb_age_s >= l->hb_timeout) {
            snprintf(why, size, "silent for %.1f s: no heartbeat (heartbeat_timeout %g s); last step %lld",
                     w[i].hb_age_s, l->hb_timeout, (long long)w[i].step);
            return i;
        }
        if (!w[i].has_hb && now - w[i].spawn_s >= l->first_hb_s) {
            snprintf(
                why, size,
                "without a heartbeat in the %.1f s since it started (rendezvous.timeout + heartbeat_timeout)",
                now - w[i].spawn_s);
            return i;
        }
    }
    return -1;
}

/* A step that stays below another rank's while it does not move. */
static int judge_stall(const struct dt_agent_watch *w, int n, double now,
                       const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    int ahead = -1;
    for (int i = 0; i < n; i++)
        if (w[i].has_hb && (ahead < 0 || w[i].step > w[ahead].step))
            ahead = i;
    for (int i = 0; ahead >= 0 && i < n; i++) {
        if (!w[i].has_hb || w[i].step >= w[ahead].step || w[i].behind_since_s <= 0 ||
            now - w[i].behind_since_s < l->hb_timeout || now - w[i].step_since_s < l->hb_timeout)
            continue;
        snprintf(why, size,
                 "stuck at step %lld for %.1f s while rank %d reached step %lld (heartbeat_timeout %g s)",
                 (long long)w[i].step, now - w[i].step_since_s, l->first_rank + ahead,
                 (long long)w[ahead].step, l->hb_timeout);
        return i;
    }
    return -1;
}

int dt_agent_watch_judge(const struct dt_agent_watch *w, int n, double now,
                         const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    int i = judge_state(w, n, now, l, why, size);
    if (i < 0 && l->heartbeats)
        i = judge_silence(w, n, now, l, why, size);
    if (i < 0 && l->heartbeats)
        i = judge_stall(w, n, now, l, why, size);
    return i;
}

/* T or t outrank D; anything else counts as nothing to report. */
static int badness(char s)
{
    return s == 'T' || s == 't' ? 2 : s == 'D' ? 1 : 0;
}

/* One pass over /proc: the worst state in each running rank's process group,
 * and the CPU time the group has used (clock ticks). */
static void scan_states(struct dt_agent *a, char *worst, long long *ticks)
{
    for (int i = 0; i < a->nproc; i++) {
        worst[i] = 0;
        ticks[i] = 0;
    }
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        struct dt_proc_stat ps;
        if (dt_proc_stat_read(de->d_name, &ps) != 0)
            continue;
        for (int i = 0; i < a->nproc; i++) {
            if (!a->procs[i].running || a->procs[i].pid != ps.pgrp)
                continue;
            ticks[i] += ps.cpu_ticks;
            if (badness(ps.state) > badness(worst[i]))
                worst[i] = ps.state;
        }
    }
    closedir(d);
}

void dt_agent_watchdog_begin(struct dt_agent *a)
{
    double hbt = a->cfg->job->rendezvous.heartbeat_timeout_s;
    a->next_watch = hbt > 0 && !a->group ? dt_clock_s() + DT_AGENT_WATCH_PERIOD_S : 0;
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *w = &a->procs[i].watch;
        memset(w, 0, sizeof *w);
        w->spawn_s = a->t0 + a->res->attempts[a->attempt].ranks[i].spawn_s;
        w->step_since_s = w->spawn_s;
    }
}

static bool heartbeats(const struct dt_agent *a)
{
    return a->cfg->heartbeat && a->cfg->job->trainer;
}

/* A heartbeat counts when it came during this attempt: older ones are the
 * previous round's, still in the coordinator's table.  Returns the source's
 * error other than "none yet" (the coordinator cannot be reached), or 0. */
static int read_heartbeat(struct dt_agent *a, int i, double now, double attempt_start, bool use)
{
    struct dt_agent_watch *w = &a->procs[i].watch;
    int64_t step;
    double age;
    int rc = a->cfg->heartbeat(a->cfg->heartbeat_ctx, a->procs[i].rank, &step, &age);
    if (rc != 0)
        return rc == DT_ENOTFOUND ? 0 : rc;
    if (!use || age >= now - attempt_start)
        return 0;
    if (!w->has_hb || step != w->step)
        w->step_since_s = now;
    w->has_hb = true;
    w->step = step;
    w->hb_age_s = age;
    return 0;
}

/* The coordinator is unreachable once its heartbeat source has failed for
 * rendezvous.timeout: the ranks' own clients give up after as long. */
static int coordinator_check(struct dt_agent *a, int err, double now, char *why, size_t size)
{
    if (err == 0) {
        a->coord_down_since = 0;
        return -1;
    }
    if (a->coord_down_since <= 0)
        a->coord_down_since = now;
    double down = now - a->coord_down_since, limit = a->cfg->job->rendezvous.timeout_s;
    if (down < limit)
        return -1;
    snprintf(why, size, "the coordinator %s:%d has not answered for %.1f s (rendezvous.timeout %g s): %s",
             a->cfg->master_addr, a->cfg->master_port, down, limit, dt_error_last());
    return DT_AGENT_COORD_LOST;
}

/* An exited rank must not look "ahead"; the others get behind_since_s. */
static void mark_behind(struct dt_agent *a, struct dt_agent_watch *w, double now)
{
    int64_t max = INT64_MIN;
    for (int i = 0; i < a->nproc; i++) {
        if (!a->procs[i].running)
            w[i].has_hb = false;
        if (w[i].has_hb && w[i].step > max)
            max = w[i].step;
    }
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *pw = &a->procs[i].watch;
        if (!w[i].has_hb || w[i].step >= max)
            pw->behind_since_s = 0;
        else if (pw->behind_since_s <= 0)
            pw->behind_since_s = now;
        w[i].behind_since_s = pw->behind_since_s;
    }
}

int dt_agent_watchdog_tick(struct dt_agent *a, char *why, size_t size)
{
    double now = dt_clock_s();
    if (a->next_watch <= 0 || now < a->next_watch)
        return -1;
    a->next_watch = now + DT_AGENT_WATCH_PERIOD_S;
    char worst[a->nproc];
    long long ticks[a->nproc];
    scan_states(a, worst, ticks);
    struct dt_agent_watch w[a->nproc];
    double attempt_start = a->t0 + a->res->attempts[a->attempt].start_s;
    const struct dt_rendezvous_spec *rv = &a->cfg->job->rendezvous;
    struct dt_agent_watch_limits l = {.hb_timeout = rv->heartbeat_timeout_s,
                                      .first_hb_s = rv->timeout_s + rv->heartbeat_timeout_s,
                                      .heartbeats = heartbeats(a),
                                      .first_rank = a->procs[0].rank};
    int err = 0;
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *pw = &a->procs[i].watch;
        /* D counts only while the group makes no progress: I/O-bound work
         * passes through D all the time, and still uses some CPU. */
        if (worst[i] != pw->state || (worst[i] == 'D' && ticks[i] != a->procs[i].cpu_ticks))
            pw->state_since_s = now;
        a->procs[i].cpu_ticks = ticks[i];
        pw->state = worst[i];
        /* Command ranks send no heartbeat: one read still tells whether the coordinator answers. */
        if (a->cfg->heartbeat && !err && (l.heartbeats ? a->procs[i].running : i == 0))
            err = read_heartbeat(a, i, now, attempt_start, l.heartbeats);
        w[i] = *pw;
        if (!a->procs[i].running) /* exited ones are the supervision loop's business */
            w[i] = (struct dt_agent_watch){.spawn_s = now, .step_since_s = now, .state_since_s = now};
    }
    if (coordinator_check(a, err, now, why, size) == DT_AGENT_COORD_LOST)
        return DT_AGENT_COORD_LOST;
    if (l.heartbeats)
        mark_behind(a, w, now);
    return dt_agent_watch_judge(w, a->nproc, now, &l, why, size);
}
