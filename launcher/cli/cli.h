/* cli.h - the table of `dtrain` subcommands.
 *
 * Each subcommand lives in its own file (launcher/cli/cmd_<name>.c) and exports
 * one `const struct dt_cli_command dt_cli_<name>`; the Makefile generates the
 * table of them (build/gen/cli_table.c), so adding a subcommand is adding a
 * file.  main.c decides only the order `dtrain --help` lists them in.
 *
 * Conventions every subcommand follows: `-h/--help` prints its usage on
 * stdout and exits 0; the exit statuses are launcher/exit_status.h's (docs/cli.md,
 * "Exit statuses"): a usage error prints one sentence and the usage line on
 * stderr and returns DT_EXIT_REFUSED; a runtime failure prints
 * dt_error_last() and returns DT_EXIT_FAILED; `launch`, `run` and `agent`
 * return the job's own status through dt_cli_job_exit.
 *
 * The job spec on the command line (cli_spec.c) is read one way by every
 * command that takes one: --set overrides, every problem printed, and the
 * scheduler adapter's check, so validate, launch and render agree.
 */
#ifndef DT_CLI_H
#define DT_CLI_H

#include "launcher/exit_status.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

struct dt_cli_command {
    const char *name;
    const char *summary;          /* one line for `dtrain --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*usage)(FILE *out);      /* full help for `dtrain <name> --help` */
    /* run reads -h/--help itself: `dtrain run train.py --help` is the
     * program's --help, not run's (its options end at PROGRAM). */
    bool own_help;
};

/* True if argv holds -h or --help before any "--". */
int dt_cli_wants_help(int argc, char **argv);

/* Prints "dtrain <cmd>: <message>" and a hint to use --help; returns 2. */
int dt_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- options (cli_opts.c): every command reads argv with getopt_long ---- */

/* Ids of the shared options (cli_spec.c, cli_launch.c); a command's own
 * options are their short letter, or DT_CLI_OPT_OWN and up when long only. */
enum {
    DT_CLI_OPT_ERROR = -2,  /* dt_cli_opts_next printed a usage error */
    DT_CLI_OPT_OPERAND = 1, /* an argument that is not an option, in place */
    DT_CLI_OPT_SET = 0x100,
    DT_CLI_OPT_TRACE,
    DT_CLI_OPT_DETACH,
    DT_CLI_OPT_DRY_RUN,
    DT_CLI_OPT_RESUME,
    DT_CLI_OPT_RANKS,
    DT_CLI_OPT_LOG_DIR,
    DT_CLI_OPT_GRACE,
    DT_CLI_OPT_OWN = 0x200,
};

#define DT_CLI_MAX_OPTS 128

struct dt_cli_opts {
    const char *cmd;
    bool in_order, ended;
    char shorts[64];
    struct option longs[DT_CLI_MAX_OPTS + 1];
};

/* Starts reading argv[1..]: `shorts` in getopt's notation ("o:f"), the long
 * options of the NULL-terminated `tables` (each ending in a zero entry).
 * in_order: options end at the first operand (run's PROGRAM); otherwise
 * options and operands may come in any order. */
void dt_cli_opts_init(struct dt_cli_opts *s, const char *cmd, const char *shorts, bool in_order,
                      const struct option *const *tables);

/* The next option's id (its letter or the table's val) with *arg its value
 * (NULL without), DT_CLI_OPT_OPERAND with *arg the operand (those after
 * "--" too), -1 at the end (in_order: optind is the first argument not read,
 * run's PROGRAM), or
 * DT_CLI_OPT_ERROR once the usage error is printed (return DT_EXIT_REFUSED). */
int dt_cli_opts_next(struct dt_cli_opts *s, int argc, char **argv, const char **arg);

extern const char dt_version[];

/* ---- the job spec on the command line (cli_spec.c) ---- */

struct dt_job;
struct dt_adapter;

#define DT_CLI_MAX_SET 64

struct dt_cli_spec {
    const char *cmd;                 /* the subcommand, for messages */
    char *set[DT_CLI_MAX_SET + 1];   /* --set assignments, in order */
    int n_set;
    /* This node's part of a job whose nodes are placed on the command line
     * (dtrain run's --node-rank ...): the adapter's check of a whole launch
     * (local: one node) does not apply. */
    bool one_node_of_several;
    /* A spec made from options (dtrain run): line_origin[N] names the option
     * that line N came from ("--nproc-per-node"), said in place of
     * "PATH:N:COL" in a problem with that line, so the user reads what they
     * typed; NULL entries (and no table) keep the position. */
    const char *const *line_origin;
    int n_line_origin;
};

/* --set KEY.PATH=VALUE (or --set=KEY.PATH=VALUE): the option, for getopt_long. */
extern const struct option dt_cli_spec_options[];
/* Takes option `id` with its value: returns 1 when it is --set, 0 for
 * another option, DT_EXIT_REFUSED after printing a usage error. */
int dt_cli_spec_opt(struct dt_cli_spec *s, int id, const char *arg);

