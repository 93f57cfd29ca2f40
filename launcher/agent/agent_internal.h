/* agent_internal.h - what the supervisor's files share (not a public interface).
 *
 * agent_supervise.c runs the poll loop on struct dt_agent and feeds events
 * to its state machine (agent_state.h), which agent_procs.c acts on;
 * agent_policy.c says which failure of an attempt is its first and whether
 * it is final; agent_procs.c starts the processes, signals them and moves
 * their output, agent_console.c shows it; agent_requeue.c passes a time
 * limit's signal on or stops for a requeue; agent_guard.c is what runs between the agent and each rank;
 * agent_watchdog.c looks at them from outside; agent_plan.c, agent_summary.c
 * and agent_node.c do what comes before and after.  The rounds with other
 * nodes reach dt_agent_run only through its hooks (agent_rounds.h).  Names
 * carry dt_agent__.  Nothing outside launcher/agent/ includes this.
 */
#ifndef DT_AGENT_INTERNAL_H
#define DT_AGENT_INTERNAL_H

#include "launcher/agent/agent.h"
#include "launcher/agent/agent_state.h"
#include "launcher/report/report_progress.h"
#include "base/lines.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

/* One pipe from a process the agent started. */
struct dt_agent__stream {
    int fd; /* read end; -1 once at end of file */
    bool is_err;
    struct dt_lines lb;
    double last_read; /* when it last gave bytes (CLOCK_MONOTONIC s): a partial line waits from then */
};

/* A line that waits this long for its end is shown as far as it has come
 * (a prompt, a progress bar without \r, a print(..., end="")). */
#define DT_AGENT__PARTIAL_S 0.1

/* One console (the agent's stdout or stderr) and the line left open on it:
 * state is 0 (none), or a rank's line shown as far as it came (1) or ended
 * by \r (2), owner's stream is_err (agent_console.c). */
struct dt_agent__con {
    const struct dt_agent__sink *owner;
    bool is_err;
    int state;
};

/* The agent's two consoles (agent_console.c): where the ranks' shown lines
 * and dtrain's own go, and the line left open on each. */
struct dt_agent__console {
    int out_fd, err_fd;
    bool broken;                  /* the console went away (EPIPE): keep logging to files only */
    struct dt_agent__con line[2]; /* out_fd's and err_fd's open line; [0] for both when shared */
    bool shared;                  /* out_fd and err_fd are one file (a terminal) */
    int log_con;                  /* the line that dt_log's stderr is, or -1 */
    char host[256];               /* this host's name, for ${hostname} in console.line_prefix */
};

/* Where one rank's output goes: its log files, the console, its stderr tail. */
struct dt_agent__sink {
    int rank;                  /* global rank */
    int log_fd[2];             /* attempt_<k>/rank_<n>.out and .err; -1 when closed */
    bool continuing[2];        /* the start of a line that is not finished was handed on */
    unsigned char shown;       /* DT_STD_OUT | DT_STD_ERR: the streams the console gets (agent_console.c) */
    char prefix[DT_AGENT_PREFIX_MAX]; /* its console lines' prefix (dt_agent_line_prefix) */
    size_t prefix_len;
    struct dt_agent_tail tail; /* stderr, for the failure report */
};

/* Why a failure may be an attempt's first (agent_policy.c), lightest first;
 * DT_AGENT__CAUSE_WINDOW_S (agent_state.h) says for how long after the first. */
enum dt_agent__cause { DT_AGENT__CAUSE_OTHER, DT_AGENT__CAUSE_SIGNAL, DT_AGENT__CAUSE_LISTED };

/* The attempt's first failure so far, as agent_policy.c elects it. */
struct dt_agent__first {
    enum dt_agent__cause cause; /* its cause */
    long long oom_base;         /* the cgroup's OOM kill count when the attempt started, -1: unknown */
    int oom_verdict;            /* for the first failure: see dt_agent_failure.oom_killer */
};

