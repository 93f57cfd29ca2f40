/* agent_internal.h - state shared by the agent's files (not a public interface).
 *
 * agent_spawn.c starts ranks and signals process groups, agent_supervise.c
 * runs the poll loop and the failure policy, agent_console.c moves output.
 * Nothing outside launcher/agent_*.c includes this.
 */
#ifndef DT_AGENT_INTERNAL_H
#define DT_AGENT_INTERNAL_H

#include "launcher/agent.h"
#include "launcher/report_progress.h"
#include "base/lines.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/types.h>

/* One pipe from a process the agent started. */
struct dt_agent_stream {
    int fd; /* read end; -1 once at end of file */
    bool is_err;
    struct dt_lines lb;
};

/* Where one rank's output goes: its log files, the console, its stderr tail. */
struct dt_agent_sink {
    int rank;                  /* global rank */
    int log_fd[2];             /* attempt_<k>/rank_<n>.out and .err; -1 when closed */
    bool continuing[2];        /* the console got the start of a line that is not finished */
    struct dt_agent_tail tail; /* stderr, for the failure report */
};

/* A process the agent started: a rank (index: its entry in sinks and in each
 * attempt's ranks), or a group's one process (index -1, rank -1). */
struct dt_agent_proc {
    int index, rank;
    pid_t pid; /* 0 before spawn */
    bool running;
    struct dt_agent_stream out, err;
    char **env;
    struct dt_agent_watch watch; /* what the watchdog last saw of it */
    long long cpu_ticks;         /* CPU time its process group had used at the last look */
};

struct dt_agent {
    const struct dt_agent_config *cfg;
    struct dt_agent_result *res;
    const struct dt_adapter_group *group; /* cfg->group: one process stands for every rank */
    int nproc;                            /* processes: the ranks, or the group's one */
    int nranks;                           /* entries of sinks and of each attempt's ranks */
    struct dt_agent_proc *procs;
    struct dt_agent_sink *sinks;
    int own_log;          /* a group's own lines: attempt_<k>/<log_name>, -1 when closed */
    int group_wstatus;    /* how a group's process ended this attempt */
    int group_failed;     /* a group's attempt that failed with no rank named: its exit status, else 0 */
    bool group_stopped;   /* SIGTERM went to the group's process this attempt */
    int out_fd, err_fd;
    bool console_broken;  /* the console went away (EPIPE): keep logging to files only */
    int null_fd;          /* /dev/null, the ranks' stdin */
    struct rlimit nofile; /* RLIMIT_NOFILE as the launcher found it, for the ranks */
    char *scratch;        /* one formatted console line */
    char *readbuf;
    size_t readbuf_size;
    struct pollfd *pfds;
    struct dt_agent_stream **pfd_stream; /* what each pollfd reads, and whose it is */
    struct dt_agent_proc **pfd_proc;
    double t0; /* cfg->start_mono, or when dt_agent_run started */
    double grace_s;
    int attempt;
    int running;        /* ranks of this attempt not yet reaped */
    bool stopping;      /* SIGTERM (or the forwarded signal) sent to every rank */
    bool killing;       /* SIGKILL sent */
    double kill_at;     /* when `stopping` turns into SIGKILL */
    double killed_at;   /* when SIGKILL was sent */
    bool swept;         /* looked for processes the ranks left behind */
    long long oom_base; /* the cgroup's OOM kill count when the attempt started, -1: unknown */
    int oom_verdict;    /* for the first failure: see dt_agent_failure.oom_killer */
    int interrupt_sig;  /* a signal the launcher received, 0 if none */
    int stop_sig;       /* the signal `stopping` sent (SIGTERM or the forwarded one) */
    bool requeue_asked; /* SIGUSR1 came and was passed on: ranks may exit DT_AGENT_EXIT_REQUEUE */
    int requeue_exits;  /* ranks of this attempt that did */
    struct dt_progress *progress; /* the live progress line, NULL when off */
    double next_watch;            /* when the watchdog looks next; 0: it is off */
    double coord_down_since;      /* when the heartbeat source started failing; 0: it answers */
    double next_hook_poll;        /* when cfg->hooks->poll runs next */
    int abort_status;             /* a hook ended the job with this status, -1 if not */
    int job_status;               /* a hook's attempt_end decided the job's status, -1 if not */
};

/* agent_requeue.c: SIGUSR1 passed on to the ranks; whether a rank's exit is its
 * stop for a requeue (not a failure); the outcome when ranks stopped so. */
void dt_agent_requeue_signal(struct dt_agent *a);
bool dt_agent_requeue_exit(struct dt_agent *a, int wstatus);
bool dt_agent_requeue_outcome(struct dt_agent *a, const struct dt_agent_attempt *last);

/* agent_supervise.c: SIGTERM (or sig) to every rank, SIGKILL after the grace period. */
void dt_agent_start_stopping(struct dt_agent *a, int sig);

/* agent_hooks.c: runs cfg->hooks->poll when due and acts on its verdict. */
void dt_agent_hooks_poll(struct dt_agent *a);
/* The poll() timeout (ms) capped so the hook runs on time. */
int dt_agent_hooks_timeout(const struct dt_agent *a, int timeout);
/* After an attempt: 1 to restart, 0 to end the job, negative on error. */
int dt_agent_hooks_attempt_end(struct dt_agent *a, int sig_fd);

/* agent_spawn.c */
/* Opens a rank's attempt_<k>/rank_<n>.{out,err} (appending after a mark
 * when a rerun finds them) and resets its console state and tail. */
int dt_agent_open_logs(struct dt_agent_sink *k, const char *attempt_dir);
/* Forks p running cfg->argv with p->env, its stdout and stderr on pipes. */
int dt_agent_spawn(struct dt_agent *a, struct dt_agent_proc *p);
/* Sends sig to every rank's process group (the ranks and what they started). */
void dt_agent_signal_groups(struct dt_agent *a, int sig);
/* Sends sig to the agent's children that are not ranks (orphans re-parented to
 * the agent as subreaper) and to their process groups; returns how many. */
int dt_agent_signal_leftovers(struct dt_agent *a, int sig);
/* Closes every pipe and log file of the attempt and forgets the pids. */
void dt_agent_close_attempt(struct dt_agent *a);

/* agent_watchdog.c */
#define DT_AGENT_WATCH_PERIOD_S 0.5 /* how often the watchdog looks */
/* Arms the watchdog for the attempt just spawned (off when heartbeat_timeout is 0). */
void dt_agent_watchdog_begin(struct dt_agent *a);
/* Looks at every running rank once its period is due; returns the local index
 * of a hung rank (with the reason in why), -1, or DT_AGENT_COORD_LOST when
 * the coordinator has been unreachable for rendezvous.timeout. */
#define DT_AGENT_COORD_LOST (-2)
int dt_agent_watchdog_tick(struct dt_agent *a, char *why, size_t size);
/* Writes what can be seen of every rank (states, wchan, kernel stacks, last
 * log lines) to attempt_<k>/hang_rank_<n>.txt; path gets the file's name. */
int dt_agent_watchdog_capture(struct dt_agent *a, int hung, const char *why, char *path, size_t size);

/* agent_console.c */
/* Reads what a stream has, writes it to its log file and the console; at end of
 * file closes the pipe.  Returns bytes read, 0 at end of file. */
ssize_t dt_agent_pump(struct dt_agent *a, struct dt_agent_proc *p, struct dt_agent_stream *s);

#endif
