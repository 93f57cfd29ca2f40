/* cli.h - the table of `dtrain` subcommands.
 *
 * Each subcommand lives in its own file (launcher/cmd_<name>.c) and exports
 * one `const struct dt_cli_command dt_cli_<name>`; the Makefile generates the
 * table of them (build/gen/cli_table.c), so adding a subcommand is adding a
 * file.  main.c decides only the order `dtrain --help` lists them in.
 *
 * Conventions every subcommand follows: `-h/--help` prints its usage on
 * stdout and exits 0; a usage error prints one sentence and the usage line on
 * stderr and returns 2; a runtime failure prints dt_error_last() and returns 1
 * (or, for `launch`, the job's own exit status).
 */
#ifndef DT_CLI_H
#define DT_CLI_H

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

#endif