/* The watchdog's own time (agent_watchdog.c). */
struct dt_agent__watchdog {
    double next;             /* when it looks next; 0: it is off */
    double coord_down_since; /* when the heartbeat source started failing; 0: it answers */
};

/* A process the agent started: a rank (index: its entry in sinks and in each
 * attempt's ranks), or a group's one process (index -1, rank -1). */
struct dt_agent__proc {
    int index, rank;
    pid_t pid;     /* the rank's (or the group's process's); 0 before spawn */
    pid_t guard;   /* its guard (agent_guard.c), the agent's child; 0 once reaped */
    int status_fd; /* the guard's status pipe: the rank's wait status; -1 when closed */
    bool running;
    struct dt_agent__stream out, err;
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
    struct dt_agent__proc *procs;
    struct dt_agent__sink *sinks;
    int own_log;        /* a group's own lines: attempt_<k>/<log_name>, -1 when closed */
    int group_wstatus;  /* how a group's process ended this attempt */
    int group_failed;   /* a group's attempt that failed with no rank named: its exit status, else 0 */
    bool group_stopped; /* SIGTERM went to the group's process this attempt */
    struct dt_agent__console con;
    int null_fd;          /* /dev/null, the ranks' stdin */
    struct rlimit nofile; /* RLIMIT_NOFILE as the launcher found it, for the ranks */
    char *scratch;        /* one formatted console line */
    char *readbuf;
    size_t readbuf_size;
    struct pollfd *pfds;
    struct dt_agent__stream **pfd_stream; /* what each pollfd reads, and whose it is */
    struct dt_agent__proc **pfd_proc;
    double t0; /* cfg->start_mono, or when dt_agent_run started */
    int attempt;
    int running;                      /* processes of this attempt not yet reaped */
    struct dt_agent__sm sm;           /* where the attempt and the job stand (agent_state.h) */
    struct dt_agent__first first;     /* the election of the attempt's first failure (agent_policy.c) */
    struct dt_progress *progress;     /* the live progress line, NULL when off */
    struct dt_agent__watchdog wd;     /* the watchdog's timers (agent_watchdog.c) */
    struct dt_agent__rows *rows;      /* the ranks' progress rows this attempt (agent_progress.c), or NULL */
    double next_hook_poll;            /* when cfg->hooks->poll runs next */
    struct sigaction saved_xfsz;      /* SIGXFSZ as found; the agent ignores it while it runs */
};

/* --- agent_policy.c ------------------------------------------------------ */

/* What rank r's failure weighs in the election of the attempt's first failure. */
enum dt_agent__cause dt_agent__cause(const struct dt_agent *a, const struct dt_agent_rank_result *r);
/* Whether rank i's failure, of `cause`, is the first failure rather than the
 * one elected so far (the attempt's first_failed, of a->first.cause). */
bool dt_agent__outranks(const struct dt_agent *a, int i, enum dt_agent__cause cause);
/* How an attempt failed, as an exit status: its first failed rank's, or a
 * group's process's when no rank said it failed; -1 when it did not fail. */
int dt_agent__failure_status(const struct dt_agent *a, const struct dt_agent_attempt *at);
/* restart_policy: is the current attempt's failure one the spec says not to
 * retry?  If so, says which rule decided and marks first_failure final. */
bool dt_agent__final_by_policy(struct dt_agent *a);

/* --- agent_procs.c ------------------------------------------------------- */

/* Allocates a's processes, sinks and buffers for cfg (and raises the file
 * descriptor limit they need); dt_agent__free undoes it. */
int dt_agent__init(struct dt_agent *a, const struct dt_agent_config *cfg, struct dt_agent_result *res);
void dt_agent__free(struct dt_agent *a);
/* Opens a rank's attempt_<k>/rank_<n>.{out,err} (appending after a mark
 * when a rerun finds them) and resets its console state and tail. */
