/* mpirun_submit.c - `dtrain launch` for scheduler: mpirun.
 *
 * backend: mpi.  The launcher is the job's parent, as in a local job: it
 * makes the run directory and the job token, hosts the coordinator (the
 * ranks' store: metrics, heartbeats), and runs `mpirun -np <world> ...
 * dtrain worker job.yaml` (or the spec's command) as one supervised child,
 * restarting it as a whole up to max_restarts times.  Every rank gets the
 * environment a local rank would get, passed as -x NAME; what differs per
 * rank (RANK, LOCAL_RANK, ...) each rank reads from mpirun's OMPI_COMM_WORLD_*
 * (dt_mpirun_rank_env).  summary.json has the same shape as a local job's;
 * which rank failed first is what mpirun reports.
 *
 * Other backends.  mpirun starts one `dtrain agent job.yaml` per node
 * (--map-by ppr:1:node); node 0's agent hosts the coordinator and the agents
 * restart their ranks themselves.  The launcher settles what every agent must
 * agree on before any starts (run id, token, the coordinator's host and port),
 * passes it as -x NAME, and follows mpirun to its end.
 *
 * Not for the command line's shape (mpirun_argv.c) or the output (mpirun_supervise.c).
 */
#include "scheduler-adapters/mpirun_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/args.h"
#include "base/error.h"
#include "base/proc.h"
#include "base/log.h"
#include "launcher/coordinator.h"
#include "launcher/run_dir.h"
#include "scheduler-adapters/adapter.h"
#include "spec/token.h"
#include "base/clock.h"
#include "base/fs.h"

extern char **environ;

static bool is_local_name(const char *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, me);
}

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
        if (!is_local_name(h))
            return false;
    }
    return true;
}

/* How other hosts reach this one: the address of mpirun.interfaces[0] when
 * named (the network the user chose for MPI), else this host's name. */
static void advertised_host(const struct dt_job *job, char *out, size_t size)
{
    gethostname(out, size - 1);
    const struct dt_mpirun_spec *m = job->mpirun;
    struct ifaddrs *ifs = NULL;
    if (!m || !m->n_interfaces || getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, m->interfaces[0])) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)size);
            break;
        }
    freeifaddrs(ifs);
}

/* Names every rank gets through -x: what a local rank gets that is the same
 * on every rank.  RANK and the like each rank reads from mpirun. */
static const char *const shared_names[] = {
    "GROUP_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "DTRAIN_COORD_ADDR",
    "DTRAIN_JOB_TOKEN", "DTRAIN_RUN_DIR", "DTRAIN_RUN_ID", "DTRAIN_JOB_NAME", "DTRAIN_NNODES",
    "DTRAIN_RESTART_COUNT", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "DTRAIN_MPI_RANKS", "DTRAIN_TRACE",
    "DTRAIN_LOG", NULL};
static const char *const per_rank_names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                             "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "DTRAIN_NODE_RANK",
                                             "TORCHELASTIC_ERROR_FILE", "DTRAIN_ERROR_FILE", NULL};

static bool named(const char *entry, const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(entry, names[i], n) && entry[n] == '=')
            return true;
    }
    return false;
}

/* The export list: those of shared_names, then of the spec's env: names,
 * that env (mpirun's environment) has; mpirun warns about absent ones. */
static const char **export_names(const struct dt_job *job, char *const *env)
{
    const char **v = calloc(sizeof shared_names / sizeof *shared_names + (size_t)job->n_env, sizeof *v);
    int n = 0;
    for (int i = 0; v && env[i]; i++) {
        size_t len = strcspn(env[i], "=");
        for (int k = 0; shared_names[k]; k++)
            if (strlen(shared_names[k]) == len && !strncmp(env[i], shared_names[k], len))
                v[n++] = shared_names[k];
        for (int k = 0; k < job->n_env; k++)
            if (strlen(job->env[k].name) == len && !strncmp(env[i], job->env[k].name, len) &&
                !named(env[i], shared_names) && !dt_job_env_is_reserved(job->env[k].name))
                v[n++] = job->env[k].name;
    }
    return v;
}

/* mpirun's environment for attempt k: a rank's, less what differs per rank. */
static int mpi_env(const struct dt_agent_config *cfg, int restart, char ***out)
{
    char **env;
    int rc = dt_agent_env_build(cfg, 0, restart, environ, &env);
    if (rc)
        return rc;
    int w = 0;
    for (int i = 0; env[i]; i++) {
        if (named(env[i], per_rank_names) || named(env[i], (const char *const[]){"DTRAIN_MPI_RANKS", NULL}))
            free(env[i]);
        else
            env[w++] = env[i];
    }
    env[w] = strdup("DTRAIN_MPI_RANKS=1");
    env[w + 1] = NULL;
    *out = env;
    return env[w] ? 0 : dt_error_set(DT_ENOMEM, "out of memory building mpirun's environment");
}

