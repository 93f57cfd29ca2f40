/* agent_plan.c - what an agent settles before it starts a coordinator or a
 * rank: how many ranks this node runs (nproc_per_node: gpu counts the GPUs
 * it may use), whether the spec's command exists here (say so once, not once
 * per rank and again after every restart), the environment defaults worth a
 * line, and the environment each rank starts with.
 *
 * The rank environment: torchrun's variables (so unmodified PyTorch scripts
 * work: env:// init finds the store at MASTER_ADDR:MASTER_PORT and, with
 * TORCHELASTIC_USE_AGENT_STORE, joins it as a client instead of trying to
 * host one), dtrain's own DTRAIN_* variables (the store client reads
 * DTRAIN_COORD_ADDR and DTRAIN_JOB_TOKEN), the spec's env: entries, and
 * comm.interfaces as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME.
 * Precedence: dtrain's per-rank variables over the spec's env:, the spec's
 * over the launcher's own environment.  Built before fork(): the child of a
 * multi-threaded process may only make async-signal-safe calls, so nothing
 * here may run after fork.
 *
 * Not for running ranks (agent_supervise.c) or for the spec itself (spec/jobspec.h).
 */
#include "launcher/agent/agent_internal.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/log.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- before the run ------------------------------------------------------ */

int dt_agent__plan_nproc(const struct dt_job *job, int *nproc)
{
    struct dt_placement pl; /* nproc_per_node: gpu is this node's GPUs (spec/placement.h) */
    int rc = dt_placement_resolve(job, DT_PLACE_HOST, &pl);
    *nproc = pl.nproc;
    return rc;
}

int dt_agent__plan_check_command(const struct dt_job *job)
{
    if (!job->command || dt_fs_on_path(job->command[0]))
        return 0;
    return dt_error_set(DT_ENOTFOUND, "%s: command: '%s' %s", job->path, job->command[0],
                        strchr(job->command[0], '/') ? "does not exist or is not executable"
                                                     : "was not found on PATH");
}

void dt_agent__plan_say_env(const struct dt_job *job, int nproc)
{
    bool omp = getenv("OMP_NUM_THREADS") != NULL;
    for (int i = 0; i < job->n_env; i++) {
        if (strcmp(job->env[i].name, "OMP_NUM_THREADS") == 0)
            omp = true;
        if (dt_job_env_is_reserved(job->env[i].name))
            dt_log_warn("%s: env: %s is set by dtrain for each rank; the value in the spec is ignored",
                        job->path, job->env[i].name);
    }
    if (!omp && nproc > 1)
        dt_log_info("OMP_NUM_THREADS is not set: each rank gets OMP_NUM_THREADS=1, as under torchrun "
                    "(set it under env: to change that)");
}

/* --- the rank environment ------------------------------------------------ */

/* Compares the name part of "NAME=value" with `name`. */
static bool entry_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static bool entry_reserved(const char *entry)
{
    const char *eq = strchr(entry, '=');
    if (!eq)
        return false;
    char name[64];
    size_t n = (size_t)(eq - entry);
    if (n >= sizeof name)
        return false;
    memcpy(name, entry, n);
    name[n] = 0;
    return dt_job_env_is_reserved(name);
}

static const struct dt_env_entry *spec_entry(const struct dt_job *job, const char *name)
{
    for (int i = 0; i < job->n_env; i++)
        if (strcmp(job->env[i].name, name) == 0)
            return &job->env[i];
    return NULL;
}

static bool spec_overrides(const struct dt_job *job, const char *entry)
{
    for (int i = 0; i < job->n_env; i++)
        if (entry_is(entry, job->env[i].name))
            return true;
    return false;
}

struct env_builder {
    char **v;
    size_t n, cap;
    int rc;
};

static void add(struct env_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct env_builder *b, const char *fmt, ...)
{
    if (b->rc < 0)
        return;
    if (b->n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 128;
        char **v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            b->rc = dt_error_set(DT_ENOMEM, "out of memory building a rank's environment");
            return;
        }
        b->v = v;
        b->cap = cap;
        b->v[b->n] = NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&b->v[b->n], fmt, ap);
    va_end(ap);
    if (rc < 0) {
        b->v[b->n] = NULL;
        b->rc = dt_error_set(DT_ENOMEM, "out of memory building a rank's environment");
        return;
    }
    b->v[++b->n] = NULL;
}

