/* agent.h - the agent: forks the ranks of one node, supervises them, restarts
 * them; and one node's whole run of a job around it.
 *
 * The agent is the one place in dtrain that spawns and supervises worker
 * processes (docs/architecture.md).  Given a loaded job and where the
 * coordinator is, it forks the node's ranks with the torchrun-compatible
 * environment, copies their output line by line to the console (prefixed
 * "[rank N]") and in full to per-rank log files, stops the whole group when
 * one rank fails, restarts it up to max_restarts times, forwards
 * SIGINT/SIGTERM/SIGHUP/SIGQUIT, and leaves no process of the job behind,
 * even when it is killed with SIGKILL (a session per rank, and between the
 * agent and each rank a guard process that reaps what the rank leaves and
 * outlives the agent to kill it all).  Everything runs in one poll loop on
 * the calling thread: no thread per rank.
 *
 * One process may also stand for every rank (mpirun with backend: mpi, an
 * adapter's group): the agent then supervises it as it would a rank.
 *
 * dt_agent_node_run is a node's whole run of a job: the token, the
 * coordinator (node 0 hosts it), the restart rounds with the other nodes,
 * the run directory, dt_agent_run, summary.json and the closing lines; it is
 * `dtrain agent`, and `dtrain launch` as node 0 (an adapter's plan with host_node0, adapter.h).
 *
 * Files.  The supervisor (agent_internal.h): agent_supervise.c
 * (dt_agent_run: the loop, the hooks), agent_requeue.c (a time limit's
 * signal: passed on, or a stop for a requeue), agent_state.c (the attempt's
 * states, the events that move it, their deadlines, how the job ends),
 * agent_policy.c (which failure is first, whether restart_policy makes it
 * final), agent_procs.c (spawning, signalling, output), agent_console.c
 * (what of the output the console shows, and how), agent_guard.c (the
 * process between the agent and each rank), agent_progress.c (the progress
 * rows a user's script writes: the live line, metrics.jsonl, TensorBoard),
 * agent_watchdog.c (hangs, the OOM killer).  The rounds with the other nodes (agent_rounds.h): agent_rounds.c
 * (restart rounds and the hooks), agent_elastic.c (the rounds node 0 forms:
 * an elastic job's, nodes: MIN:MAX, and a fixed-size job's with restarts,
 * whose lost node a new agent replaces), agent_hb_relay.c (heartbeats relayed to the other
 * nodes), agent_link.c (the store connection and the records every round
 * reads), agent_records.c (every record's encoder and decoder).  Around
 * them: agent_node.c (one node's run, the refusal watch), agent_endpoint.c
 * (the ranks' store endpoint on loopback: the job's processes only, carried
 * to the coordinator over one connection with the token), agent_plan.c (rank
 * count, command, environment), agent_summary.c (summary.json, the failure
 * report, the closing line), agent_error_file.c (a rank's error report).
 *
 * Not for choosing nodes (the scheduler adapters and `dtrain agent`'s flags
 * do that), nor for parsing the job spec (spec/jobspec.h).
 *
 * The pure parts (the "[rank N]" prefix, the stderr tail, the environment,
 * the summary JSON, the watchdog's rule) are exported too, so unit tests
 * reach them without forking.
 */
#ifndef DT_AGENT_H
#define DT_AGENT_H

#include "base/args.h"
#include "scheduler-adapters/adapter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct dt_job;
struct dt_coord;
struct dt_agent_result;

/* Where this node stands in one round of an elastic job (begin_attempt). */
struct dt_agent_place {
    int node_rank, nnodes; /* GROUP_RANK and GROUP_WORLD_SIZE of the round */
    int restarts;          /* restarts after failures so far (TORCHELASTIC_RESTART_COUNT) */
};

/* What a hook's poll tells the agent while an attempt runs. */
enum dt_agent_verdict {
    DT_AGENT_GO_ON,
    DT_AGENT_STOP_ATTEMPT, /* another node's rank failed: stop this node's ranks; the attempt failed there */
    DT_AGENT_ABORT,        /* stop every rank and end the job with *status (the hook said why) */
};

/* Lets what is outside this node's ranks take part in the job's policy: the
 * node's run watching for refused PyTorch clients (agent_node.c), the
 * restart rounds of a multi-node job (agent_rounds.c).  Every member is
 * optional. */