struct run {
    const struct dt_job *job;
    const struct dt_adapter_launch *opts;
    int nproc, world;
    unsigned char *show;
    char run_id[DT_RUN_ID_MAX], run_dir[PATH_MAX], token[65], host[256];
    struct dt_coord *coord;
    struct dt_mpirun_line line;
    struct dt_agent_config cfg;
    struct dt_agent_result res;
};

/* What `dtrain mpirank` wrote for rank q: how it ended, whether mpirun had
 * stopped it, and when (CLOCK_REALTIME ns).  -1 when there is no record. */
static int read_exit(const char *dir, int q, int *ws, int *stopped, int *pid, long long *t_ns)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/rank_%d.exit", dir, q);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = fscanf(f, "wstatus=%d stopped=%d pid=%d time_ns=%lld", ws, stopped, pid, t_ns);
    fclose(f);
    return n == 4 ? 0 : -1;
}

/* The pid `dtrain mpirank` recorded when rank q's program started, or 0. */
static int read_pid(const char *dir, int q)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/rank_%d.pid", dir, q);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int pid = 0;
    if (fscanf(f, "pid=%d", &pid) != 1 || pid < 0)
        pid = 0;
    fclose(f);
    return pid;
}

/* Fills attempt k from the ranks' exit records; returns the first rank that
 * failed by itself (earliest record), or -1. */
static int record_ranks(struct run *r, int k, const char *dir, struct dt_mpirun_attempt *a)
{
    struct dt_agent_attempt *at = &r->res.attempts[k];
    /* realtime of the launcher's start, to put the records on its clock */
    double t0_real = dt_clock_wall_s() - (dt_clock_s() - r->cfg.start_mono);
    int first = -1;
    long long first_t = 0;
    for (int q = 0; q < r->world; q++) {
        struct dt_agent_rank_result *rr = &at->ranks[q];
        *rr = (struct dt_agent_rank_result){.rank = q, .spawn_s = a->start_s, .stopped_by_agent = a->status != 0};
        int ws, stopped, pid;
        long long t;
        if (read_exit(dir, q, &ws, &stopped, &pid, &t) != 0) {
            rr->pid = read_pid(dir, q); /* killed before it could say how it ended */
            continue;
        }
        *rr = (struct dt_agent_rank_result){.rank = q, .pid = pid, .exited = true, .wstatus = ws,
                                            .stopped_by_agent = stopped != 0, .spawn_s = a->start_s,
                                            .exit_s = (double)t * 1e-9 - t0_real};
        if (!stopped && ws != 0 && (first < 0 || t < first_t)) {
            first = q;
            first_t = t;
        }
    }
    return first;
}

static void record(struct run *r, int k, const char *dir, struct dt_mpirun_attempt *a)
{
    struct dt_agent_attempt *at = &r->res.attempts[k];
    at->start_s = a->start_s;
    at->end_s = a->end_s;
    at->first_failed = -1;
    at->hung = -1; /* mpirun has no watchdog of ours: no rank is ever declared hung */
    at->leftovers = a->leftovers;
    int q = record_ranks(r, k, dir, a);
    if (a->status == 0 || a->interrupt_signal)
        return;
    if (q < 0 && a->verdict.rank >= 0 && a->verdict.rank < r->world) {
        /* No record (run directory not shared with that host): mpirun's word. */
        q = a->verdict.rank;
        int status = a->verdict.status ? a->verdict.status : a->status;
        at->ranks[q].exited = true;
        at->ranks[q].wstatus = a->verdict.signaled ? status - 128 : (status & 0xff) << 8;
        at->ranks[q].exit_s = a->end_s;
    }
    if (q < 0)
        return;
    at->first_failed = q;
    at->ranks[q].stopped_by_agent = false;
    struct dt_agent_failure *ff = &r->res.first_failure;
    r->res.have_failure = true;
    *ff = (struct dt_agent_failure){.attempt = k, .rank = q, .wstatus = at->ranks[q].wstatus,
                                    .time_s = at->ranks[q].exit_s, .oom_killer = -1};
    ff->n_tail = dt_agent_tail_copy(&a->tails[q], ff->tail);
    snprintf(ff->error_file, sizeof ff->error_file, "%s/rank_%d.error.json", dir, q);
    if (access(ff->error_file, R_OK) != 0)
        ff->error_file[0] = 0;
    else
        dt_agent_error_file_message(ff->error_file, ff->error_message, sizeof ff->error_message);
}

