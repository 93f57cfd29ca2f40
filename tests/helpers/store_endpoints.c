/* store_endpoints.c - K nodes' store endpoints (launcher/agent/agent_endpoint.h)
 * in one process, and a program run under them, as a node's ranks run under
 * their agent: for tests that reach the endpoint without a whole job, and for
 * bench/rendezvous_nodes.sh, which simulates many nodes on one machine.
 *
 *   DTRAIN_JOB_TOKEN=... store_endpoints --coordinator HOST:PORT [--nodes K]
 *       [--port P] [--name NAME] [--connect-timeout S] [--reconnect-on-usr1] -- PROGRAM ARGS...
 *
 * Starts K endpoints (each its own listener on 127.0.0.1 and its own
 * connection to the coordinator, as K agents would hold), then runs PROGRAM
 * as its child with MASTER_ADDR=127.0.0.1, MASTER_PORT (the first endpoint's
 * port) and STORE_ENDPOINT_PORTS (all of them, comma-separated); the
 * endpoints admit PROGRAM and its descendants only.  Exits with PROGRAM's
 * status after stopping the endpoints.  Without DTRAIN_JOB_TOKEN the
 * endpoints present none (a coordinator with auth: none).  SIGUSR1 with
 * --reconnect-on-usr1 makes every endpoint reconnect (a fresh coordinator at
 * the same address), as the agent does before a restart.  Not a test.
 */
#include "launcher/agent/agent_endpoint.h"

#include "base/error.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t usr1;
static void on_usr1(int sig) { (void)sig; usr1 = 1; }

static void usage(void)
{
    fprintf(stderr, "usage: store_endpoints --coordinator HOST:PORT [--nodes K] [--port P] [--name NAME] "
                    "[--connect-timeout S] [--reconnect-on-usr1] -- PROGRAM ARGS...\n");
    exit(2);
}

struct opts {
    char host[256];
    int port, nodes, local_port;
    const char *name;
    double timeout;
    bool reconnect;
    char **program;
};

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.nodes = 1, .name = "test", .timeout = 10};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--reconnect-on-usr1")) {
            o->reconnect = true;
            continue;
        }
        if (!v)
            usage();
        if (!strcmp(argv[i], "--coordinator")) {
            const char *colon = strrchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof o->host)
                usage();
            memcpy(o->host, v, (size_t)(colon - v));
            o->port = atoi(colon + 1);
        } else if (!strcmp(argv[i], "--nodes")) {
            o->nodes = atoi(v);
        } else if (!strcmp(argv[i], "--port")) {
            o->local_port = atoi(v);
        } else if (!strcmp(argv[i], "--name")) {
            o->name = v;
        } else if (!strcmp(argv[i], "--connect-timeout")) {
            o->timeout = atof(v);
        } else {
            usage();
        }
        i++;
    }
    if (i + 1 >= argc || o->port <= 0 || o->nodes < 1 || o->nodes > 4096)
        usage();
    o->program = argv + i + 1;
}

/* Every endpoint's port in STORE_ENDPOINT_PORTS, the first as MASTER_PORT. */
static void export_ports(struct dt_agent_endpoint **eps, int n)
{
    size_t cap = (size_t)n * 8 + 1, len = 0;
    char *list = malloc(cap);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, cap - len, "%s%d", i ? "," : "", dt_agent_endpoint_port(eps[i]));
    char first[16];
    snprintf(first, sizeof first, "%d", dt_agent_endpoint_port(eps[0]));
    setenv("STORE_ENDPOINT_PORTS", list, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", first, 1);
    free(list);
}

static int run_child(char **program, const struct opts *o, struct dt_agent_endpoint **eps)
{
    pid_t pid = fork();
    if (pid == 0) {
        execvp(program[0], program);
        fprintf(stderr, "store_endpoints: cannot run %s: %s\n", program[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, 0);
        if (w == pid)
            break;
        if (w < 0 && errno == EINTR && usr1 && o->reconnect) {
            usr1 = 0;
            for (int i = 0; i < o->nodes; i++)
                if (dt_agent_endpoint_reconnect(eps[i], o->timeout) < 0)
                    fprintf(stderr, "store_endpoints: %s\n", dt_error_last());
            fprintf(stderr, "store_endpoints: reconnected\n");
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sigaction sa = {.sa_handler = on_usr1};
    sigaction(SIGUSR1, &sa, NULL);
    const char *token = getenv("DTRAIN_JOB_TOKEN");
    struct dt_agent_endpoint **eps = calloc((size_t)o.nodes, sizeof *eps);
    for (int i = 0; i < o.nodes; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s %d", o.name, i);
        struct dt_agent_endpoint_config c = {.coord_host = o.host,
                                             .coord_port = o.port,
                                             .token = token && *token ? token : NULL,
                                             .port = i == 0 ? o.local_port : 0,
                                             .name = name,
                                             .connect_timeout_s = o.timeout};
        if (dt_agent_endpoint_start(&c, &eps[i]) < 0) {
            fprintf(stderr, "store_endpoints: %s\n", dt_error_last());
            return 1;
        }
    }
    export_ports(eps, o.nodes);
    unsetenv("DTRAIN_JOB_TOKEN"); /* the program gets none, as ranks behind an endpoint */
    int status = run_child(o.program, &o, eps);
    for (int i = 0; i < o.nodes; i++)
        dt_agent_endpoint_stop(eps[i]);
    free(eps);
    return status;
}