struct dt_agent_hooks {
    void *ctx;
    double period_s; /* how often poll runs while ranks run; <= 0 means 0.1 s */
    /* From the supervise loop; *status is the job's exit status for ABORT. */
    enum dt_agent_verdict (*poll)(void *ctx, const struct dt_agent_result *res, int attempt, int *status);
    /* After attempt `attempt` ended on this node (its local failure, if any,
     * already in res->first_failure): decides, the same way on every node,
     * whether the job restarts (*restart) or ends with *status; may put
     * another node's failure in res->first_failure.  It must return promptly
     * (1, with *status unset) when sig_fd becomes readable: a signal to the
     * agent.  Returns 0, or a negative DT_E* code (the job ends, status 1). */
    int (*attempt_end)(void *ctx, struct dt_agent_result *res, int attempt, int sig_fd, bool *restart,
                       int *status);
    /* Rounds node 0 forms (agent_elastic.c: an elastic job's, a fixed-size
     * job's with restarts): before each attempt, waits until this node has a
     * place in a round and says which: *attempt (the round, at least the one
     * asked for; a late agent's or a lost node's replacement's first is the
     * job's current one), and place's node rank, node count and restarts
     * counted so far.  Returns 0 to run it, 1 when the job ended without
     * this node (*status its status; -1: a signal came on sig_fd), 2 when a
     * newer agent of this node holds its place (this one was cut off and
     * fenced out: it ends, status 1, and must not touch the job), or a
     * negative DT_E* code.  NULL: every node runs every attempt as it is
     * numbered. */
    int (*begin_attempt)(void *ctx, int *attempt, int sig_fd, struct dt_agent_place *place, int *status);
    /* A stop signal (SIGTERM, SIGINT, ...) reached this agent, before it is
     * passed on to the ranks: the other nodes must learn the job is being
     * stopped before they see this node's ranks vanish, or they take that for
     * their own ranks' failure and end with its status instead of 128 + sig. */
    void (*interrupted)(void *ctx, int sig);
    /* While the ranks are being stopped (poll does not run then: its
     * verdicts are moot), every second: the node shows it is alive, so
     * node 0's coordinator, which takes a member silent for a few seconds
     * for a stopped agent, does not lose it during a long grace period. */
    void (*keepalive)(void *ctx);
};

#define DT_AGENT_TAIL_LINES 10  /* stderr lines kept per rank for the failure summary */
#define DT_AGENT_TAIL_WIDTH 512 /* longer lines are cut in the summary (not in the logs) */
#define DT_AGENT_TRACEBACK_LINES 20 /* lines of an error report's traceback kept: its end */
/* SIGUSR1 to the agent (a scheduler's time limit is near) is passed on to the
 * ranks; a rank that then exits with this status (EX_TEMPFAIL) stopped after a
 * checkpoint to be requeued: no failure, no restart, and the agent exits with it. */
#define DT_AGENT_EXIT_REQUEUE 75
/* Membership changes an elastic job may go through (rounds beside its
 * max_restarts + 1); the round after the last is refused with a sentence. */
#define DT_AGENT_ELASTIC_ROUNDS 64

/* The line put in a rank's log before a later run's output when the run
 * directory is used again (a Slurm requeue keeps the job id as run id). */
#define DT_AGENT_LOG_RERUN_MARK                                                                              \
    "---- dtrain: the run directory was used again (a Slurm requeue or the same --run-id); this run's "      \
    "output follows ----"