/* One attempt of the MPI ranks; returns its status. */
static int mpi_attempt(struct run *r, int k)
{
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/attempt_%d", r->run_dir, k);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s", dir);
    char **env;
    int rc = mpi_env(&r->cfg, k, &env);
    if (rc)
        return rc;
    struct dt_mpirun_attempt a = {.argv = r->line.argv, .envp = env, .attempt_dir = dir, .world = r->world,
                                  .prefix_ranks = true, .show = r->show, .grace_s = r->cfg.grace_s,
                                  .t0 = r->cfg.start_mono};
    rc = dt_mpirun_run_attempt(&a);
    dt_agent_env_free(env);
    if (rc == 0) {
        record(r, k, dir, &a);
        r->res.n_attempts = k + 1;
        r->res.exit_status = a.interrupt_signal ? 128 + a.interrupt_signal : a.status;
        int ff = r->res.attempts[k].first_failed;
        if (a.status && !a.interrupt_signal && ff >= 0) /* the rank's own status, as a local job reports */
            r->res.exit_status = dt_proc_exit_status(r->res.attempts[k].ranks[ff].wstatus);
        r->res.interrupt_signal = a.interrupt_signal;
        r->res.status = a.status == 0 ? DT_AGENT_SUCCEEDED
                        : a.interrupt_signal ? DT_AGENT_INTERRUPTED
                                             : DT_AGENT_FAILED;
        if (a.leftovers)
            dt_log_info("stopped %d process%s the ranks left behind", a.leftovers, a.leftovers == 1 ? "" : "es");
        if (a.status && !a.interrupt_signal && r->res.attempts[k].first_failed < 0)
            dt_log_error("mpirun exited with status %d and no rank says it failed; mpirun's messages are in "
                         "%s/mpirun.err", a.status, dir);
    }
    free(a.tails);
    return rc;
}

static int alloc_result(struct run *r)
{
    struct dt_agent_result *res = &r->res;
    memset(res, 0, sizeof *res);
    res->max_attempts = r->job->max_restarts + 1;
    res->nproc = r->world;
    res->started_unix = (double)time(NULL);
    res->attempts = calloc((size_t)res->max_attempts, sizeof *res->attempts);
    for (int k = 0; res->attempts && k < res->max_attempts; k++)
        if (!(res->attempts[k].ranks = calloc((size_t)r->world, sizeof *res->attempts[k].ranks)))
            return dt_error_set(DT_ENOMEM, "out of memory for the job's summary");
    return res->attempts ? 0 : dt_error_set(DT_ENOMEM, "out of memory for the job's summary");
}

static void finish(struct run *r)
{
    struct dt_agent_result *res = &r->res;
    res->wall_s = dt_clock_s() - r->cfg.start_mono;
    char summary[PATH_MAX + 16];
    snprintf(summary, sizeof summary, "%s/summary.json", r->run_dir);
    if (dt_agent_write_summary(&r->cfg, res, summary) < 0)
        dt_log_error("%s", dt_error_last());
    dt_agent_print_failure(&r->cfg, res);
    if (res->status == DT_AGENT_SUCCEEDED)
        dt_log_info("job %s succeeded in %.2f s; logs and summary.json in %s", r->job->name, res->wall_s,
                    r->run_dir);
    else if (res->status == DT_AGENT_INTERRUPTED)
        dt_log_warn("job %s interrupted after %.2f s; logs and summary.json in %s", r->job->name, res->wall_s,
                    r->run_dir);
    else
        dt_log_error("job %s failed with exit status %d after %.2f s (%d attempt%s); logs and summary.json in %s",
                     r->job->name, res->exit_status, res->wall_s, res->n_attempts, res->n_attempts == 1 ? "" : "s",
                     r->run_dir);
}

static int start_mpi_job(struct run *r)
{
    bool local = all_local(r->job);
    bool auth = r->job->rendezvous.auth != DT_AUTH_NONE;
    int rc = auth ? dt_token_make(r->token) : 0;
    struct dt_coord_config cc = {.bind_host = local ? "127.0.0.1" : "0.0.0.0", .port = r->job->rendezvous.port,
                                 .token = auth ? r->token : NULL};
    if (rc == 0 && (rc = dt_coord_start(&cc, &r->coord)) < 0)
        return dt_error_prefix("cannot start the coordinator on port %d", cc.port);
    if (local)
        snprintf(r->host, sizeof r->host, "127.0.0.1");
    else
        advertised_host(r->job, r->host, sizeof r->host);
    const char *log_dir = r->opts->log_dir ? r->opts->log_dir : r->job->log_dir;
    if (rc == 0)
        rc = dt_run_dir_create(log_dir, r->job->name, r->run_id, sizeof r->run_id, r->run_dir, sizeof r->run_dir);
    return rc;
}

