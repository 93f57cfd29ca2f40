/* run_rdzv.c - where one `dtrain run` stands among its job's nodes, from torchrun's flags (run_rdzv.h).
 *
 * torchrun's two rendezvous, as dtrain runs them (docs/torchrun.md):
 *  - static (torchrun's default backend): every node names its --node-rank
 *    (default 0) and node 0's address, --master-addr:--master-port (default
 *    127.0.0.1:29500) or --rdzv-endpoint.  Node 0 hosts the coordinator.
 *  - c10d: every node names the endpoint, HOST[:PORT] (port 29400), and the
 *    endpoint's host hosts the coordinator, as torchrun's c10d backend hosts
 *    its store: a `dtrain run` whose machine has the endpoint's address (or
 *    --rdzv-conf is_host=1).  Among several such processes of one machine the
 *    first to claim the port hosts and the others join, as in torchrun,
 *    which then falls back from hosting to joining.  The host is node 0;
 *    with MIN < MAX the elastic rounds number the others (docs/elastic.md),
 *    with a fixed count each takes the next node rank at the coordinator.
 * The coordinator is both the rendezvous and the ranks' store
 * (MASTER_ADDR:MASTER_PORT), so one address serves both.
 *
 * Not for parsing the options (cmd_run.c) or running the node (cli_plan.c).
 */
#include "launcher/cli/run_rdzv.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/log.h"
#include "comm/store.h"
#include "spec/jobspec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define C10D_DEFAULT_PORT 29400  /* torchrun's c10d_rendezvous_backend.py */
#define STATIC_DEFAULT_PORT 29500 /* torchrun's --master-port */
#define NODE_RANK_KEY "dtrain/run/node_rank"

static int parse_port(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

/* "host", "host:port", "[v6]:port" or "[v6]" (torchrun's parse_rendezvous_endpoint). */
static int parse_endpoint(const char *flag, const char *s, int default_port, char *host, size_t size, int *port)
{
    const char *colon = strrchr(s, ':'), *close = strrchr(s, ']');
    if (s[0] == '[' && close && (!colon || colon < close))
        colon = NULL;
    if (s[0] != '[' && colon && strchr(s, ':') != colon) /* a bare IPv6 address */
        colon = NULL;
    size_t hlen = colon ? (size_t)(colon - s) : strlen(s);
    if (s[0] == '[' && hlen >= 2 && s[hlen - 1] == ']') {
        s++;
        hlen -= 2;
    }
    *port = default_port;
    if (hlen == 0 || hlen >= size || (colon && parse_port(colon + 1, port) < 0))
        return dt_cli_usage_error("run", "%s '%s': expected HOST:PORT, a port from 0 to 65535", flag, s);
    memcpy(host, s, hlen);
    host[hlen] = 0;
    return 0;
}

/* torchrun's RendezvousParameters.get_as_bool: 1, 0, or -1 for neither. */
static int boolean(const char *v)
{
    static const char *const yes[] = {"1", "true", "t", "yes", "y"}, *const no[] = {"0", "false", "f", "no", "n"};
    for (size_t i = 0; i < 5; i++) {
        if (!strcasecmp(v, yes[i]))
            return 1;
        if (!strcasecmp(v, no[i]))
            return 0;
    }
    return -1;
}

/* --rdzv-conf k1=v1,k2=v2: the keys dtrain reads, the others named once. */
static int parse_conf(const char *text, struct dt_cli__rdzv_conf *c)
{
    static char buf[1024]; /* the values point into it for the life of the process */
    static const char *const ignored[] = {"close_timeout",       "read_timeout", "keep_alive_interval",
                                          "keep_alive_max_attempt", "use_libuv", "rank", NULL};
    *c = (struct dt_cli__rdzv_conf){.is_host = -1};
    if (!text || !*text)
        return 0;
    if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf)
        return dt_cli_usage_error("run", "--rdzv-conf is too long (%zu bytes)", strlen(text));
    char *save = NULL, unused[256] = "";
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv)
            return dt_cli_usage_error("run", "--rdzv-conf '%s': expected KEY=VALUE pairs separated by commas",
                                      kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        if (!strcmp(k, "join_timeout"))
            c->join_timeout = v;
        else if (!strcmp(k, "last_call_timeout"))
            c->last_call_timeout = v;
        else if (!strcmp(k, "timeout"))
            c->timeout = v;
        else if (!strcmp(k, "is_host") && (c->is_host = boolean(v)) < 0)
            return dt_cli_usage_error("run", "--rdzv-conf is_host=%s: expected 1 or 0 (true, false)", v);
        else if (strcmp(k, "is_host")) {
            bool known = false;
            for (int i = 0; ignored[i]; i++)
                known |= !strcmp(k, ignored[i]);
            if (!known)
                return dt_cli_usage_error("run",
                                          "--rdzv-conf: unknown key '%s' (dtrain reads join_timeout, "
                                          "last_call_timeout, timeout and is_host)",
                                          k);
            size_t n = strlen(unused);
            snprintf(unused + n, sizeof unused - n, "%s%s", n ? ", " : "", k);
        }
    }
    if (unused[0])
        dt_log_warn("--rdzv-conf %s: no effect in dtrain (its coordinator keeps nodes by their "
                    "connection and rendezvous.heartbeat_timeout)",
                    unused);
    return 0;
}

