/* mpirun_submit.c - `dtrain launch` for scheduler: mpirun, in its two shapes.
 *
 * backend: mpi.  The launcher is node 0 of the job, as in a local job: the
 * plan asks it to host node 0 (adapter.h), whose agent makes the run
 * directory and the job token,
 * hosts the coordinator (the ranks' store: metrics, heartbeats), and runs
 * `mpirun -np <world> ... dtrain mpirank -- dtrain worker job.yaml` (or the
 * spec's command) as the one process that stands for every rank: the group
 * below.  The agent restarts, stops, logs and summarises it as it does ranks
 * it forks; what it asks of this file is the process's environment and
 * command line, whose rank each output line is, and how each rank ended:
 *  - every rank gets the environment a local rank would get, passed as
 *    -x NAME (mpirun copies the value from its own environment, so the token
 *    never appears on a command line); what differs per rank (RANK,
 *    LOCAL_RANK, ...) each rank reads from mpirun's OMPI_COMM_WORLD_*
 *    (dt_mpirun_rank_env);
 *  - lines arrive tagged (--tag-output: "[job,rank]<stdout>:text");
 *  - `dtrain mpirank` records each rank's end in attempt_<k>/rank_<r>.exit
 *    (mpirun_rank.c); without the records (a run directory not shared with
 *    the other hosts) mpirun's own closing report names the rank.
 *
 * Other backends: mpirun starts one `dtrain agent job.yaml` per node
 * (--map-by ppr:1:node).  Before any agent starts, every agent must know the
 * run id (it names the run directory on each node), the job token and where
 * node 0's coordinator will listen.  The launcher picks them and hands them
 * over as -x NAME: a port from rendezvous.port, else a free one on this
 * machine when node 0 is this machine, else one derived from the run id
 * (29500-29999) that the agents' rendezvous deadline guards.  The agents
 * supervise and restart their ranks, and prefix and log their lines; the
 * plan is mpirun run as a helper (the launcher runs it through base/proc.h:
 * SIGINT, SIGTERM, SIGHUP or SIGQUIT become SIGTERM to mpirun, which stops
 * the agents, and SIGKILL to its process group after the grace period), with
 * mpirun's --tag-output tags taken off the agents' lines here, and the
 * launcher's exit status mpirun's, which is the first failed agent's.
 *
 * Not for the command line's shape (mpirun_argv.c), what mpirun prints
 * (mpirun_output.c), or running anything (the launcher carries out the plan).
 */
#include "scheduler-adapters/mpirun/mpirun_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/lines.h"
#include "base/log.h"
#include "base/run_dir.h"
#include "scheduler-adapters/run_record.h"
#include "spec/token.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

/* --- backend: mpi, the group --------------------------------------------- */

/* True when every rank runs on this machine: then the coordinator stays on loopback. */
static bool all_local(const struct dt_job *job)
{
    const struct dt_mpirun_spec *m = job->mpirun;
    if (m && m->hostfile)
        return false;
    if (!m || !m->n_hosts)
        return job->nodes == 1;
    for (int i = 0; i < m->n_hosts; i++) {
        char h[256];
        snprintf(h, sizeof h, "%.*s", (int)strcspn(m->hosts[i], ":"), m->hosts[i]);
        if (!dt_mpirun__is_here(h))
            return false;
    }
    return true;
}

/* How other hosts reach this one when the spec names a network: the address
 * of mpirun.interfaces[0] (the network the user chose for MPI), else of
 * comm.interfaces[0] (the ranks' network).  False, out untouched, if neither
 * names an interface with an IPv4 address here. */
static bool interface_host(const struct dt_job *job, char *out, size_t size)
{
    const struct dt_mpirun_spec *m = job->mpirun;
    const char *want = m && m->n_interfaces     ? m->interfaces[0]
                       : job->comm.n_interfaces ? job->comm.interfaces[0]
                                                : NULL;
    struct ifaddrs *ifs = NULL;
    if (!want || getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, want))
            found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)size);
    freeifaddrs(ifs);
    return found;
}

/* How other hosts reach this one: interface_host(), else this host's name. */
static void advertised_host(const struct dt_job *job, char *out, size_t size)
{
    if (!interface_host(job, out, size))
        gethostname(out, size - 1);
}

/* What differs per rank: each rank reads it from mpirun (dt_mpirun_rank_env),
 * so it stays out of mpirun's environment. */
