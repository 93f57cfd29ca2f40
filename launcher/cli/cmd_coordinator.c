/* cmd_coordinator.c - `dtrain coordinator`: the coordinator as a process of its own.
 *
 * Used where the launcher does not run on node 0 (Slurm, Kubernetes) and by
 * the benchmarks.  The job token comes from DTRAIN_JOB_TOKEN or a file,
 * never from the command line, where `ps` would show it to every user.
 * Prints one line saying where it listens, then serves until SIGINT/SIGTERM.
 *
 * Not for launching anything: that is `dtrain launch` and the agent.
 */
#include "launcher/cli/cli.h"
#include "launcher/coordinator/coordinator.h"

#include "base/error.h"
#include "base/log.h"
#include "spec/token.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain coordinator --port P [--host H] [--token-file F | --auth none]\n\n"
            "Runs a job's coordinator (key-value store with PyTorch TCPStore's protocol,\n"
            "barriers, heartbeats) until SIGINT or SIGTERM.\n\n"
            "  --port P         port to listen on (0: any free port; the line printed says which)\n"
            "  --host H         address to listen on (default 0.0.0.0)\n"
            "  --token-file F   read the 64-hex-char job token from F (mode 600: a file\n"
            "                   others can read is refused)\n"
            "  --auth none      accept clients without a token (PyTorch's client cannot present one)\n\n"
            "Without --token-file the token is read from DTRAIN_JOB_TOKEN or the file\n"
            "DTRAIN_JOB_TOKEN_FILE names.  It is never taken on the command line, where\n"
            "other users could read it.\n");
}

struct args {
    int port;
    const char *host;
    const char *token_file;
    int auth_none;
};

static int parse(int argc, char **argv, struct args *a)
{
    enum { PORT = DT_CLI_OPT_OWN, HOST, TOKEN_FILE, AUTH, TOKEN };
    static const struct option own[] = {{"port", required_argument, NULL, PORT},
                                        {"host", required_argument, NULL, HOST},
                                        {"token-file", required_argument, NULL, TOKEN_FILE},
                                        {"auth", required_argument, NULL, AUTH},
                                        {"token", optional_argument, NULL, TOKEN},
                                        {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "coordinator", "", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        char *end;
        long p = ch == PORT ? strtol(v, &end, 10) : 0;
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == PORT && (*end || end == v || p < 0 || p > 65535))
            return dt_cli_usage_error("coordinator", "--port %s is not a port number", v);
        if (ch == AUTH && strcmp(v, "none") != 0 && strcmp(v, "token") != 0)
            return dt_cli_usage_error("coordinator", "--auth takes none or token, not '%s'", v);
        if (ch == TOKEN)
            return dt_cli_usage_error("coordinator", "the job token is not taken on the command line "
                                                     "(others could read it): use DTRAIN_JOB_TOKEN "
                                                     "or --token-file");
        if (ch == DT_CLI_OPT_OPERAND)
            return dt_cli_usage_error("coordinator", "unexpected argument '%s'", v);
        a->port = ch == PORT ? (int)p : a->port;
        a->host = ch == HOST ? v : a->host;
        a->token_file = ch == TOKEN_FILE ? v : a->token_file;
        a->auth_none = ch == AUTH ? strcmp(v, "none") == 0 : a->auth_none;
    }
    if (a->port < 0)
        return dt_cli_usage_error("coordinator", "--port is required");
    return 0;
}

/* On its own the coordinator needs no descriptors for ranks' pipes and logs,
 * which the launcher and agents keep half of theirs for: it raises its
 * open-file limit to the hard one and serves all but 64 of it (at most
 * 65536), so a store of many clients needs no larger limit than PyTorch's. */
static unsigned connection_cap(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 + 64)
        return 65536;
    return rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 0;
}

static int run(int argc, char **argv)
{
    struct args a = {.port = -1};
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    char token[DT_TOKEN_LEN + 1] = "";
    bool found = true;
    /* The one reader agents use too: a file others can read is refused. */
    if (!a.auth_none &&
        (a.token_file ? dt_token_from_file(a.token_file, token) : dt_token_from_env(token, &found)) < 0) {
        fprintf(stderr, "dtrain coordinator: %s\n", dt_error_last());
        return 2;
    }
    if (!found) {
        fprintf(stderr, "dtrain coordinator: no job token: set DTRAIN_JOB_TOKEN or DTRAIN_JOB_TOKEN_FILE, pass "
                        "--token-file, or run with --auth none\n");
        return 2;
    }
    /* Blocked before the loop thread starts, so it inherits the mask and
     * only sigwait() below sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    struct dt_coord_config cfg = {.bind_host = a.host, .port = a.port,
                                  .token = a.auth_none ? NULL : token,
                                  .max_conns = connection_cap()};
    struct dt_coord *c;
    if (dt_coord_start(&cfg, &c) != 0)
        goto fail;
    printf("dtrain coordinator listening on %s:%d (auth: %s)\n", a.host ? a.host : "0.0.0.0",
           dt_coord_port(c), a.auth_none ? "none" : "token");
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    dt_log_info("coordinator: %s, stopping", strsignal(sig));
    dt_coord_stop(c);
    memset(token, 0, sizeof token);
    return 0;
fail:
    fprintf(stderr, "dtrain coordinator: %s\n", dt_error_last());
    return 1;
}

const struct dt_cli_command dt_cli_coordinator = {
    .name = "coordinator",
    .summary = "run a job's coordinator (store, barriers, heartbeats) on its own",
    .run = run,
    .usage = usage,
};