/* --- is the endpoint this machine? ---------------------------------------- */

static bool local_address(const struct sockaddr *sa)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            found = ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        else if (sa->sa_family == AF_INET6)
            found = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                            &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, sizeof(struct in6_addr));
    }
    freeifaddrs(ifs);
    return found;
}

static bool is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!strcmp(host, "localhost"))
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* torchrun's _matches_machine_hostname: the name of this machine, or an
 * address of one of its interfaces. */
static bool this_machine(const char *host)
{
    char name[256] = "";
    if (is_loopback(host) || (gethostname(name, sizeof name - 1) == 0 && !strcmp(host, name)))
        return true;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    bool found = false;
    for (struct addrinfo *a = res; a && !found; a = a->ai_next)
        found = local_address(a->ai_addr) ||
                (a->ai_family == AF_INET &&
                 (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127);
    freeaddrinfo(res);
    return found;
}

/* The claim of one machine's processes on hosting the port: an abstract Unix
 * socket, per network namespace as the port is, released when this process
 * ends however it ends.  Busy: another `dtrain run` here hosts. */
static int claim_host(int port, const char *id)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "dtrain-rdzv-%u-%d-%.60s", (unsigned)getuid(), port,
                     id ? id : "");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* --- the two rendezvous ----------------------------------------------------- */

static int one_node(const struct dt_cli__rdzv_flags *f, struct dt_cli__rdzv *r)
{
    if (f->node_rank && strcmp(f->node_rank, "0") != 0)
        return dt_cli_usage_error("run", "--node-rank %s: a job of one node has only node 0", f->node_rank);
    char host[256];
    if (f->master_port) {
        if (parse_port(f->master_port, &r->port) < 0)
            return dt_cli_usage_error("run", "--master-port '%s': expected a port from 0 to 65535", f->master_port);
        r->port_given = true;
    } else if (f->endpoint && *f->endpoint) {
        if (parse_endpoint("--rdzv-endpoint", f->endpoint, 0, host, sizeof host, &r->port))
            return DT_EXIT_REFUSED;
        r->port_given = true;
    }
    snprintf(r->host, sizeof r->host, "127.0.0.1");
    r->hosting = true;
    r->node_rank = 0;
    return 0;
}

static int static_nodes(const struct dt_cli__rdzv_flags *f, struct dt_cli__rdzv *r)
{
    if (r->nmin < r->nmax) /* torchrun's static rendezvous waits for MAX */
        dt_log_warn("--nnodes %d:%d with the static rendezvous: the job waits for %d nodes, as torchrun's "
                    "does; --rdzv-backend c10d makes it elastic",
                    r->nmin, r->nmax, r->nmax);
    r->nmin = r->nmax;
    char *end;
    long k = f->node_rank ? strtol(f->node_rank, &end, 10) : 0;
    if (f->node_rank && (*end || end == f->node_rank || k < 0 || k >= r->nmax))
        return dt_cli_usage_error("run", "--node-rank '%s': expected 0 to %d for --nnodes %d", f->node_rank,
                                  r->nmax - 1, r->nmax);
    r->node_rank = (int)k;
    if (f->endpoint && *f->endpoint) {
        if (parse_endpoint("--rdzv-endpoint", f->endpoint, STATIC_DEFAULT_PORT, r->host, sizeof r->host, &r->port))
            return DT_EXIT_REFUSED;
    } else {
        snprintf(r->host, sizeof r->host, "%s", f->master_addr ? f->master_addr : "127.0.0.1");
        r->port = STATIC_DEFAULT_PORT;
        if (f->master_port && parse_port(f->master_port, &r->port) < 0)
            return dt_cli_usage_error("run", "--master-port '%s': expected a port from 1 to 65535", f->master_port);
    }
    r->hosting = r->node_rank == 0;
    return 0;
}