/* TORCHELASTIC_SIGNALS_TO_HANDLE: torchrun exports its --signals-to-handle,
 * by default "SIGTERM,SIGINT,SIGHUP,SIGQUIT"; signals_to_handle in that order
 * (dtrain also passes SIGUSR1 on, a Slurm time limit, listed or not). */
static void add_signals(struct env_builder *b, uint64_t mask)
{
    static const struct {
        int sig;
        const char *name;
    } order[] = {{SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGHUP, "SIGHUP"},  {SIGQUIT, "SIGQUIT"},
                 {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGALRM, "SIGALRM"}};
    char list[96] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (mask >> order[i].sig & 1)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", order[i].name);
    add(b, "TORCHELASTIC_SIGNALS_TO_HANDLE=%s", list);
}

static void add_torchrun(struct env_builder *b, const struct dt_agent_config *cfg, int rank, int local_rank,
                         int restart, const char *error_file)
{
    int world = cfg->nnodes * cfg->nproc;
    add(b, "RANK=%d", rank);
    add(b, "LOCAL_RANK=%d", cfg->job->virtual_local_rank ? 0 : local_rank);
    add(b, "WORLD_SIZE=%d", world);
    add(b, "LOCAL_WORLD_SIZE=%d", cfg->nproc);
    add(b, "GROUP_RANK=%d", cfg->node_rank);
    add(b, "GROUP_WORLD_SIZE=%d", cfg->nnodes);
    /* One role per job (torchrun's --role), so the role's ranks are the job's ranks. */
    add(b, "ROLE_RANK=%d", rank);
    add(b, "ROLE_NAME=%s", cfg->job->role ? cfg->job->role : "default");
    add(b, "ROLE_WORLD_SIZE=%d", world);
    add(b, "MASTER_ADDR=%s", cfg->endpoint ? "127.0.0.1" : cfg->master_addr);
    add(b, "MASTER_PORT=%d", cfg->endpoint ? cfg->store_port : cfg->master_port);
    /* torchrun counts restarts after failures only: a membership change of
     * an elastic job restarts the ranks without counting (docs/elastic.md). */
    add(b, "TORCHELASTIC_RESTART_COUNT=%d", cfg->elastic ? cfg->restarts : restart);
    add(b, "TORCHELASTIC_MAX_RESTARTS=%d", cfg->job->max_restarts);
    add(b, "TORCHELASTIC_RUN_ID=%s", cfg->run_id);
    add(b, "TORCHELASTIC_USE_AGENT_STORE=True");
    add(b, "TORCHELASTIC_ERROR_FILE=%s", error_file);
    add_signals(b, cfg->job->signals_to_handle);
}

void dt_agent_rows_path(const char *run_dir, int attempt, int rank, char *buf, size_t size)
{
    snprintf(buf, size, "%s/attempt_%d/rank_%d.metrics.jsonl", run_dir, attempt, rank);
}

void dt_agent_traceback_path(const char *run_dir, int attempt, int rank, char *buf, size_t size)
{
    snprintf(buf, size, "%s/attempt_%d/rank_%d.traceback.txt", run_dir, attempt, rank);
}

/* docs/progress.md: a command's rank may report its steps, and Python's
 * faulthandler may say where its threads are when the watchdog asks. */
static void add_progress(struct env_builder *b, const struct dt_agent_config *cfg, int rank, int restart)
{
    char path[4200];
    if (!cfg->job->command || cfg->group)
        return;
    dt_agent_rows_path(cfg->run_dir, restart, rank, path, sizeof path);
    add(b, "DTRAIN_METRICS_FILE=%s", path);
    dt_agent_traceback_path(cfg->run_dir, restart, rank, path, sizeof path);
    add(b, "DTRAIN_TRACEBACK_FILE=%s", path);
    add(b, "DTRAIN_TRACEBACK_SIGNAL=%s", DT_AGENT_TRACEBACK_SIGNAL_NAME);
}

