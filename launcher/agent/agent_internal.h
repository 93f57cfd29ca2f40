/* agent_internal.h - what the agent's files share (not a public interface).
 *
 * agent_supervise.c runs the poll loop on struct dt_agent; agent_policy.c
 * says which failure of an attempt is its first and whether it is final;
 * agent_procs.c starts its processes, signals them and moves their output;
 * agent_guard.c is what runs between the agent and each rank;
 * agent_watchdog.c looks at them from outside; agent_rounds.c keeps a node in
 * step with the others (agent_hb_relay.c relays heartbeats to them);
 * agent_plan.c, agent_summary.c and agent_node.c do what comes before and
 * after.  Names carry dt_agent__.
 * Nothing outside launcher/agent_*.c includes this.
 */
#ifndef DT_AGENT_INTERNAL_H
#define DT_AGENT_INTERNAL_H

#include "launcher/agent/agent.h"
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
};

/* Where one rank's output goes: its log files, the console, its stderr tail. */
struct dt_agent__sink {
    int rank;                  /* global rank */
    int log_fd[2];             /* attempt_<k>/rank_<n>.out and .err; -1 when closed */
    bool continuing[2];        /* the console got the start of a line that is not finished */
    struct dt_agent_tail tail; /* stderr, for the failure report */
};

/* Why a failure may be an attempt's first (agent_policy.c), lightest first,
 * and how long after the first failure another may still be elected. */
enum dt_agent__cause { DT_AGENT__CAUSE_OTHER, DT_AGENT__CAUSE_SIGNAL, DT_AGENT__CAUSE_LISTED };
#define DT_AGENT__CAUSE_WINDOW_S 1.0

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
    int out_fd, err_fd;
    bool console_broken;  /* the console went away (EPIPE): keep logging to files only */
    int null_fd;          /* /dev/null, the ranks' stdin */
    struct rlimit nofile; /* RLIMIT_NOFILE as the launcher found it, for the ranks */
    char *scratch;        /* one formatted console line */
    char *readbuf;
    size_t readbuf_size;
    struct pollfd *pfds;
    struct dt_agent__stream **pfd_stream; /* what each pollfd reads, and whose it is */
    struct dt_agent__proc **pfd_proc;
    double t0; /* cfg->start_mono, or when dt_agent_run started */
    double grace_s;
    int attempt;
    int running;                  /* processes of this attempt not yet reaped */
    bool stopping;                /* SIGTERM (or the forwarded signal) sent to every rank */
    bool killing;                 /* SIGKILL sent */
    double kill_at;               /* when `stopping` turns into SIGKILL */
    double killed_at;             /* when SIGKILL was sent */
    double settle_until;          /* after a failure, SIGTERM waits till then for peers to exit; 0: none */
    enum dt_agent__cause first_cause; /* the first failure's, so far (agent_policy.c) */
    bool swept;                   /* looked for processes the ranks left behind */
    long long oom_base;           /* the cgroup's OOM kill count when the attempt started, -1: unknown */
    int oom_verdict;              /* for the first failure: see dt_agent_failure.oom_killer */
    int interrupt_sig;            /* a signal the launcher received, 0 if none */
    int stop_sig;                 /* the signal `stopping` sent (SIGTERM or the forwarded one) */
    bool requeue_asked;           /* SIGUSR1 came and was passed on: ranks may exit DT_AGENT_EXIT_REQUEUE */
    int requeue_exits;            /* ranks of this attempt that did */
    struct dt_progress *progress; /* the live progress line, NULL when off */
    double next_watch;            /* when the watchdog looks next; 0: it is off */
    double coord_down_since;      /* when the heartbeat source started failing; 0: it answers */
    double next_hook_poll;        /* when cfg->hooks->poll runs next */
    int abort_status;             /* a hook (or a log write error) ended the job with this status, -1 if not */
    bool write_failed;            /* res->write_error was acted on */
    struct sigaction saved_xfsz;  /* SIGXFSZ as found; the agent ignores it while it runs */
    int job_status;               /* a hook's attempt_end decided the job's status, -1 if not */
};

/* --- agent_policy.c ------------------------------------------------------ */

/* What rank r's failure weighs in the election of the attempt's first failure. */
enum dt_agent__cause dt_agent__cause(const struct dt_agent *a, const struct dt_agent_rank_result *r);
/* Whether rank i's failure, of `cause`, is the first failure rather than the
 * one elected so far (the attempt's first_failed, of a->first_cause). */
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
/* Closes every pipe and log file of the attempt and forgets the pids. */
void dt_agent__close_attempt(struct dt_agent *a);
/* Reads what a stream has, writes it to the log files and the console; at end
 * of file closes the pipe.  Returns bytes read, 0 at end of file. */
ssize_t dt_agent__pump(struct dt_agent *a, struct dt_agent__proc *p, struct dt_agent__stream *s);

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

/* --- agent_rounds.c ------------------------------------------------------ */

/* One node of a multi-node job: its agent's link to the others through the
 * coordinator's store (membership, the round counter, the first failure). */
struct dt_agent__round;

struct dt_agent__round_config {
    const struct dt_job *job;
    int node_rank, nnodes, nproc;
    const char *coord_host; /* how this agent reaches the coordinator */
    int coord_port;
    const char *token; /* NULL with auth: none */
    double timeout_s;  /* rendezvous.timeout: connecting, every node joining */
    double liveness_s; /* once every node joined: each store call's deadline, and how long a
                          connection may go unacknowledged (dt_store_set_liveness) */
    double grace_s;
    struct dt_coord *coord; /* node 0: the coordinator it hosts (heartbeats to relay), else NULL */
    int nnodes_min;         /* below nnodes: an elastic job, node_rank 0 or -1 (agent_elastic.c) */
};