struct dt_agent_config {
    const struct dt_job *job;
    const char *const *argv; /* the program each rank runs (job->command, or `dtrain worker`) */
    int node_rank;           /* this node: 0 .. nnodes-1 */
    int nnodes;
    int nproc; /* ranks on this node (nproc_per_node, resolved) */
    const char *run_id;
    const char *run_dir;     /* exists; attempt_<k>/ directories are made inside */
    const char *master_addr; /* the coordinator, as this node reaches it */
    int master_port;
    const char *token;                   /* job token, or NULL when rendezvous.auth is none */
    /* The ranks' store is this node's endpoint (agent_endpoint.h) on
     * 127.0.0.1:store_port, not the coordinator: MASTER_ADDR, MASTER_PORT and
     * DTRAIN_COORD_ADDR name it, and the ranks are not given the token, which
     * the endpoint presents for them. */
    bool endpoint;
    int store_port;
    double grace_s;                      /* SIGTERM to SIGKILL; <= 0: the job's grace_period */
    const unsigned char *console_ranks;  /* per global rank: 1 = show its output; NULL = all */
    int out_fd, err_fd;                  /* the console; both 0 mean STDOUT/STDERR_FILENO */
    double start_mono;                   /* CLOCK_MONOTONIC seconds when the launcher started (times in the
                                            summary count from it); 0 means when dt_agent_run starts */
    bool progress; /* a live progress line from run_dir/metrics.jsonl (report_progress.h) */
    /* The ranks' heartbeats, for the watchdog (agent_watchdog.c): rank's last
     * reported step and the seconds since it arrived; DT_ENOTFOUND if it sent
     * none; any other error means the coordinator cannot be reached, and after
     * rendezvous.timeout of that the agent stops the job for good (an agent on
     * another node outliving its coordinator would wait for ever).  Steps are
     * read only for trainer: jobs (their ranks send them).  NULL: the watchdog
     * judges by what /proc shows alone. */
    int (*heartbeat)(void *ctx, int rank, int64_t *step, double *age_s);
    void *heartbeat_ctx;
    /* Called before each restart, when no rank runs: gives the new attempt an
     * empty store at the same address (PyTorch's env:// rendezvous would
     * otherwise read the last attempt's keys, e.g. Gloo's peer addresses, as
     * torchrun avoids with a new store per round).  NULL: nothing to reset. */
    int (*new_round)(void *ctx, int attempt);
    void *new_round_ctx;
    const struct dt_agent_hooks *hooks; /* NULL: this node alone decides (one-node jobs) */
    /* An elastic job (nodes: MIN:MAX): hooks->begin_attempt places this node
     * in each round; node_rank and nnodes above are the round's (nnodes is
     * MAX until the first), TORCHELASTIC_RESTART_COUNT counts failures only
     * (restarts), DTRAIN_RESTART_COUNT the round, and rounds beyond
     * max_restarts + 1 may run (membership changes are not counted). */
    bool elastic;
    int nnodes_max; /* an elastic job's MAX (the bundled trainer's reference world); 0: nnodes */
    int restarts;
    /* NULL: fork nproc ranks.  Else one process, cfg->argv, stands for
     * group->world ranks (adapter.h): their logs, console lines, failure
     * report and summary entries come from its output and records; the
     * watchdog is off (their processes are not this agent's to look at). */
    const struct dt_adapter_group *group;
};

enum dt_agent_status { DT_AGENT_SUCCEEDED, DT_AGENT_FAILED, DT_AGENT_INTERRUPTED };

struct dt_agent_rank_result {
    int rank; /* global rank */
    int pid;
    bool exited;
    int wstatus;            /* as waitpid(2) reported it, valid when exited */
    bool stopped_by_agent;  /* the agent had signalled it before it exited */
    double spawn_s, exit_s; /* seconds since cfg->start_mono */
};

struct dt_agent_attempt {
    double start_s, end_s;
    int first_failed;                   /* index in ranks of the first failure, or -1 */
    bool electing;                      /* first_failed may still change (agent_policy.c): unpublished */
    int leftovers;                      /* processes the ranks left running, stopped by the agent */
    struct dt_agent_rank_result *ranks; /* res->nproc entries: this node's ranks (a group's: all) */
    int hung;                           /* index in ranks the watchdog declared hung, or -1 */
    /* Other nodes' ranks of this round, in node 0's multi-node result (agent_rounds.c
     * gathers them at the end); times on node 0's clock through the wall clock. */
    struct dt_agent_rank_result *others;
    int n_others;
    /* An elastic job's round, in node 0's result (agent_elastic.c decides it):
     * its node count (0: not an elastic round, or not decided), how it ended
     * ("finished", "membership": the next round has other nodes, not counted;
     * "restart": a rank failed, the next round counts against max_restarts;
     * "failed": a rank failed and the job ended) and why, in a sentence. */
    int round_nodes;
    char round_end[16];
    char round_why[512];
};

