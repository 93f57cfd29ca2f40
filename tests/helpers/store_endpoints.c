/* store_endpoints.c - K nodes' store endpoints (launcher/agent/agent_endpoint.h)
 * in one process, and a program run under them, as a node's ranks run under
 * their agent: for tests that reach the endpoint without a whole job, and for
 * bench/rendezvous_nodes.sh, which simulates many nodes on one machine.
 *
 *   DTRAIN_JOB_TOKEN=... store_endpoints --coordinator HOST:PORT [--nodes K]
 *       [--port P] [--name NAME] [--connect-timeout S] [--reconnect-on-usr1]
 *       [--per-node [--node-base B]] -- PROGRAM ARGS...
 *
 * Starts K endpoints (each its own listener on 127.0.0.1 and its own
 * connection to the coordinator, as K agents would hold), then runs PROGRAM
 * as its child with MASTER_ADDR=127.0.0.1, MASTER_PORT (the first endpoint's
 * port) and STORE_ENDPOINT_PORTS (all of them, comma-separated); the
 * endpoints admit PROGRAM and its descendants only.  Exits with PROGRAM's
 * status after stopping the endpoints.  Without DTRAIN_JOB_TOKEN the
 * endpoints present none (a coordinator with auth: none).  SIGUSR1 with
 * --reconnect-on-usr1 makes every endpoint reconnect (a fresh coordinator at
 * the same address), as the agent does before a restart.
 *
 * --per-node: PROGRAM runs once per endpoint instead, node i's under a
 * process standing in for node i's agent (forked before any thread), with
 * MASTER_PORT its endpoint's port and NODE_RANK B+i; endpoint i admits the
 * descendants of its stand-in only, as a node's endpoint admits its agent's.
 * The exit status is the first non-zero one of the programs.  Not a test.
 */
#include "launcher/agent/agent_endpoint.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
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
                    "[--connect-timeout S] [--reconnect-on-usr1] [--per-node [--node-base B]] -- PROGRAM ARGS...\n");
    exit(2);
}

struct opts {
    char host[256];
    int port, nodes, local_port;
    const char *name;
    double timeout;
    bool reconnect, per_node;
    int node_base;
    char **program;
};

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.nodes = 1, .name = "test", .timeout = 10};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--reconnect-on-usr1") || !strcmp(argv[i], "--per-node")) {
            o->reconnect |= argv[i][2] == 'r';
            o->per_node |= argv[i][2] == 'p';
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
        } else if (!strcmp(argv[i], "--node-base")) {
            o->node_base = atoi(v);
        } else if (!strcmp(argv[i], "--connect-timeout")) {
            o->timeout = atof(v);
        } else {
            usage();
        }
        i++;
    }
    if (i + 1 >= argc || o->port <= 0 || o->nodes < 1 || o->nodes > 65536)
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

/* A stand-in for node `node`'s agent: waits for its endpoint's port on a
 * pipe, then runs the program as its child and exits with its status. */
static pid_t standin(const struct opts *o, int node, int *port_fds)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid != 0) {
        close(p[0]);
        port_fds[node] = p[1];
        return pid;
    }
    /* The earlier nodes' pipes are theirs: held here, they would never see
     * the end of them if store_endpoints died. */
    for (int i = 0; i < node; i++)
        close(port_fds[i]);
    char port[16] = "", rank[16];
    ssize_t n = read(p[0], port, sizeof port - 1);
    if (n <= 0)
        _exit(1); /* the endpoints did not start */
    snprintf(rank, sizeof rank, "%d", o->node_base + node);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("NODE_RANK", rank, 1);
    pid_t child = fork();
    if (child == 0) {
        execvp(o->program[0], o->program);
        _exit(127);
    }
    int st = 0;
    if (child < 0 || waitpid(child, &st, 0) < 0)
        _exit(1);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static int wait_standins(const pid_t *pids, int n)
{
    int status = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (pids[i] > 0 && waitpid(pids[i], &st, 0) == pids[i] && status == 0)
            status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    return status;
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
    static char token[128];
    snprintf(token, sizeof token, "%s", getenv("DTRAIN_JOB_TOKEN") ? getenv("DTRAIN_JOB_TOKEN") : "");
    unsetenv("DTRAIN_JOB_TOKEN"); /* the programs get none, as ranks behind an endpoint */
    struct dt_agent_endpoint **eps = calloc((size_t)o.nodes, sizeof *eps);
    pid_t *standins = o.per_node ? calloc((size_t)o.nodes, sizeof *standins) : NULL;
    int *port_fds = o.per_node ? calloc((size_t)o.nodes, sizeof *port_fds) : NULL;
    for (int i = 0; o.per_node && i < o.nodes; i++)
        if ((standins[i] = standin(&o, i, port_fds)) < 0) {
            fprintf(stderr, "store_endpoints: cannot start node %d: %s\n", i, strerror(errno));
            return 1;
        }
    for (int i = 0; i < o.nodes; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s %d", o.name, i);
        struct dt_agent_endpoint_config c = {.coord_host = o.host,
                                             .coord_port = o.port,
                                             .token = *token ? token : NULL,
                                             .root = o.per_node ? standins[i] : 0,
                                             .port = i == 0 ? o.local_port : 0,
                                             .name = name,
                                             .connect_timeout_s = o.timeout};
        if (dt_agent_endpoint_start(&c, &eps[i]) < 0) {
            fprintf(stderr, "store_endpoints: %s\n", dt_error_last());
            return 1; /* the stand-ins read EOF and exit */
        }
    }
    int status;
    if (o.per_node) {
        for (int i = 0; i < o.nodes; i++) {
            char port[16];
            int len = snprintf(port, sizeof port, "%d", dt_agent_endpoint_port(eps[i]));
            if (write(port_fds[i], port, (size_t)len) != len)
                fprintf(stderr, "store_endpoints: cannot start node %d's program\n", i);
            close(port_fds[i]);
        }
        status = wait_standins(standins, o.nodes);
        /* The endpoints' own CPU time (not the programs'), for bench/rendezvous_nodes.sh. */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "store_endpoints: cpu_s=%.3f\n",
                (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6);
    } else {
        export_ports(eps, o.nodes);
        status = run_child(o.program, &o, eps);
    }
    for (int i = 0; i < o.nodes; i++)
        dt_agent_endpoint_stop(eps[i]);
    free(eps);
    free(standins);
    free(port_fds);
    return status;
}