static int c10d_nodes(const struct dt_cli__rdzv_flags *f, struct dt_cli__rdzv *r)
{
    if (!f->endpoint || !*f->endpoint)
        return dt_cli_usage_error("run",
                                  "--nnodes %s with the c10d rendezvous needs --rdzv-endpoint HOST:PORT, the "
                                  "address of the node that hosts the coordinator",
                                  f->nnodes);
    if (parse_endpoint("--rdzv-endpoint", f->endpoint, C10D_DEFAULT_PORT, r->host, sizeof r->host, &r->port))
        return DT_EXIT_REFUSED;
    if (f->node_rank && strcmp(f->node_rank, "0") != 0) /* torchrun's own warning */
        dt_log_warn("--node-rank is only used with the static rendezvous; ignored for c10d, where the "
                    "nodes are numbered as they come");
    bool host = r->conf.is_host >= 0 ? r->conf.is_host == 1 : this_machine(r->host);
    if (host && (r->lock_fd = claim_host(r->port, f->id)) < 0) {
        if (r->conf.is_host == 1)
            return dt_cli_usage_error("run", "--rdzv-conf is_host=1, but another `dtrain run` of this machine "
                                             "hosts port %d already", r->port);
        host = false; /* another process here hosts it: join it, as torchrun does */
    }
    r->hosting = host;
    r->elastic = r->nmin < r->nmax;
    r->take_node_rank = !host && !r->elastic;
    r->node_rank = host ? 0 : -1;
    return 0;
}

int dt_cli__rdzv_resolve(const struct dt_cli__rdzv_flags *f, struct dt_cli__rdzv *r)
{
    *r = (struct dt_cli__rdzv){.nmin = 1, .nmax = 1, .node_rank = 0, .lock_fd = -1, .backend = "c10d"};
    if (f->nnodes && dt_job_parse_nodes(f->nnodes, &r->nmin, &r->nmax) < 0)
        return dt_cli_usage_error("run", "--nnodes: %s", dt_error_last());
    if (f->standalone) {
        if (r->nmax > 1)
            return dt_cli_usage_error("run", "--standalone runs one node, and --nnodes %s asks for more", f->nnodes);
        return one_node(&(struct dt_cli__rdzv_flags){0}, r);
    }
    if (parse_conf(f->conf, &r->conf))
        return DT_EXIT_REFUSED;
    const char *b = f->backend ? f->backend : r->nmin < r->nmax ? "c10d" : "static";
    if (!strcmp(b, "etcd") || !strcmp(b, "etcd-v2"))
        return dt_cli_usage_error("run", "--rdzv-backend %s: dtrain's coordinator is the rendezvous; use c10d "
                                         "(or static) with its address as --rdzv-endpoint", b);
    if (strcmp(b, "static") && strcmp(b, "c10d"))
        return dt_cli_usage_error("run", "--rdzv-backend '%s': expected static or c10d", b);
    r->backend = b;
    r->run_id = f->id && strcmp(f->id, "none") ? f->id : NULL;
    if (!f->local_scheduler) {
        if (f->node_rank || f->master_addr || (f->endpoint && *f->endpoint))
            return dt_cli_usage_error("run", "--node-rank, --master-addr and --rdzv-endpoint place nodes started "
                                             "by hand (scheduler local); this scheduler places its nodes itself");
        return one_node(&(struct dt_cli__rdzv_flags){.master_port = f->master_port}, r);
    }
    if (r->nmax == 1)
        return one_node(f, r);
    r->several = true;
    int rc = !strcmp(b, "static") ? static_nodes(f, r) : c10d_nodes(f, r);
    if (rc)
        return rc;
    bool ep = f->endpoint && *f->endpoint;
    if (r->port == 0)
        return dt_cli_usage_error("run", "%s %s: a job of several nodes needs a port every node knows, not 0",
                                  ep ? "--rdzv-endpoint" : "--master-port", ep ? f->endpoint : "0");
    r->one_machine = is_loopback(r->host);
    r->bind = !r->hosting ? NULL : r->one_machine ? "127.0.0.1" : "0.0.0.0";
    return 0;
}