int dt_agent__open_logs(struct dt_agent__sink *k, const char *attempt_dir);
/* Forks p's guard, which forks p running cfg->argv with p->env, its stdout
 * and stderr on pipes; p->pid is the rank's, p->guard the guard's. */
int dt_agent__spawn(struct dt_agent *a, struct dt_agent__proc *p);
/* Reads the rank's wait status from its guard's status pipe: 1 with
 * *wstatus set, 0 when none is there (yet, or any more). */
int dt_agent__guard_status(struct dt_agent__proc *p, int *wstatus);
/* Sends sig to every rank's process group (the ranks and what they
 * started); a group's process gets one SIGTERM for any stop, and SIGKILL
 * to its process group. */
void dt_agent__signal_groups(struct dt_agent *a, int sig);
/* Sends sig to what the ranks left behind (orphans re-parented to their
 * guards, or to the agent as subreaper: children that are neither ranks nor
 * guards) and to their process groups; returns how many. */
int dt_agent__signal_leftovers(struct dt_agent *a, int sig);
/* Feeds event e (with arg: agent_state.h) to a->sm and does what the step
 * asks: signals the ranks and what they left, counts and says a sweep, says
 * the give-up.  Keeps the attempt's `electing` true while it settles. */
void dt_agent__event(struct dt_agent *a, enum dt_agent__event e, int arg);
/* Closes every pipe and log file of the attempt and forgets the pids. */
void dt_agent__close_attempt(struct dt_agent *a);
/* Reads what a stream has, writes it to the log files and the console; at end
 * of file closes the pipe.  Returns bytes read, 0 at end of file. */
ssize_t dt_agent__pump(struct dt_agent *a, struct dt_agent__proc *p, struct dt_agent__stream *s);

/* Reads, for every rank's stream with part of a line pending for
 * DT_AGENT__PARTIAL_S, what has come and shows it; returns how many ms
 * until the next such stream is due, -1 when none waits. */
int dt_agent__pump_partial(struct dt_agent *a, double now);

/* --- agent_requeue.c ----------------------------------------------------- */

/* sig says a time limit is near: passes it on to the processes that catch it
 * when every rank has one, or stops the ranks for a requeue (exit status
 * DT_AGENT_EXIT_REQUEUE). */
void dt_agent__notice_signal(struct dt_agent *a, int sig);

/* --- agent_console.c ----------------------------------------------------- */

/* Whether stdout and stderr are one file (they then share an open line),
 * and which is dt_log's (its hook ends an open line there, until
 * dt_agent__free). */
void dt_agent__console_init(struct dt_agent *a);
/* For k at local_rank: k->shown (the filter, console.redirects and
 * console.tee) and k->prefix (console.line_prefix). */
void dt_agent__console_streams(struct dt_agent *a, struct dt_agent__sink *k, int local_rank);
/* A piece of k's stream as dt_lines hands it over (end: its lb.end): the
 * stderr tail, and the console if the stream is shown there. */
void dt_agent__console_piece(struct dt_agent *a, struct dt_agent__sink *k, bool is_err, const char *line,
                             size_t len, char end);
/* Ends the line k's stream left open on the console (its end of file). */
void dt_agent__console_end(struct dt_agent *a, const struct dt_agent__sink *k, bool is_err);
/* Ends every open line (the progress line is drawn next, the attempt is over). */
void dt_agent__console_settle(struct dt_agent *a);
/* A whole line of the agent's own (a group's process's): after any open line. */
void dt_agent__console_line(struct dt_agent *a, bool is_err, const char *buf, size_t len);

/* --- agent_guard.c ------------------------------------------------------- */

/* The guard's whole life, in the child the agent forked with every signal
 * blocked (agent_guard.c): forks the rank with out_w and err_w as its stdout
 * and stderr, reports its pid and wait status on status_w, reaps what it
 * leaves, and kills all of it when the agent dies. */
