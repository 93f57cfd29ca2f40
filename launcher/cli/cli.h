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

#include <stdbool.h>
#include <stdio.h>

struct dt_cli_command {
    const char *name;
    const char *summary;          /* one line for `dtrain --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*usage)(FILE *out);      /* full help for `dtrain <name> --help` */
};

/* True if argv holds -h or --help before any "--". */
int dt_cli_wants_help(int argc, char **argv);

/* Prints "dtrain <cmd>: <message>" and a hint to use --help; returns 2. */
int dt_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

extern const char dt_version[];

/* ---- the job spec on the command line (cli_spec.c) ---- */

struct dt_job;
struct dt_adapter;

#define DT_CLI_MAX_SET 64

struct dt_cli_spec {
    const char *cmd;                 /* the subcommand, for messages */
    char *set[DT_CLI_MAX_SET + 1];   /* --set assignments, in order */
    int n_set;
};

/* When argv[*i] is `--set KEY.PATH=VALUE` or `--set=KEY.PATH=VALUE`, takes it
 * (moving *i past its value) and returns 1; returns 0 for another argument,
 * DT_EXIT_REFUSED after printing a usage error. */
int dt_cli_spec_arg(struct dt_cli_spec *s, int argc, char **argv, int *i);

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

struct dt_cli_launch {
    const char *log_dir; /* --log-dir, or NULL for the spec's */
    const char *ranks;   /* --ranks */
    double grace_s;      /* --grace-period, <= 0 for the spec's */
    double start_mono;   /* when the command started (CLOCK_MONOTONIC seconds) */
    const char *resume;  /* --resume RUN_DIR, or NULL */
    bool detach, dry_run, trace;
};

/* The options launch and run share: takes argv[*i] (and its value) and
 * returns 1, returns 0 for another argument, DT_EXIT_REFUSED after a usage error. */
int dt_cli_launch_arg(struct dt_cli_launch *o, const char *cmd, int argc, char **argv, int *i);
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

/* --dry-run (cli_dry_run.c): prints what launching `job` would run, starting nothing. */
int dt_cli_dry_run(const struct dt_job *job, const char *log_dir, FILE *out);

#endif