static const char *const per_rank_names[] = {"RANK",
                                             "LOCAL_RANK",
                                             "WORLD_SIZE",
                                             "LOCAL_WORLD_SIZE",
                                             "GROUP_RANK",
                                             "ROLE_RANK",
                                             "ROLE_WORLD_SIZE",
                                             "DTRAIN_NODE_RANK",
                                             "TORCHELASTIC_ERROR_FILE",
                                             "DTRAIN_ERROR_FILE",
                                             "DTRAIN_MPI_RANKS",
                                             NULL};
/* Passed on besides what dtrain sets for every rank (dt_job_env_is_reserved):
 * the defaults a rank gets, the word that tells a rank to read its place from
 * mpirun, and the knobs dtrain's own programs read. */
static const char *const also_passed[] = {"OMP_NUM_THREADS", "PYTHONUNBUFFERED", "DTRAIN_MPI_RANKS",
                                          "DTRAIN_TRACE",    "DTRAIN_LOG",       NULL};

static bool named(const char *entry, const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(entry, names[i], n) && entry[n] == '=')
            return true;
    }
    return false;
}

/* Whether mpirun passes this entry of its environment on to every rank: what
 * a local rank gets that is the same on every rank, and the spec's env:. */
static bool passed_on(const struct dt_job *job, const char *entry)
{
    char name[128];
    size_t len = strcspn(entry, "=");
    if (len >= sizeof name)
        return false;
    memcpy(name, entry, len);
    name[len] = 0;
    if (named(entry, also_passed))
        return true;
    if (dt_job_env_is_reserved(name))
        return !named(entry, per_rank_names);
    for (int k = 0; k < job->n_env; k++)
        if (!strcmp(job->env[k].name, name))
            return true;
    return false;
}

