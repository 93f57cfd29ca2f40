/* mpirun_env.c - where a process stands in the job, as an MPI launcher says.
 *
 * Fallback chain (reference/launcher.md, section 11): Open MPI's mpirun sets
 * OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; under `srun --mpi=pmix`
 * Open MPI processes get no OMPI_COMM_WORLD_*, only PMIX_RANK, and the sizes
 * come from Slurm (SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE "2(x3)").
 * The agent reads its node from here; an MPI rank (backend: mpi) its rank.
 *
 * Not for Slurm jobs without MPI (scheduler-adapters/slurm*.c).
 */
#include "scheduler-adapters/mpirun.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "scheduler-adapters/adapter.h"

extern char **environ;

static int read_int(char *const *env, const char *name, int lo, int *out, bool *present)
{
    const char *v = dt_adapter_getenv(env, name);
    *present = v != NULL;
    if (!v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    /* SLURM_TASKS_PER_NODE is "2(x3),1": its first count is this node's on a uniform job. */
    bool tasks = !strcmp(name, "SLURM_TASKS_PER_NODE") && (*end == '(' || *end == ',');
    if (end == v || (*end && !tasks) || x < lo || x > 1 << 24)
        return dt_error_set(DT_EINVAL, "environment variable %s=%s is not a number >= %d", name, v, lo);
    *out = (int)x;
    return 0;
}

static int read_ompi(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "OMPI_COMM_WORLD_SIZE", 1, &p->size, &have);
    if (!rc && !have)
        rc = dt_error_set(DT_ENOTFOUND, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_RANK", 0, &p->rank, &have);
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, &p->local_rank, &have);
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, &p->local_size, &have);
    return rc;
}

static int read_pmix(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "PMIX_RANK", 0, &p->rank, &have);
    if (!rc)
        rc = read_int(env, "SLURM_NTASKS", 1, &p->size, &have);
    if (!rc && !have)
        rc = read_int(env, "SLURM_NPROCS", 1, &p->size, &have);
    if (!rc && !have)
        return dt_error_set(DT_ENOTFOUND, "PMIX_RANK is set but not the world size: neither SLURM_NTASKS nor "
                                          "SLURM_NPROCS is (dtrain reads PMIx ranks under srun --mpi=pmix)");
    if (!rc)
        rc = read_int(env, "SLURM_LOCALID", 0, &p->local_rank, &have);
    if (!rc)
        rc = read_int(env, "SLURM_TASKS_PER_NODE", 1, &p->local_size, &have);
    return rc;
}

int dt_mpirun_read_place(char *const *env, struct dt_mpirun_place *out)
{
    struct dt_mpirun_place p = {.local_size = 1};
    int rc;
    if (dt_adapter_getenv(env, "OMPI_COMM_WORLD_RANK"))
        rc = read_ompi(env, &p);
    else if (dt_adapter_getenv(env, "PMIX_RANK"))
        rc = read_pmix(env, &p);
    else
        return dt_error_set(DT_ENOTFOUND, "neither OMPI_COMM_WORLD_RANK (mpirun) nor PMIX_RANK (srun --mpi=pmix) "
                                          "is set: this process was not started by an MPI launcher");
    if (rc)
        return rc;
    if (p.rank >= p.size)
        return dt_error_set(DT_EINVAL, "the MPI launcher says rank %d of %d", p.rank, p.size);
    if (p.local_rank >= p.local_size)
        p.local_size = p.local_rank + 1;
    *out = p;
    return 0;
}

static int set_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    return setenv(name, buf, 1) ? dt_error_set(DT_ENOMEM, "cannot set %s", name) : 0;
}

int dt_mpirun_rank_env(void)
{
    bool asked = getenv("DTRAIN_MPI_RANKS") != NULL;
    if (!asked && getenv("RANK"))
        return 0;
    struct dt_mpirun_place p;
    int rc = dt_mpirun_read_place(environ, &p);
    if (rc == DT_ENOTFOUND && !asked) {
        dt_error_clear();
        return 0;
    }
    if (rc)
        return dt_error_prefix("reading this rank's place from the MPI launcher");
    /* ppr:K:node places ranks node by node, so the node is rank / K. */
    int node = p.rank / p.local_size;
    const char *names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                           "ROLE_WORLD_SIZE", "DTRAIN_NODE_RANK"};
    int values[] = {p.rank, p.local_rank, p.size, p.local_size, node, p.rank, p.size, node};
    for (size_t i = 0; i < sizeof values / sizeof *values && rc == 0; i++)
        rc = set_int(names[i], values[i]);
    const char *dir = getenv("DTRAIN_RUN_DIR"), *restart = getenv("DTRAIN_RESTART_COUNT");
    if (rc == 0 && dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/attempt_%s/rank_%d.error.json", dir, restart ? restart : "0", p.rank);
        if (setenv("TORCHELASTIC_ERROR_FILE", path, 1) || setenv("DTRAIN_ERROR_FILE", path, 1))
            rc = dt_error_set(DT_ENOMEM, "cannot set TORCHELASTIC_ERROR_FILE");
    }
    return rc ? rc : 1;
}
