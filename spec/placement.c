/* placement.c - a job's placement, resolved once (placement.h). */
#include "spec/placement.h"

#include "base/error.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* The NVIDIA GPUs the kernel shows this machine (or container): /dev/nvidia<N>. */
static int dev_gpus(void)
{
    DIR *d = opendir("/dev");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "nvidia", 6) == 0 && de->d_name[6] >= '0' && de->d_name[6] <= '9')
            n++;
    closedir(d);
    return n;
}

int dt_placement_count_gpus(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        int n = 0;
        for (const char *p = cvd; *p; p++)
            if (*p != ',' && (p == cvd || p[-1] == ','))
                n++;
        return n;
    }
    return dev_gpus();
}

int dt_placement_count_cpus(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    return n > 0 ? n : 1;
}

int dt_placement_nproc_word(const char *word, int *nproc)
{
    char *end;
    errno = 0;
    long n = strtol(word, &end, 10);
    if (end != word && !*end && !errno) {
        if (n < 1 || n > 1024)
            return dt_error_set(DT_EINVAL, "%ld ranks per node: expected 1 to 1024", n);
        *nproc = (int)n;
    } else if (!strcmp(word, "gpu")) {
        *nproc = DT_NPROC_GPU;
    } else if (!strcmp(word, "cpu")) {
        *nproc = dt_placement_count_cpus();
    } else if (!strcmp(word, "auto")) {
        /* torchrun: GPUs when torch.cuda.is_available(), which needs a device
         * as well as a non-empty CUDA_VISIBLE_DEVICES; else CPUs. */
        *nproc = dev_gpus() > 0 && dt_placement_count_gpus() > 0 ? DT_NPROC_GPU : dt_placement_count_cpus();
    } else {
        return dt_error_set(DT_EINVAL, "'%s' ranks per node: expected a number, auto, cpu or gpu%s", word,
                            !strcmp(word, "xpu") ? " (dtrain counts NVIDIA GPUs, not Intel's XPUs)" : "");
    }
    return 0;
}

/* "gpu" as the scheduler section counts a node's GPUs; 0 when it does not. */
static int scheduler_gpus(const struct dt_job *job)
{
    if (job->scheduler == DT_SCHED_SLURM && job->slurm)
        return job->slurm->gpus_per_node;
    if (job->scheduler == DT_SCHED_KUBERNETES && job->kubernetes)
        return job->kubernetes->gpus_per_node;
    return 0;
}

int dt_placement_resolve(const struct dt_job *job, enum dt_placement_scope scope, struct dt_placement *out)
{
    *out = (struct dt_placement){
        .nnodes = job->nodes, .nnodes_min = job->nodes_min, .nproc = job->nproc_per_node};
    if (out->nproc != DT_NPROC_GPU) {
        out->source = DT_NPROC_FROM_SPEC;
    } else if (scope == DT_PLACE_SCHEDULER && scheduler_gpus(job) > 0) {
        out->nproc = scheduler_gpus(job);
        out->source = DT_NPROC_FROM_SCHEDULER;
    } else if (scope == DT_PLACE_HOST) {
        out->nproc = dt_placement_count_gpus();
        out->source = DT_NPROC_FROM_HOST;
        if (out->nproc == 0)
            return dt_error_set(DT_EINVAL,
                                "%s: nproc_per_node: gpu, but this machine shows no GPU "
                                "(no /dev/nvidia<N>, or CUDA_VISIBLE_DEVICES is empty)",
                                job->path);
    } else {
        out->nproc = 0;
        out->source = DT_NPROC_PER_NODE;
    }
    out->world = out->nnodes * out->nproc;
    return 0;
}

int dt_placement_rank(const struct dt_placement *p, int node_rank, int local_rank)
{
    return dt_placement_rank_of(p->nproc, node_rank, local_rank);
}

int dt_placement_rank_of(int nproc, int node_rank, int local_rank)
{
    return node_rank * nproc + local_rank;
}

int dt_placement_local_rank_of(int nproc, int rank)
{
    return nproc > 0 ? rank % nproc : 0;
}