static void free_names(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* The -x list, in the order of env (mpirun's environment): the names it
 * passes on.  Malloc'd; free with free_names. */
static char **export_names(const struct dt_job *job, char *const *env)
{
    size_t n = 0, k = 0;
    while (env[n])
        n++;
    char **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        if (passed_on(job, env[i]) && !(v[k++] = strndup(env[i], strcspn(env[i], "=")))) {
            free_names(v);
            return NULL;
        }
    return v;
}

/* What the agent asks of the group, and what it keeps between attempts. */
struct mpi_group {
    const struct dt_job *job;
    const struct dt_adapter_launch *opts;
    struct dt_placement pl;
    struct dt_mpirun_line line;
    struct dt_mpirun_verdict verdict; /* mpirun's closing report, read from its own lines */
    char scratch[DT_LINES_MAX + 1];   /* a rank's line with tags taken out of it */
    char host[256];                   /* how the ranks reach the coordinator */
    struct dt_adapter_group group;
};

int dt_mpirun_group_env(char *const *rank_env, const char *also, char ***out)
{
    size_t n = 0;
    while (rank_env[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    size_t w = 0;
    bool ok = env != NULL;
    for (size_t i = 0; ok && i < n; i++)
        if (!named(rank_env[i], per_rank_names))
            ok = (env[w++] = strdup(rank_env[i])) != NULL;
    ok = ok && (env[w++] = strdup("DTRAIN_MPI_RANKS=1")) != NULL;
    ok = ok && (!also || (env[w] = strdup(also)) != NULL);
    if (ok) {
        *out = env;
        return 0;
    }
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
    return dt_error_set(DT_ENOMEM, "out of memory building the ranks' launcher's environment");
}

/* mpirun's environment for an attempt: a rank's, less what differs per rank. */
static int group_env(void *ctx, char *const *rank_env, char ***out)
{
    (void)ctx;
    return dt_mpirun_group_env(rank_env, NULL, out);
}

static int group_argv(void *ctx, char *const *env, char *const **argv)
{
    struct mpi_group *g = ctx;
    char **names = export_names(g->job, env);
    if (!names)
        return dt_error_set(DT_ENOMEM, "out of memory");
    char self[PATH_MAX], spec[PATH_MAX + 16];
    snprintf(self, sizeof self, "%s", g->opts->dtrain_path ? g->opts->dtrain_path : "dtrain");
    /* The MPI ranks read the spec from the run directory (job.yaml, written
     * by this launch), not from a file anyone could replace between restarts. */
    const char *run_dir = NULL;
    for (int i = 0; env && env[i] && !run_dir; i++)
        if (strncmp(env[i], "DTRAIN_RUN_DIR=", 15) == 0)
            run_dir = env[i] + 15;
    snprintf(spec, sizeof spec, "%s%s%s", run_dir ? run_dir : g->job->path, run_dir ? "/" : "",
             run_dir ? DT_RUN_RECORD_SPEC : "");
    struct dt_mpirun_call call = {.dtrain = self,
                                  .job_path = spec,
                                  .export_names = (const char *const *)names,
                                  .tag_output = true,
                                  .rank_wrapper = true};
    int rc = dt_mpirun_build(g->job, &g->pl, &call, &g->line);
    free_names(names);
    *argv = g->line.argv;
    return rc;
}

static int group_route(void *ctx, const char *line, size_t len, const char **text, size_t *text_len,
                       bool *is_err)
{
    struct mpi_group *g = ctx;
    int rank;
    if (dt_mpirun__untag(line, len, g->scratch, &rank, is_err, text, text_len) && rank >= 0 &&
        rank < g->pl.world)
        return rank;
    dt_mpirun_verdict_feed(&g->verdict, line, len);
    return -1;
}

/* --- how each rank ended ------------------------------------------------- */

static int group_collect(void *ctx, const char *attempt_dir, int status, bool interrupted,
                         struct dt_adapter_rank_end *ends)
{
    struct mpi_group *g = ctx;
    struct dt_mpirun_verdict v = g->verdict;
    g->verdict = (struct dt_mpirun_verdict){.rank = -1}; /* the next attempt's report is its own */
    int q = dt_mpirun_rank_ends(attempt_dir, g->pl.world, status, ends);
    if (q >= 0 || status == 0 || interrupted || v.rank < 0 || v.rank >= g->pl.world)
        return q;
    /* No record (run directory not shared with that host): mpirun's word. */
    int st = v.status ? v.status : status;
    ends[v.rank].exited = true;
    ends[v.rank].wstatus = v.signaled ? st - 128 : (st & 0xff) << 8;
    ends[v.rank].exit_unix = dt_clock_wall_s();
    return v.rank;
}

/* --- other backends, an agent per node ----------------------------------- */

/* A port the kernel calls free now (the agent binds it moments later). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The record, and the spec the agents read: the run directory's job.yaml
 * (the spec as loaded, private to the user, written once per launch), or
 * the user's file when the record could not be written. */
static int record(const struct dt_job *job, const struct dt_adapter_launch *opts, const char *run_id,
                  char spec[PATH_MAX + 16])
{
    struct dt_run_record rec; /* dtrain status/logs/cancel find the job by it */
    if (dt_run_record_begin(job, opts->log_dir ? opts->log_dir : job->log_dir, run_id, NULL, &rec) == 0) {
        snprintf(spec, PATH_MAX + 16, "%s/%s", rec.run_dir, DT_RUN_RECORD_SPEC);
        return 0;
    }
    if (job->derived) /* its only copy is the launcher's own */
        return dt_error_prefix("the job as given (${VAR}, --set) reaches the agents through its run "
                               "directory's %s, which cannot be written",
                               DT_RUN_RECORD_SPEC);
    dt_log_warn("no launch record for run %s (dtrain status cannot name it): %s", run_id, dt_error_last());
    dt_error_clear();
    snprintf(spec, PATH_MAX + 16, "%s", job->path);
    return 0;
}

static int settle(const struct dt_job *job, const struct dt_adapter_launch *opts, char run_id[DT_RUN_ID_MAX],
                  char token[65], char host[256], int *port, char spec[PATH_MAX + 16])
{
    int rc = 0;
    if (opts->run_id) /* --resume: the run's own directory */
        snprintf(run_id, DT_RUN_ID_MAX, "%s", opts->run_id);
    else
        rc = dt_run_dir_make_id(run_id, DT_RUN_ID_MAX);
    if (rc == 0)
        rc = record(job, opts, run_id, spec);
    if (rc == 0 && job->rendezvous.auth != DT_AUTH_NONE)
        rc = dt_token_make(token);
    if (rc == 0)
        rc = dt_mpirun_first_host(job->mpirun, host, 256);
    if (rc)
        return rc;
    if (!host[0])
        gethostname(host, 255); /* mpirun maps rank 0 to the first node of the allocation: this one */
    /* Node 0 here, named as mpirun reaches it (often a management network):
     * the agents and ranks reach it on the network the spec names, if any. */
    char named[256];
    if (dt_mpirun__is_here(host) && interface_host(job, named, sizeof named))
        snprintf(host, 256, "%s", named);
    *port = job->rendezvous.port;
    if (*port <= 0 && dt_mpirun__is_here(host))
        *port = free_port();
    if (*port <= 0) {
        unsigned h = 2166136261u;
        for (const char *p = run_id; *p; p++)
            h = (h ^ (unsigned char)*p) * 16777619u;
        *port = 29500 + (int)(h % 500);
        dt_log_info(
            "rendezvous.port is 0 and node 0 (%s) is another host: the coordinator will listen on port %d "
            "there (set rendezvous.port to choose)",
            host, *port);
    }
    return 0;
}

/* What the plan of the agents' shape keeps: mpirun's line and environment,
 * and what its lines said.  Lines come as they are printed: an agent's
 * without mpirun's tag (the agents prefix their ranks' lines themselves),
 * mpirun's own ones on stderr and into its verdict (which agent ended first). */
struct agents {
    const struct dt_job *job;
    struct dt_mpirun_line line;
    char **envp;
    struct dt_mpirun_verdict verdict;
    double stop_after_s; /* mpirun's time to end once it said it aborts the job */
    double start;
    char grace[32];
    const char *args[8];
    char scratch[DT_LINES_MAX + 1];
    char text[DT_LINES_MAX + 2];
};

/* mpirun's "Per user-direction, the job has been aborted." (an agent exited
 * non-zero) is followed by its exit within seconds, except when a daemon of
 * its sits on a host it can no longer reach (a partition): it then waits for
 * TCP's timeouts, minutes, while every agent has ended.  So from that line
 * on it gets stop_after_s, then SIGTERM (the plan's line, adapter.h). */
static double agents_line(void *ctx, int stream, const char *line, size_t len)
{
    static const char said[] = "the job has been aborted";
    (void)stream;
    struct agents *a = ctx;
    int node;
    bool err = true, aborted = false;
    const char *text = line;
    size_t n = len;
    if (!dt_mpirun__untag(line, len, a->scratch, &node, &err, &text, &n)) {
        dt_mpirun_verdict_feed(&a->verdict, line, len);
        aborted = memmem(line, len, said, sizeof said - 1) != NULL;
    }
    memcpy(a->text, text, n);
    a->text[n] = '\n';
    fwrite(a->text, 1, n + 1, err ? stderr : stdout);
    fflush(err ? stderr : stdout);
    return aborted ? a->stop_after_s : 0;
}

/* The launcher's options that the agents apply, after `dtrain agent job.yaml`
 * (without --grace-period they read grace_period from the spec, as here). */
static void agent_args(const struct dt_adapter_launch *opts, char grace[32], const char *args[8])
{
    int n = 0;
    if (opts->grace_s > 0) {
        snprintf(grace, 32, "%g", opts->grace_s);
        args[n++] = "--grace-period";
        args[n++] = grace;
    }
    if (opts->log_dir) {
        args[n++] = "--log-dir";
        args[n++] = opts->log_dir;
    }
    if (opts->ranks) {
        args[n++] = "--ranks";
        args[n++] = opts->ranks;
    }
    args[n] = NULL;
}

static int agents_finish(void *ctx, const struct dt_adapter_ran *ran)
{
    struct agents *a = ctx;
    const struct dt_job *job = a->job;
    int status = ran->status;
    if (status < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    if (ran->signal)
        return 128 + ran->signal;
    if (ran->stopped) {
        dt_log_error("job %s failed: mpirun had not ended %g s after it aborted the job (a host it cannot "
                     "reach any more?); it was stopped",
                     job->name, a->stop_after_s);
        return a->verdict.rank >= 0 && a->verdict.status > 0 ? a->verdict.status : 1;
    }
    if (status && a->verdict.rank >= 0)
        dt_log_error("job %s failed: mpirun exited with status %d; the agent of node %d ended first",
                     job->name, status, a->verdict.rank);
    else if (status)
        dt_log_error("job %s failed: mpirun exited with status %d", job->name, status);
    else /* node 0's agent said so already (agent_summary.c): one line per job */
        dt_log_debug("job %s succeeded in %.2f s", job->name, dt_clock_s() - a->start);
    return status;
}

static void agents_release(void *ctx)
{
    struct agents *a = ctx;
    dt_mpirun_line_free(&a->line);
    dt_adapter_env_free(a->envp);
    free(a);
}

/* mpirun's environment: ours, with what every agent must know before it starts. */
static char **agents_env(const char *token, const char *host, int port, const char *run_id)
{
    char t[96], h[300], p[48], r[32 + DT_RUN_ID_MAX];
    snprintf(t, sizeof t, "DTRAIN_JOB_TOKEN=%s", token);
    snprintf(h, sizeof h, "DTRAIN_COORD_HOST=%s", host);
    snprintf(p, sizeof p, "DTRAIN_COORD_PORT=%d", port);
    snprintf(r, sizeof r, "DTRAIN_RUN_ID=%s", run_id);
    char *set[] = {h, p, r, token[0] ? t : NULL, NULL};
    char **env = dt_adapter_env_with(environ, set);
    memset(t, 0, sizeof t);
    return env;
}

static int plan_agents(const struct dt_job *job, const struct dt_placement *pl,
                       const struct dt_adapter_launch *opts, struct dt_adapter_plan *out)
{
    struct agents *a = calloc(1, sizeof *a);
    if (!a)
        return dt_error_set(DT_ENOMEM, "out of memory");
    *a = (struct agents){.job = job, .verdict = {.rank = -1}, .start = opts->start_mono};
    out->ctx = a;
    out->release = agents_release;
    char run_id[DT_RUN_ID_MAX], token[65] = "", host[256] = "", spec[PATH_MAX + 16];
    int port = 0;
    int rc = settle(job, opts, run_id, token, host, &port, spec);
    if (rc == 0 && !(a->envp = agents_env(token, host, port, run_id)))
        rc = DT_ENOMEM;
    memset(token, 0, sizeof token);
    agent_args(opts, a->grace, a->args);
    struct dt_mpirun_call call = {.dtrain = opts->dtrain_path ? opts->dtrain_path : "dtrain",
                                  .job_path = spec,
                                  .export_names = dt_mpirun__agent_exports(job),
                                  .tag_output = true,
                                  .agent_args = a->args};
    if (rc == 0)
        rc = dt_mpirun_build(job, pl, &call, &a->line);
    if (rc)
        return rc;
    dt_log_info("job %s: %d agent%s through %s, coordinator %s:%d (node 0), run id %s", job->name, job->nodes,
                job->nodes == 1 ? "" : "s", a->line.argv[0], host, port, run_id);
    out->argv = a->line.argv;
    out->envp = a->envp;
    out->io[0] = out->io[1] = DT_PLAN_LINES;
    out->grace_s = opts->grace_s > 0 ? opts->grace_s : job->grace_period_s;
    out->line = agents_line;
    out->finish = agents_finish;
    /* The agents left end within heartbeat_timeout and their grace period (docs/multinode.md). */
    double hb = job->rendezvous.heartbeat_timeout_s > 0 ? job->rendezvous.heartbeat_timeout_s
                                                        : job->rendezvous.timeout_s;
    a->stop_after_s = hb + out->grace_s + 10;
    return 0;
}

/* --- the plan ------------------------------------------------------------ */

static void group_release(void *ctx)
{
    struct mpi_group *g = ctx;
    dt_mpirun_line_free(&g->line);
    free(g);
}

static int plan_mpi(const struct dt_job *job, const struct dt_placement *pl,
                    const struct dt_adapter_launch *opts, struct dt_adapter_plan *out)
{
    struct mpi_group *g = calloc(1, sizeof *g);
    if (!g)
        return dt_error_set(DT_ENOMEM, "out of memory");
    *g = (struct mpi_group){.job = job, .opts = opts, .pl = *pl, .verdict = {.rank = -1}};
    g->group = (struct dt_adapter_group){.world = pl->world,
                                         .log_name = "mpirun.err",
                                         .ctx = g,
                                         .env = group_env,
                                         .argv = group_argv,
                                         .route = group_route,
                                         .collect = group_collect};
    bool local = all_local(job);
    snprintf(g->host, sizeof g->host, "127.0.0.1");
    if (!local)
        advertised_host(job, g->host, sizeof g->host);
    out->host_node0 = true;
    out->host = (struct dt_adapter_host){.nnodes = pl->nnodes,
                                         .nproc = pl->nproc,
                                         .bind = local ? "127.0.0.1" : "0.0.0.0",
                                         .advertise = g->host,
                                         .group = &g->group};
    out->ctx = g;
    out->release = group_release;
    return 0;
}

int dt_mpirun__plan(const struct dt_job *job, const struct dt_adapter_launch *opts,
                    struct dt_adapter_plan *out)
{
    const char *prog = job->mpirun && job->mpirun->program ? job->mpirun->program : "mpirun";
    if (!dt_fs_on_path(prog))
        return dt_error_set(
            DT_ENOTFOUND, "%s: mpirun.program '%s' %s (Debian: apt-get install openmpi-bin)", job->path, prog,
            strchr(prog, '/') ? "does not exist or is not executable" : "was not found on PATH");
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SPEC, &pl);
    if (!dt_mpirun_ranks_are_mpi(job))
        return plan_agents(job, &pl, opts, out);
    if (pl.nproc < 1)
        return dt_error_set(
            DT_EINVAL,
            "%s: nproc_per_node: gpu with backend: mpi; mpirun needs a number of ranks per node "
            "(write it, e.g. nproc_per_node: 8)",
            job->path);
    return plan_mpi(job, &pl, opts, out);
}