#define DT_AGENT__MAX_ROUNDS 1024

struct dt_agent__elastic;
struct dt_store_member;
struct dt_agent__hb_relay;
struct dt_store;

struct dt_agent__round {
    struct dt_agent__round_config cfg; /* an elastic job's node_rank: its slot (agent_elastic.c) */
    struct dt_store *store;
    char coord[300]; /* host:port, for messages */
    bool dead;       /* the coordinator is gone: nothing more is asked of it */
    bool published[DT_AGENT__MAX_ROUNDS];
    bool told_stop;
    bool verdict; /* the job failed by fail/<k>, which every node reads alike (decide): no abort */
    struct dt_agent__hb_relay *hb; /* heartbeats: node 0 relays them, the others read them */
    struct dt_agent_lost_node lost; /* node 0: the member whose loss ended the job (or round); node -1 */
    double lost_unix;               /* when the coordinator noticed, wall clock */
    struct dt_agent__elastic *el;   /* an elastic job's rounds; NULL otherwise */
};

/* Shared with agent_elastic.c: a store call failed (the coordinator is
 * gone: says so once, *status 1, ABORT); a key's presence (1, 0, or a
 * negative code); its text; dtrain/abort (1 and said, with *status, when
 * it is there); another node's failure of round k into res for node 0's
 * summary; heartbeats relayed (node 0) as node `node` of `nnodes`. */
enum dt_agent_verdict dt_agent__round_lost_coordinator(struct dt_agent__round *r, int *status);
int dt_agent__round_exists(struct dt_agent__round *r, const char *k);
int dt_agent__round_get_text(struct dt_agent__round *r, const char *k, char *out, size_t n);
int dt_agent__round_aborted(struct dt_agent__round *r, int *status);
void dt_agent__round_read_failinfo(struct dt_agent__round *r, struct dt_agent_result *res, int k, int from);
void dt_agent__round_hb_place(struct dt_agent__round *r, int node, int nnodes);
int dt_agent__round_relay(struct dt_agent__round *r);

/* --- agent_hb_relay.c: heartbeats relayed from node 0 to the others ------- */

/* The relay of node `node` of `nnodes` with nproc ranks each; NULL when out
 * of memory.  dt_agent__hb_relay writes every other node's key (node 0, at
 * most every RELAY_S; 0 elsewhere).  dt_agent__round_hb_place,
 * dt_agent__round_relay and dt_agent__round_heartbeat (agent.h's hook) are
 * defined there too. */
struct dt_agent__hb_relay *dt_agent__hb_new(int node, int nnodes, int nproc);
void dt_agent__hb_free(struct dt_agent__hb_relay *h);
int dt_agent__hb_relay(struct dt_agent__hb_relay *h, struct dt_store *s, struct dt_coord *c);
/* Node 0: keeps m, a lost member, as summary.json's lost_node in the
 * coordinator's words (how its connection ended: closed, or unacknowledged
 * for liveness_s) when it is the first; true if it was kept. */
bool dt_agent__round_keep_lost(struct dt_agent__round *r, const struct dt_store_member *m);

/* --- agent_elastic.c: the rounds of an elastic job (nodes: MIN:MAX) ------ */

/* Joins: node 0 as slot 0, the others into the slot the coordinator gives. */
int dt_agent__elastic_open(struct dt_agent__round *r, int nodes_min);
void dt_agent__elastic_free(struct dt_agent__round *r);
/* The hooks' parts (agent.h) when r->el is set. */
int dt_agent__elastic_begin(void *ctx, int *attempt, int sig_fd, struct dt_agent_place *place, int *status);
enum dt_agent_verdict dt_agent__elastic_poll(struct dt_agent__round *r, const struct dt_agent_result *res, int k,
                                             int *status);
int dt_agent__elastic_attempt_end(struct dt_agent__round *r, struct dt_agent_result *res, int k, int sig_fd,
                                  bool *restart, int *status);

/* Connects (retrying until timeout_s) and joins as cfg->node_rank; a
 * coordinator that cannot be reached is an error naming host:port. */
int dt_agent__round_open(const struct dt_agent__round_config *cfg, struct dt_agent__round **out);
/* The run id every node uses: run_id as given (node 0 publishes it), or
 * node 0 makes one and the others read it. */
int dt_agent__round_run_id(struct dt_agent__round *r, char *run_id, size_t n);
/* Returns when all nnodes nodes joined; an error naming the missing ones
 * after rendezvous.timeout. */
int dt_agent__round_wait_all(struct dt_agent__round *r);
/* The hooks that make dt_agent_run restart in step with the other nodes. */
void dt_agent__round_hooks(struct dt_agent__round *r, struct dt_agent_hooks *h);
/* Ends the job everywhere with `status` (the first abort stands). */
int dt_agent__round_abort(struct dt_agent__round *r, int status, const char *why);
/* After dt_agent_run: passes an interruption or failure on to the other
 * nodes, then leaves (node 0 first waits, bounded, for the others to go).
 * The others publish their ranks' records before they leave; node 0 adds
 * them to res (attempts[k].others) for its summary.json. */
void dt_agent__round_finish(struct dt_agent__round *r, struct dt_agent_result *res);
void dt_agent__round_close(struct dt_agent__round *r);
/* The watchdog's heartbeat source on a node other than 0 (agent.h's
 * dt_agent_config.heartbeat): `rank`'s step and age as node 0 relays them. */
int dt_agent__round_heartbeat(struct dt_agent__round *r, int rank, int64_t *step, double *age_s);

#endif