static void add_dtrain(struct env_builder *b, const struct dt_agent_config *cfg, int restart,
                       const char *error_file)
{
    /* The coordinator's host too, through the endpoint: the tcp communicator
     * advertises the address that routes to it, not loopback. */
    if (cfg->endpoint) {
        add(b, "DTRAIN_COORD_ADDR=127.0.0.1:%d", cfg->store_port);
        add(b, "DTRAIN_COORD_HOST=%s", cfg->master_addr);
    } else
        add(b, "DTRAIN_COORD_ADDR=%s:%d", cfg->master_addr, cfg->master_port);
    /* Through the node's endpoint the ranks need no token: it stays out of their reach. */
    if (cfg->token && !cfg->endpoint)
        add(b, "DTRAIN_JOB_TOKEN=%s", cfg->token);
    add(b, "DTRAIN_RUN_DIR=%s", cfg->run_dir);
    add(b, "DTRAIN_RUN_ID=%s", cfg->run_id);
    add(b, "DTRAIN_JOB_NAME=%s", cfg->job->name);
    add(b, "DTRAIN_NODE_RANK=%d", cfg->node_rank);
    add(b, "DTRAIN_NNODES=%d", cfg->nnodes);
    add(b, "DTRAIN_RESTART_COUNT=%d", restart);
    add(b, "DTRAIN_ERROR_FILE=%s", error_file);
    /* The bundled trainer may then resume a checkpoint of another world size. */
    if (cfg->elastic) {
        add(b, "DTRAIN_ELASTIC=1");
        /* the most nodes: keep_global keeps their global batch, elastic_lr scales to it */
        add(b, "DTRAIN_ELASTIC_MAX_NODES=%d", cfg->nnodes_max > 0 ? cfg->nnodes_max : cfg->nnodes);
    }
}

/* comm.interfaces as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (NCCL's "="
 * form: exact names, as Gloo reads them), unless the spec's env: or the
 * launcher's environment sets them; set elsewhere to another list, the
 * variable is refused (the spec's env: already is, at load). */
static void add_ifnames(struct env_builder *b, const struct dt_job *job, char *const *base)
{
    char list[512];
    if (!dt_job_ifnames(job, list, sizeof list))
        return;
    for (int v = 0; dt_job_ifname_vars[v]; v++) {
        const char *var = dt_job_ifname_vars[v], *val = NULL;
        const struct dt_env_entry *se = spec_entry(job, var);
        for (char *const *e = base; !se && e && *e; e++)
            if (entry_is(*e, var))
                val = *e + strlen(var) + 1;
        if (val && !dt_job_ifname_agrees(job, var, val) && b->rc >= 0)
            b->rc =
                dt_error_set(DT_EINVAL,
                             "%s: comm.interfaces is [%s] but this agent's environment has %s=%s; the ranks "
                             "would use one network or the other depending on the backend: unset the "
                             "variable or make the two agree",
                             job->path, list, var, val);
        if (se || val || !strcmp(var, "DTRAIN_SOCKET_IFNAME"))
            continue;
        if (!strcmp(var, "NCCL_SOCKET_IFNAME"))
            add(b, "%s==%s", var, list);
        else
            add(b, "%s=%s", var, list);
    }
}

/* torchrun's --virtual-local-rank (local_elastic_agent.py): each rank sees
 * only its GPU, entry LOCAL_RANK of the node's CUDA_VISIBLE_DEVICES (HIP's
 * on ROCm, which takes precedence there), or GPU LOCAL_RANK with no list.
 * The rank then finds it as device 0 with LOCAL_RANK=0. */
static bool visible_var(const struct dt_job *job, const char *name_or_entry)
{
    static const char *const vars[] = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"};
    for (int v = 0; v < 2 && job->virtual_local_rank; v++) {
        size_t n = strlen(vars[v]);
        if (!strncmp(name_or_entry, vars[v], n) && (name_or_entry[n] == '=' || name_or_entry[n] == '\0'))
            return true;
    }
    return false;
}