static int run_mpi(struct run *r)
{
    int rc = start_mpi_job(r);
    r->cfg = (struct dt_agent_config){.job = r->job, .node_rank = 0, .nnodes = r->job->nodes, .nproc = r->nproc,
                                      .run_id = r->run_id, .run_dir = r->run_dir, .master_addr = r->host,
                                      .master_port = r->coord ? dt_coord_port(r->coord) : 0,
                                      .token = r->token[0] ? r->token : NULL,
                                      .grace_s = r->opts->grace_s > 0 ? r->opts->grace_s : DT_AGENT_DEFAULT_GRACE_S,
                                      .start_mono = r->opts->start_mono};
    char **env0 = NULL;
    if (rc == 0)
        rc = mpi_env(&r->cfg, 0, &env0);
    const char **names = rc ? NULL : export_names(r->job, env0);
    dt_agent_env_free(env0);
    if (rc == 0 && !names)
        rc = dt_error_set(DT_ENOMEM, "out of memory");
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", r->opts->dtrain_path ? r->opts->dtrain_path : "dtrain");
    struct dt_mpirun_call call = {.dtrain = self, .job_path = r->job->path, .export_names = names,
                                  .tag_output = true, .rank_wrapper = true};
    if (rc == 0)
        rc = dt_mpirun_build(r->job, r->nproc, &call, &r->line);
    free(names);
    if (rc == 0)
        rc = alloc_result(r);
    if (rc) {
        dt_coord_stop(r->coord);
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    r->cfg.argv = (const char *const *)r->line.argv;
    dt_log_info("job %s: %d MPI rank%s (%d node%s x %d) through %s, coordinator %s:%d, run %s", r->job->name,
                r->world, r->world == 1 ? "" : "s", r->job->nodes, r->job->nodes == 1 ? "" : "s", r->nproc,
                r->line.argv[0], r->host, r->cfg.master_port, r->run_dir);
    for (int k = 0; rc == 0 && k <= r->job->max_restarts; k++) {
        if ((rc = mpi_attempt(r, k)) < 0 || r->res.status != DT_AGENT_FAILED)
            break;
        if (dt_job_exit_action(r->job, r->res.exit_status) == DT_EXIT_FAIL || k == r->job->max_restarts)
            break;
        dt_log_warn("mpirun failed with status %d; restarting every rank (attempt %d of %d)", r->res.exit_status,
                    k + 2, r->job->max_restarts + 1);
    }
    dt_coord_stop(r->coord);
    if (rc < 0) {
        dt_log_error("%s", dt_error_last());
        r->res.status = DT_AGENT_FAILED;
        r->res.exit_status = 1;
    }
    finish(r);
    int status = r->res.exit_status;
    dt_agent_result_free(&r->res);
    dt_mpirun_line_free(&r->line);
    return status;
}

int dt_mpirun_submit(const struct dt_job *job, const struct dt_adapter_launch *opts)
{
    const char *prog = job->mpirun && job->mpirun->program ? job->mpirun->program : "mpirun";
    if (!dt_fs_on_path(prog)) {
        fprintf(stderr, "dtrain launch: %s: mpirun.program '%s' %s (Debian: apt-get install openmpi-bin)\n",
                job->path, prog, strchr(prog, '/') ? "does not exist or is not executable" : "was not found on PATH");
        return 2;
    }
    if (!dt_mpirun_ranks_are_mpi(job))
        return dt_mpirun_run_agents(job, opts);
    struct run r = {.job = job, .opts = opts, .nproc = job->nproc_per_node};
    if (r.nproc < 1) {
        fprintf(stderr, "dtrain launch: %s: nproc_per_node: gpu with backend: mpi; mpirun needs a number of ranks "
                        "per node (write it, e.g. nproc_per_node: 8)\n", job->path);
        return 2;
    }
    r.world = job->nodes * r.nproc;
    if (opts->ranks) {
        r.show = malloc((size_t)r.world);
        if (!r.show || dt_args_ranks(opts->ranks, r.world, r.show) < 0) {
            fprintf(stderr, "dtrain launch: --ranks: %s\n", dt_error_last());
            free(r.show);
            return 2;
        }
    }
    int status = run_mpi(&r);
    free(r.show);
    return status;
}
