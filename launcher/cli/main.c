/* main.c - `dtrain`: finds the subcommand and hands it argv.
 *
 * Nothing else lives here but the order of `dtrain --help`: each subcommand
 * is a file of its own (cli.h), collected into a table the Makefile generates.
 */
#include "launcher/cli/cli.h"

#include "base/log.h"
#include "base/proc.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#ifndef DT_VERSION
#define DT_VERSION "0.0.0-dev"
#endif

const char dt_version[] = DT_VERSION;

/* Generated from the launcher/cmd_*.c files (see the Makefile), NULL-terminated. */
extern const struct dt_cli_command *const dt_cli_commands[];

int dt_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    }
    return 0;
}

int dt_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dtrain %s: %s\nTry 'dtrain %s --help'.\n", cmd, msg, cmd);
    return 2;
}

/* The order `dtrain --help` lists commands in: what a user runs, in the order
 * a job meets them, then what dtrain runs itself on the nodes.  Lookup uses
 * the generated table; a command missing here is listed under "Other", so
 * adding a cmd_<name>.c file still needs no edit. */
static const struct {
    const char *heading;
    const char *names[6];
} help_groups[] = {
    {"Run a job", {"launch", "validate", "render", "run"}},
    {"Manage runs", {"status", "logs", "cancel", "list"}},
    {"Look at a run", {"report", "trace"}},
    {"Measure", {"bench"}},
    {"Prepare data", {"data"}},
    {"Use a trained model", {"sample", "export"}},
    {"Started by dtrain on the nodes (or by hand, see their --help)", {"agent", "coordinator", "worker", "mpirank"}},
    {"Other", {"version"}},
};

static const struct dt_cli_command *find_command(const char *name)
{
    for (size_t i = 0; dt_cli_commands[i]; i++)
        if (strcmp(dt_cli_commands[i]->name, name) == 0)
            return dt_cli_commands[i];
    return NULL;
}

static bool in_help_groups(const char *name)
{
    for (size_t g = 0; g < sizeof help_groups / sizeof help_groups[0]; g++)
        for (size_t k = 0; k < 6 && help_groups[g].names[k]; k++)
            if (strcmp(help_groups[g].names[k], name) == 0)
                return true;
    return false;
}

static void print_command(FILE *out, const struct dt_cli_command *c)
{
    fprintf(out, "  %-12s %s\n", c->name, c->summary);
}

static void print_help(FILE *out)
{
    fprintf(out,
            "dtrain %s - distributed training launcher and coordinator\n\n"
            "Usage: dtrain <command> [options]\n"
            "       dtrain <command> --help\n",
            dt_version);
    size_t n_groups = sizeof help_groups / sizeof help_groups[0];
    for (size_t g = 0; g < n_groups; g++) {
        fprintf(out, "\n%s:\n", help_groups[g].heading);
        for (size_t k = 0; k < 6 && help_groups[g].names[k]; k++) {
            const struct dt_cli_command *c = find_command(help_groups[g].names[k]);
            if (c)
                print_command(out, c);
        }
        if (g + 1 == n_groups) /* "Other": also any command not placed above */
            for (size_t i = 0; dt_cli_commands[i]; i++)
                if (!in_help_groups(dt_cli_commands[i]->name))
                    print_command(out, dt_cli_commands[i]);
    }
    fprintf(out,
            "\nOptions:\n"
            "  -h, --help     show this help\n"
            "  --version      print the version\n\n"
            "Environment: DTRAIN_LOG=debug|info|warn|error sets how much dtrain itself says.\n"
            "A job is one YAML file: `dtrain validate --print JOB.yaml` shows every key with its value;\n"
            "`man dtrain` lists the commands and keys, README.md describes each key.\n");
}

int main(int argc, char **argv)
{
    dt_proc_keep_argv(argc, argv); /* the agent's guards show their own name (agent_guard.c) */
    dt_log_level_from_env();
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("dtrain %s\n", dt_version);
        return 0;
    }
    const struct dt_cli_command *cmd = find_command(name);
    if (cmd && !cmd->own_help && dt_cli_wants_help(argc - 1, argv + 1)) {
        cmd->usage(stdout);
        return 0;
    }
    if (cmd)
        return cmd->run(argc - 1, argv + 1);
    fprintf(stderr, "dtrain: '%s' is not a dtrain command. See 'dtrain --help'.\n", name);
    return 2;
}