static void add_visible_gpu(struct env_builder *b, const struct dt_job *job, char *const *base, int local_rank)
{
    const char *vars[] = {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}, *list = NULL;
    bool hip = false;
    for (int v = 0; v < 2 && !list; v++) {
        const struct dt_env_entry *se = spec_entry(job, vars[v]);
        list = se ? se->value : NULL;
        for (char *const *e = base; !se && e && *e; e++)
            if (entry_is(*e, vars[v]) && (*e)[strlen(vars[v]) + 1])
                list = *e + strlen(vars[v]) + 1;
        hip = list && v == 0;
    }
    if (!list) {
        add(b, "CUDA_VISIBLE_DEVICES=%d", local_rank);
        return;
    }
    const char *p = list;
    for (int i = 0; i < local_rank && p; i++)
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    size_t n = p ? strcspn(p, ",") : 0;
    while (n && p[0] == ' ') /* torchrun strips each entry */
        p++, n--;
    while (n && p[n - 1] == ' ')
        n--;
    if (!n) {
        if (b->rc >= 0)
            b->rc = dt_error_set(DT_EINVAL, "%s: virtual_local_rank: local rank %d has no GPU in %s=%s",
                                 job->path, local_rank, hip ? vars[0] : vars[1], list);
        return;
    }
    add(b, "CUDA_VISIBLE_DEVICES=%.*s", (int)n, p);
    if (hip)
        add(b, "HIP_VISIBLE_DEVICES=%.*s", (int)n, p);
}

int dt_agent_env_build(const struct dt_agent_config *cfg, int local_rank, int restart, char *const *base,
                       char ***out)
{
    const struct dt_job *job = cfg->job;
    struct env_builder b = {0};
    bool omp_set = spec_entry(job, "OMP_NUM_THREADS") != NULL;
    bool nccl_set = spec_entry(job, "TORCH_NCCL_ASYNC_ERROR_HANDLING") != NULL;
    for (char *const *e = base; e && *e; e++) {
        if (entry_reserved(*e) || spec_overrides(job, *e) || visible_var(job, *e))
            continue;
        if (entry_is(*e, "OMP_NUM_THREADS"))
            omp_set = true;
        if (entry_is(*e, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
            nccl_set = true;
        if (entry_is(*e, "PYTHONUNBUFFERED"))
            continue;
        add(&b, "%s", *e);
    }
    for (int i = 0; i < job->n_env; i++)
        if (!dt_job_env_is_reserved(job->env[i].name) && !visible_var(job, job->env[i].name))
            add(&b, "%s=%s", job->env[i].name, job->env[i].value);
    if (job->virtual_local_rank)
        add_visible_gpu(&b, job, base, local_rank);
    add_ifnames(&b, job, base);
    /* torchrun's default for more than one rank per node: N ranks of a threaded
     * library would otherwise each start one thread per core and oversubscribe
     * the machine N times. */
    if (!omp_set && cfg->nproc > 1)
        add(&b, "OMP_NUM_THREADS=1");
    /* Python block-buffers a pipe; without this a rank's lines arrive late
     * and a crash loses its last output. */
    if (!spec_entry(job, "PYTHONUNBUFFERED"))
        add(&b, "PYTHONUNBUFFERED=1");
    /* As torchrun (local_elastic_agent.py): unless set, a failed or timed-out
     * NCCL collective aborts the communicator and ends the rank, so the agent
     * sees the failure and restarts the group instead of waiting on a hang. */
    if (!nccl_set)
        add(&b, "TORCH_NCCL_ASYNC_ERROR_HANDLING=1");

    int rank = dt_placement_rank_of(cfg->nproc, cfg->node_rank, local_rank);
    char error_file[4200];
    snprintf(error_file, sizeof error_file, "%s/attempt_%d/rank_%d.error.json", cfg->run_dir, restart, rank);
    add_torchrun(&b, cfg, rank, local_rank, restart, error_file);
    add_dtrain(&b, cfg, restart, error_file);
    add_progress(&b, cfg, rank, restart);
    if (b.rc < 0) {
        dt_agent_env_free(b.v);
        return b.rc;
    }
    *out = b.v;
    return 0;
}

void dt_agent_env_free(char **env)
{
    if (!env)
        return;
    for (char **e = env; *e; e++)
        free(*e);
    free(env);
}