struct dt_agent_failure {
    int attempt;
    int rank; /* global rank */
    int wstatus;
    double time_s;
    int n_tail;
    char tail[DT_AGENT_TAIL_LINES][DT_AGENT_TAIL_WIDTH]; /* its last stderr lines, oldest first */
    char error_file[4352];    /* TORCHELASTIC_ERROR_FILE of that rank, "" if it wrote none */
    char error_message[1024]; /* the "message" in that file, "" if none */
    char error_traceback[4096]; /* the end of its traceback (py_callstack), whole lines, "" if none */
    int traceback_left_out;     /* lines of the traceback before what error_traceback keeps */
    int oom_killer;           /* killed by SIGKILL: 1 if the memory cgroup counted OOM kills during
                                 the attempt, 0 if not; -1 otherwise or when it cannot tell */
    bool hung;                /* the watchdog declared it hung and killed it */
    int64_t hung_step;        /* the last step its heartbeat reported (sampled); -1 when none */
    double hang_detected_s;   /* when the watchdog gave its verdict (seconds since the start) */
    char hang_reason[256];    /* "silent for 3.2 s (no heartbeat) ...", "" unless hung */
    char hang_report[4352];   /* attempt_<k>/hang_rank_<n>.txt: states, stacks, last log lines */
    char hang_traceback[4096]; /* the start of its threads' Python traceback (faulthandler), "" if none */
    bool final;               /* restart_policy.on_exit made this failure final (no restart) */
    int node;                 /* the node it ran on (another node's, in node 0's multi-node summary) */
    char host[256];           /* that node's host name when it was another node, else "" */
};

struct dt_agent_result {
    enum dt_agent_status status;
    int exit_status;      /* what the launcher exits with: 0, the code, or 128 + signal */
    int interrupt_signal; /* the signal that interrupted the job, or 0 */
    /* Ended DT_AGENT_EXIT_REQUEUE because a rank did not catch the signal:
     * the agent stopped the ranks, they did not checkpoint on their own. */
    bool requeue_stopped;
    int n_attempts;
    int max_attempts;                  /* entries allocated: max_restarts + 1 */
    int nproc;                         /* entries of each attempt's ranks */
    struct dt_agent_attempt *attempts; /* max_restarts + 1 entries, n_attempts used */
    bool have_failure;
    struct dt_agent_failure first_failure; /* the first failure of the last failed attempt */
    char coordinator_lost[512]; /* why the agent gave up on an unreachable coordinator, "" if it did not */
    /* Node 0 of a multi-node job: the first other node whose agent was lost
     * (its connection closed without LEAVE, or its host stopped acknowledging
     * for rendezvous.heartbeat_timeout), which ended the job (an elastic job:
     * which ended its round, the job going on without it; node is its slot);
     * node -1 and reason "" if none. */
    struct dt_agent_lost_node {
        int node;
        char host[256];
        char reason[512];  /* the coordinator's sentence: host, address, pid, how */
        double detected_s; /* when the coordinator noticed, seconds since the start */
    } lost_node;
    char write_error[4608];     /* the first file of the run directory that could not be written (a
                                   log, summary.json) and why; "" if none.  It fails the job. */
    double wall_s;
    double started_unix; /* wall-clock time at the start, for the summary */
};

/* Runs the job on this node until it succeeds, fails past max_restarts, or
 * is interrupted.  Returns 0 with *res filled (its status says how the job
 * ended), or a negative DT_E* code when the agent itself could not work
 * (cannot fork, cannot create log files); *res is still usable for a summary.
 * Free *res with dt_agent_result_free(). */
int dt_agent_run(const struct dt_agent_config *cfg, struct dt_agent_result *res);
void dt_agent_result_free(struct dt_agent_result *res);

/* --- one node's run of a job (agent_node.c) ------------------------------ */

/* What one node's run is told: by `dtrain agent` from its flags or the
 * scheduler adapter's discover, by `dtrain launch` for node 0 of a local job
 * or of mpirun's MPI ranks (an adapter's plan with host_node0, adapter.h). */