/* --- the job token of several nodes ---------------------------------------- */

int dt_cli__token_default(char *path, size_t size)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg ? snprintf(path, size, "%s/dtrain/job-token", xdg)
            : home && *home ? snprintf(path, size, "%s/.config/dtrain/job-token", home)
                            : -1;
    return n < 0 || (size_t)n >= size ? DT_ENOTFOUND : 0;
}

/* Nodes that are all processes of this machine share its files: the first
 * to come makes the default token file (0600), the others read it.  The
 * token is written whole under a name of this process and linked into
 * place, so a node finds no file or a whole one; EEXIST from link() means
 * another node made it first, and its token is the job's. */
static int make_default_token(const char *path, char out[DT_TOKEN_LEN + 1])
{
    char dir[4096], tmp[4200], tok[DT_TOKEN_LEN + 1];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int rc = slash ? dt_fs_mkdir_p(dir, 0700, "job token's directory") : 0;
    if (rc == 0)
        rc = dt_token_make(tok);
    if (rc < 0)
        return rc;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "making the job token file %s", tmp);
    bool whole = dprintf(fd, "%s\n", tok) == DT_TOKEN_LEN + 1;
    memset(tok, 0, sizeof tok);
    if (close(fd) != 0 || !whole)
        rc = dt_error_set(DT_EIO, "writing the job token file %s", tmp);
    else if (link(tmp, path) == 0)
        dt_log_info("made the job token every node of this machine reads: %s (mode 600)", path);
    else if (errno != EEXIST)
        rc = dt_error_set_errno(DT_EIO, errno, "making the job token file %s", path);
    unlink(tmp);
    return rc < 0 ? rc : dt_token_from_file(path, out);
}

int dt_cli__rdzv_token(const char *token_file, bool one_machine, char out[DT_TOKEN_LEN + 1])
{
    bool found = false;
    if (token_file)
        return dt_token_from_file(token_file, out);
    int rc = dt_token_from_env(out, &found);
    if (rc < 0 || found)
        return rc;
    char def[4096];
    if (dt_cli__token_default(def, sizeof def) == 0 && access(def, F_OK) == 0)
        return dt_token_from_file(def, out);
    if (one_machine && dt_cli__token_default(def, sizeof def) == 0)
        return make_default_token(def, out);
    return dt_error_set(DT_EINVAL,
                        "every node of the job needs the same job token (rendezvous.auth: token) and none was "
                        "given: put one in a file the nodes share (`umask 077; openssl rand -hex 32 > %s`, or "
                        "--token-file FILE), or export DTRAIN_JOB_TOKEN=<64 hex digits> on every node",
                        dt_cli__token_default(def, sizeof def) == 0 ? def : "~/.config/dtrain/job-token");
}

int dt_cli__rdzv_take_node_rank(struct dt_cli__rdzv *r, const char *token, double timeout_s)
{
    struct dt_store_options so = {.host = r->host, .port = r->port, .token = token, .timeout_s = timeout_s};
    struct dt_store *s = NULL;
    int64_t k = 0;
    int rc = dt_store_connect(&so, &s);
    if (rc == 0)
        rc = dt_store_add(s, NODE_RANK_KEY, 1, &k);
    dt_store_close(s);
    if (rc < 0)
        return dt_error_prefix("taking a node rank at the coordinator %s:%d (--rdzv-endpoint)", r->host, r->port);
    if (k >= r->nmax)
        return dt_error_set(DT_EINVAL,
                            "the coordinator at %s:%d has numbered %d nodes already: --nnodes %d is full "
                            "(a node started twice?)",
                            r->host, r->port, (int)k, r->nmax);
    r->node_rank = (int)k;
    dt_log_info("node %d of %d (numbered as the nodes came, by the coordinator at %s:%d)", r->node_rank, r->nmax,
                r->host, r->port);
    return 0;
}

void dt_cli__rdzv_release(struct dt_cli__rdzv *r)
{
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    r->lock_fd = -1;
}