_Noreturn void dt_agent__guard_run(const struct dt_agent *a, const struct dt_agent__proc *p, pid_t agent,
                                   int out_w, int err_w, int status_w);

/* --- agent_watchdog.c ---------------------------------------------------- */

#define DT_AGENT__WATCH_PERIOD_S 0.5 /* how often the watchdog looks */
#define DT_AGENT__COORD_LOST (-2)    /* dt_agent__watchdog_tick: the coordinator is gone */
/* Arms the watchdog for the attempt just spawned (off when heartbeat_timeout
 * is 0, and for a group: its ranks are not this agent's to look at). */
void dt_agent__watchdog_begin(struct dt_agent *a);
/* Looks at every running rank once its period is due; returns the local index
 * of a hung rank (with the reason in why), -1, or DT_AGENT__COORD_LOST when
 * the coordinator has been unreachable for rendezvous.timeout. */
int dt_agent__watchdog_tick(struct dt_agent *a, char *why, size_t size);
/* Writes what can be seen of every rank (states, wchan, kernel stacks, last
 * log lines) to attempt_<k>/hang_rank_<n>.txt; path gets the file's name. */
int dt_agent__watchdog_capture(struct dt_agent *a, int hung, const char *why, char *path, size_t size);
/* The OOM kills counted by this process's memory cgroup so far (cgroup v2 or v1). */
int dt_agent__oom_count(long long *count);

/* Asks the Python threads' tracebacks (faulthandler) of every rank that
 * catches DT_AGENT_TRACEBACK_SIGNAL, waits for them briefly, and appends
 * them to the hang report at `report`; out gets the start of the hung
 * rank's ("" when it gave none). */
void dt_agent__watchdog_tracebacks(struct dt_agent *a, int hung, const char *report, char *out, size_t size);

/* --- agent_progress.c ---------------------------------------------------- */

struct dt_agent__rows;
/* Whether this job's ranks are read for progress rows (command: jobs, not a group's). */
bool dt_agent__rows_wanted(const struct dt_agent *a);
/* Starts reading the new attempt's rows files (a->rows); 0 when none are wanted. */
int dt_agent__rows_begin(struct dt_agent *a);
/* Reads what the files gained (1 MiB a rank at most), at most every 0.1 s. */
void dt_agent__rows_poll(struct dt_agent *a);
/* Local rank i's last row: its step and when it was read (agent's clock);
 * DT_ENOTFOUND when it wrote none, or paused since. */
int dt_agent__rows_heartbeat(const struct dt_agent *a, int i, int64_t *step, double *last_s);
/* Reads the last rows and closes the attempt's files, metrics.jsonl and TensorBoard's. */
void dt_agent__rows_end(struct dt_agent *a);

/* --- agent_plan.c -------------------------------------------------------- */

/* nproc_per_node, with `gpu` resolved to the GPUs this process may use. */
int dt_agent__plan_nproc(const struct dt_job *job, int *nproc);
/* The spec's command exists here (on PATH, or the path is executable). */
int dt_agent__plan_check_command(const struct dt_job *job);
/* Logs env: entries dtrain overrides and the OMP_NUM_THREADS default. */
void dt_agent__plan_say_env(const struct dt_job *job, int nproc);

/* --- agent_summary.c ----------------------------------------------------- */

/* Writes <run dir>/summary.json through a temporary file and rename(2), so a
 * reader never sees half of it. */
int dt_agent__write_summary(const struct dt_agent_config *cfg, const struct dt_agent_result *res,
                            const char *path);
/* The failure report for the console: which rank failed first, how, and the
 * last lines of its stderr. */
void dt_agent__print_failure(const struct dt_agent_config *cfg, const struct dt_agent_result *res);
/* The run's closing line: succeeded, interrupted or failed, and where the logs are. */
void dt_agent__print_outcome(const struct dt_agent_config *cfg, const struct dt_agent_result *res);

#endif