/* Loads the spec at path (text: from memory, named path) with the overrides,
 * then checks it as `ad` (NULL: the spec's scheduler's adapter) would before
 * render or submit.  Prints every problem on stderr, in file order; returns
 * 0 with *job set, or DT_EXIT_REFUSED. */
int dt_cli_spec_load(const struct dt_cli_spec *s, const char *path, const char *text,
                     const struct dt_adapter *ad, struct dt_job **job);

/* A job whose values came from ${VAR}, --set or flags (job->derived) is handed
 * on as dt_job_print's copy, since nodes and ranks read the spec again: written
 * 0600 to <log_dir>/.dtrain-<name>-<pid>.yaml, which becomes job->path (the
 * name in *written, for the caller to remove when the job has ended).  A job
 * read as it is leaves *written empty. */
int dt_cli_spec_hand_on(struct dt_job *job, const char *log_dir, char *written, size_t size);

/* The same for `dtrain launch`, whose copy only the launcher reads, once, as
 * it submits (the Slurm script and the Kubernetes ConfigMap carry the spec;
 * local and mpirun ranks and agents read the run directory's job.yaml): a
 * fresh private directory (mkdtemp in $TMPDIR, 0700) holds it, so nothing in
 * the log directory is read, and no one else can replace it.  *written is the
 * file, for dt_cli_spec_hand_on_done when the launch ends. */
int dt_cli_spec_hand_on_private(struct dt_job *job, char *written, size_t size);
void dt_cli_spec_hand_on_done(const char *written);

/* ---- the launch path of launch and run (cli_launch.c) ---- */

/* One node's part of a job placed on the command line (dtrain run's
 * torchrun flags), run here through the agent as `dtrain agent` runs it;
 * also node 0 of a job an adapter's plan hosts here (local, mpirun). */
struct dt_cli_node {
    const char *who;        /* "dtrain launch", "dtrain run": how its error lines start */
    int node_rank;          /* -1: an elastic job's rounds place this node */
    int nnodes, nnodes_min; /* nnodes_min below nnodes: an elastic job */
    int nproc;              /* ranks per node; 0: nproc_per_node, resolved by the agent */
    const char *bind;       /* node 0: the address the coordinator listens on */
    const char *host;       /* the coordinator, as agents and ranks reach it */
    int port;               /* 0: the kernel picks one (one node) */
    const char *token;      /* shared by every node; NULL: node 0 makes one (or auth: none) */
    const char *run_id;     /* shared by every node; NULL: node 0 makes one */
    const char *auth_off;   /* how this job's user turns rendezvous.auth off, for the error when
                               PyTorch clients are refused; NULL: the key in the spec's file */
    bool own_terminal;      /* each node was started by hand in a terminal of its own (dtrain run) */
};

struct dt_cli_launch {
    const struct dt_cli_node *node; /* run: where this node stands; NULL: the scheduler's plan */
    const char *log_dir; /* --log-dir, or NULL for the spec's */
    const char *ranks;   /* --ranks */
    double grace_s;      /* --grace-period, <= 0 for the spec's */
    double start_mono;   /* when the command started (CLOCK_MONOTONIC seconds) */
    const char *resume;  /* --resume RUN_DIR, or NULL */
    bool detach, dry_run, trace;
};

/* The options launch and run share (short: "qv"), for getopt_long; takes
 * option `id` with its value: returns 1 when it is one of them, 0 for
 * another option, DT_EXIT_REFUSED after printing a usage error. */
extern const struct option dt_cli_launch_options[];
#define DT_CLI_LAUNCH_SHORTS "qv"
int dt_cli_launch_opt(struct dt_cli_launch *o, const char *cmd, int id, const char *arg);
void dt_cli_launch_usage(FILE *out);

/* Runs (or with dry_run prints) the loaded job through its scheduler's
 * adapter; returns the exit status (the job's, or DT_EXIT_REFUSED/FAILED). */
int dt_cli_launch_job(struct dt_job *job, const struct dt_cli_launch *o, const char *cmd);

/* What adapter `ad` plans for the job (scheduler-adapters/adapter.h), carried
 * out (cli_plan.c): node 0 hosted here, or the plan's files, program and finish.  Returns
 * the exit status, having said on stderr what went wrong. */
struct dt_adapter_launch;
int dt_cli_launch_plan(const struct dt_job *job, const struct dt_adapter *ad,
                       const struct dt_adapter_launch *lo);

/* This node's run of the job (cli_plan.c): node 0's run directory with
 * launch.json, then the agent's dt_agent_node_run, the same path as `dtrain
 * agent`.  group: one process stands for every rank (an adapter's, or NULL).
 * Returns the exit status. */
struct dt_adapter_group;
int dt_cli_node_run(const struct dt_job *job, const struct dt_adapter_launch *lo, const struct dt_cli_node *node,
                    const struct dt_adapter_group *group);

/* --dry-run (cli_dry_run.c): prints what launching `job` would run, starting nothing. */
int dt_cli_dry_run(const struct dt_job *job, const char *log_dir, FILE *out);

#endif