struct dt_agent_node {
    const struct dt_job *job;
    const char *who;        /* "dtrain launch", "dtrain agent": how its error lines start */
    int node_rank, nnodes;  /* nnodes: the job's; one agent for all of them with a group */
    int nnodes_min;         /* below nnodes: an elastic job (MIN:MAX), where node_rank is 0 or -1 */
    int nproc;              /* ranks per node; 0: nproc_per_node, with gpu resolved here */
    const char *coord_bind; /* node 0: the interface the coordinator listens on */
    const char *coord_host; /* how ranks (MASTER_ADDR) and the other nodes' agents reach it */
    int coord_port;         /* 0: the kernel picks one (an agent that is the whole job) */
    const char *token;      /* the job token every node shares; NULL: node 0 makes one (auth: token) */
    const char *auth_off;   /* how the user turns rendezvous.auth off, for the error when PyTorch
                               clients are refused ("pass --auth none to dtrain run"); NULL: the key
                               in the spec's file */
    const char *run_id;     /* shared by every node; NULL or "": node 0 makes one */
    const char *log_dir;    /* NULL: the spec's */
    const char *ranks;      /* --ranks: stdout of these global ranks only, or NULL */
    double grace_s;         /* --grace-period; <= 0: the job's grace_period */
    double start_mono;
    const char *dtrain; /* this binary as ranks run it (`dtrain worker`); NULL: /proc/self/exe */
    const char *rank_spec; /* the spec file `dtrain worker` ranks read (the run directory's job.yaml,
                              written once by this launch); NULL: job->path */
    const struct dt_adapter_group *group; /* node 0 only: one process stands for every rank */
    bool own_terminal; /* started by hand in a terminal of its own (dtrain run), not beside node 0's
                          output (a Slurm batch file, mpirun's console) */
};

/* The whole run (checks, rendezvous, the ranks, summary.json, the closing
 * lines; see agent_node.c).  Returns the exit status: the job's, 2 for a
 * problem the user must fix, or 1 when the run could not start (both said
 * on stderr, after n->who). */
int dt_agent_node_run(const struct dt_agent_node *n);

/* --- the watchdog's rule (agent_watchdog.c) ------------------------------ */

/* One rank as the watchdog last saw it; times on the agent's clock. */
struct dt_agent_watch {
    double spawn_s;        /* when it was started */
    bool has_hb;           /* a heartbeat of this attempt arrived */
    int64_t step;          /* the last reported step */
    double hb_age_s;       /* seconds since that heartbeat */
    double step_since_s;   /* when `step` last changed */
    double behind_since_s; /* since when another rank has reported a higher step; 0: not behind.
                              Heartbeats are samples, so a rank is "behind" by a step for up to
                              one interval after every step: only a lasting lag counts. */
    char state;            /* /proc state letter of its worst process: T, D, or 0 for neither */
    double state_since_s;  /* since when it has been in `state` */
};

/* The watchdog's verdict at time `now` for n ranks: the index of the first
 * rank that is hung, or -1.  Hung: stopped or in uninterruptible sleep (T or
 * D in /proc) for hb_timeout (D only when no heartbeats are read: a trainer's
 * heartbeat says more); with heartbeats, silent for hb_timeout, silent since
 * its start for first_hb_s, or at a step below another rank's while its own
 * has not moved and stayed behind for hb_timeout.  `why` gets a sentence. */
struct dt_agent_watch_limits {
    double hb_timeout; /* rendezvous.heartbeat_timeout */
    double first_hb_s; /* from spawn to the first heartbeat: rendezvous.timeout + heartbeat_timeout */
    bool heartbeats;   /* the ranks send heartbeats (trainer: jobs) or progress rows (command: jobs) */
    bool from_rows;    /* they are progress rows (docs/progress.md): a rank may write none, so one
                          without any is judged by /proc alone (first_hb_s does not apply, D counts) */
    int first_rank;    /* global rank of w[0], for the messages */
};
int dt_agent_watch_judge(const struct dt_agent_watch *w, int n, double now,
                         const struct dt_agent_watch_limits *l, char *why, size_t size);
/* --- the rank environment (agent_plan.c) --------------------------------- */

/* What a command: rank is told in its environment for docs/progress.md: the
 * file of its progress rows (DTRAIN_METRICS_FILE), the signal that asks its
 * Python threads' traceback (DTRAIN_TRACEBACK_SIGNAL) and the file it goes
 * to (DTRAIN_TRACEBACK_FILE), all in attempt_<k>/. */
