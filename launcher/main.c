/* main.c - `dtrain`: finds the subcommand and hands it argv.
 *
 * Nothing else lives here: each subcommand is a file of its own (cli.h),
 * collected into a table the Makefile generates.
 */
#include "launcher/cli.h"

#include "base/log.h"

#include <stdarg.h>
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

static void print_help(FILE *out)
{
    fprintf(out,
            "dtrain %s - distributed training launcher and coordinator\n\n"
            "Usage: dtrain <command> [options]\n"
            "       dtrain <command> --help\n\n"
            "Commands:\n",
            dt_version);
    for (size_t i = 0; dt_cli_commands[i]; i++)
        fprintf(out, "  %-12s %s\n", dt_cli_commands[i]->name, dt_cli_commands[i]->summary);
    fprintf(out,
            "\nOptions:\n"
            "  -h, --help     show this help\n"
            "  --version      print the version\n\n"
            "Environment: DTRAIN_LOG=debug|info|warn|error sets how much dtrain itself says.\n"
            "A job is one YAML file; `man dtrain` and README.md describe its keys.\n");
}

int main(int argc, char **argv)
{
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
    for (size_t i = 0; dt_cli_commands[i]; i++) {
        const struct dt_cli_command *cmd = dt_cli_commands[i];
        if (strcmp(cmd->name, name) != 0)
            continue;
        if (dt_cli_wants_help(argc - 1, argv + 1)) {
            cmd->usage(stdout);
            return 0;
        }
        return cmd->run(argc - 1, argv + 1);
    }
    fprintf(stderr, "dtrain: '%s' is not a dtrain command. See 'dtrain --help'.\n", name);
    return 2;
}
