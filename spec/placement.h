/* placement.h - where a job's ranks go, resolved once: its nodes, the ranks
 * per node, the world size, and how nproc_per_node became a number.
 *
 * nproc_per_node is a count or "gpu" (one rank per GPU, DT_NPROC_GPU).  A
 * count is known everywhere.  "gpu" is a number only where the GPUs are
 * known: on the node itself, about to start its ranks (CUDA_VISIBLE_DEVICES,
 * else its /dev/nvidia<N>), or where the spec's scheduler section says how
 * many GPUs each node gets (slurm.gpus_per_node, kubernetes.gpus_per_node);
 * elsewhere (validate, a dry run, mpirun's line) each node counts its own at
 * start.  Whoever needs the number resolves the placement here, saying what it
 * may look at, and passes the struct down; a rank's global number is
 * dt_placement_rank's alone (torchrun's RANK: node rank x ranks per node +
 * local rank), or dt_placement_rank_of's where only the count is at hand.
 *
 * Not for where the nodes are (the scheduler adapters) or for a node's
 * place among them (the agent's rounds).
 */
#ifndef DT_PLACEMENT_H
#define DT_PLACEMENT_H

#include "spec/jobspec.h"

#include <stddef.h>

/* How the ranks per node became a number. */
enum dt_nproc_source {
    DT_NPROC_FROM_SPEC,      /* nproc_per_node: N */
    DT_NPROC_FROM_SCHEDULER, /* gpu: the scheduler section's GPUs per node */
    DT_NPROC_FROM_HOST,      /* gpu: this machine's GPUs */
    DT_NPROC_PER_NODE,       /* gpu, no number here: each node counts its own (nproc 0) */
};

/* Where a resolve happens, which says what "gpu" may be counted from. */
enum dt_placement_scope {
    DT_PLACE_SPEC,      /* anywhere: nproc_per_node alone */
    DT_PLACE_SCHEDULER, /* before the job starts: the scheduler section's GPUs per node */
    DT_PLACE_HOST,      /* on a node about to start its ranks: its own GPUs, whatever the spec expects */
};

struct dt_placement {
    int nnodes;     /* the job's nodes (an elastic job's most) */
    int nnodes_min; /* an elastic job's fewest; nnodes otherwise */
    int nproc;      /* ranks per node; 0 with DT_NPROC_PER_NODE */
    int world;      /* nnodes x nproc; 0 with DT_NPROC_PER_NODE */
    enum dt_nproc_source source;
};

/* The job's placement as far as `scope` lets it be known.  Returns 0, or
 * DT_EINVAL naming the spec when DT_PLACE_HOST finds no GPU for "gpu". */
int dt_placement_resolve(const struct dt_job *job, enum dt_placement_scope scope, struct dt_placement *out);

/* The global rank of local rank `local_rank` on node `node_rank`. */
int dt_placement_rank(const struct dt_placement *p, int node_rank, int local_rank);

/* dt_placement_rank where the ranks per node are held as a number, not the
 * resolved struct (the node agent: its round's nproc). */
int dt_placement_rank_of(int nproc, int node_rank, int local_rank);

/* The other way: global rank `rank`'s local rank, each node running nproc
 * ranks; 0 when nproc is not known (0). */
int dt_placement_local_rank_of(int nproc, int rank);

/* The GPUs this process may use, as CUDA would count them: the entries of
 * CUDA_VISIBLE_DEVICES when it is set, else the /dev/nvidia<N> devices. */
int dt_placement_count_gpus(void);

/* The CPUs this process may run on (its affinity mask, which taskset and
 * cgroup cpusets narrow), as torchrun's `-n cpu` counts them; at least 1. */
int dt_placement_count_cpus(void);

/* torchrun's --nproc-per-node words, on this machine: a count is itself;
 * "gpu" stays DT_NPROC_GPU (the agent counts its node's GPUs); "cpu" is
 * dt_placement_count_cpus(); "auto" is "gpu" when this machine shows a GPU,
 * else "cpu".  DT_EINVAL with a sentence for any other word ("xpu"). */
int dt_placement_nproc_word(const char *word, int *nproc);

#endif