#define DT_AGENT_TRACEBACK_SIGNAL SIGUSR2
#define DT_AGENT_TRACEBACK_SIGNAL_NAME "SIGUSR2"
void dt_agent_rows_path(const char *run_dir, int attempt, int rank, char *buf, size_t size);
void dt_agent_traceback_path(const char *run_dir, int attempt, int rank, char *buf, size_t size);

/* The environment of one rank: `base` (normally environ) without the names
 * dtrain sets, then the spec's env: entries, then dtrain's variables.  Returns
 * a malloc'd NULL-terminated array; free with dt_agent_env_free(). */
int dt_agent_env_build(const struct dt_agent_config *cfg, int local_rank, int restart, char *const *base,
                       char ***out);
void dt_agent_env_free(char **env);

/* --- output (agent_procs.c) ---------------------------------------------- */

/* Formats "[rank N] <line>\n" into out (which holds at least len + 32 bytes);
 * returns the length. */
size_t dt_agent_format_line(char *out, int rank, const char *line, size_t len);

/* The longest console prefix a template gives (longer ones are cut). */
#define DT_AGENT_PREFIX_MAX 256
/* A rank's console prefix (agent_console.c): "[rank N] ", or console.line_prefix
 * (torchrun's --log-line-prefix-template) as Python's Template.safe_substitute
 * renders it: ${role_name} / $role_name, ${rank}, ${local_rank}, ${hostname}
 * replaced, $$ a dollar, anything else kept as written.  Into out (size
 * DT_AGENT_PREFIX_MAX); returns its length. */
size_t dt_agent_line_prefix(char *out, const char *tmpl, const char *role, int rank, int local_rank,
                            const char *host);

/* PyTorch prefixes a rank's lines itself once its default process group is
 * up: "[rank3]: " before each line of an uncaught exception (the excepthook
 * of distributed_c10d.py's init_process_group), "[rank3]:" before c10's and
 * torch._logging's lines ("[rank3]:[W1204 ...] Warning: ...").  The console
 * shows "[rank 3] " already, so the length of such a prefix at the start of
 * `line`, the space after it included, is returned to be dropped there, when
 * it names `rank`; otherwise 0.  Log files keep the bytes as written. */
size_t dt_agent_torch_prefix(int rank, const char *line, size_t len);

/* The last DT_AGENT_TAIL_LINES lines of a stream, each cut to DT_AGENT_TAIL_WIDTH. */
struct dt_agent_tail {
    char lines[DT_AGENT_TAIL_LINES][DT_AGENT_TAIL_WIDTH];
    int next, count;
    bool continuing; /* the last line came in pieces and is not finished */
};
void dt_agent_tail_push(struct dt_agent_tail *t, const char *line, size_t len, bool complete);
/* Copies the kept lines, oldest first; returns how many. */
int dt_agent_tail_copy(const struct dt_agent_tail *t, char out[][DT_AGENT_TAIL_WIDTH]);

/* --- error reports (agent_error_file.c) ---------------------------------- */

/* The "message" string of a rank's error report (PyTorch's @record format
 * or {"message": "..."}); returns -1 and leaves out empty if none, or if the
 * report is no JSON. */
int dt_agent_error_message(const char *text, size_t len, char *out, size_t size);
/* The end of the report's traceback (@record's message.extraInfo.py_callstack):
 * its last DT_AGENT_TRACEBACK_LINES lines that fit in out, whole; returns how
 * many lines before them were left out, or -1 (out empty) when there is none. */
int dt_agent_error_traceback(const char *text, size_t len, char *out, size_t size);
/* Both from the file at `path` into ff's error_message, error_traceback and
 * traceback_left_out (a path that is not a regular file is not read);
 * returns 0 when it holds a message. */
int dt_agent_error_file_read(const char *path, struct dt_agent_failure *ff);

/* --- the OOM killer (agent_watchdog.c) ----------------------------------- */

/* Reads the "oom_kill N" line of memory.events / memory.oom_control text. */
int dt_agent_oom_parse(const char *text, long long *count);

/* --- the summary (agent_summary.c) --------------------------------------- */

/* <run dir>/summary.json's text, to a stream (what the unit tests read). */
int dt_agent_write_summary_to(FILE *f, const struct dt_agent_config *cfg, const struct dt_agent_result *res);

#endif
