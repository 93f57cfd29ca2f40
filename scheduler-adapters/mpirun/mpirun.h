/* mpirun.h - the pieces of the mpirun adapter that the launcher (dtrain
 * mpirank, a rank's place for dtrain worker and bench) and the tests use.
 *
 * `scheduler: mpirun` has two shapes (docs/mpirun.md):
 *  - agents (any backend but mpi): `mpirun -np <nodes> --map-by ppr:1:node ...
 *    dtrain agent job.yaml`; each agent learns its node from OMPI_COMM_WORLD_*
 *    (or PMIX_RANK and Slurm's variables under srun --mpi=pmix) and forks
 *    the node's ranks as on any scheduler;
 *  - MPI ranks (backend: mpi): MPI's ranks must be MPI processes, so mpirun
 *    starts every rank itself (`-np` = world size); the launcher hosts the
 *    coordinator and its agent supervises and restarts mpirun as the one
 *    process that stands for every rank (adapter.h's group).
 * The job token and the rest of the job's environment travel as `-x NAME`
 * (mpirun copies the value from its own environment), never as a value on
 * the command line, where `ps` would show it.
 *
 * Not for parsing the mpirun: section (spec/jobspec_sched.c) or for
 * spawning or supervising anything (the agent, launcher/agent/agent.h).
 */
#ifndef DT_MPIRUN_H
#define DT_MPIRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "spec/jobspec.h"

extern const struct dt_adapter dt_adapter_mpirun;

/* --- the command line (mpirun_argv.c) ------------------------------------ */

struct dt_mpirun_line {
    char **argv; /* NULL-terminated, malloc'd strings */
    int argc, cap;
};

/* What mpirun runs and how it is called. */
struct dt_mpirun_call {
    const char *dtrain;       /* this binary as the nodes run it */
    const char *job_path;     /* the spec as the nodes read it */
    const char *const *export_names; /* NULL-terminated names passed as -x NAME */
    bool tag_output;          /* --tag-output: the launcher demultiplexes ranks' lines */
    bool rank_wrapper;        /* backend: mpi: each rank runs under `dtrain mpirank --` */
    const char *const *agent_args; /* NULL-terminated options after `dtrain agent job.yaml`, or NULL */
};

/* True when ranks are MPI processes started by mpirun (backend: mpi). */
bool dt_mpirun_ranks_are_mpi(const struct dt_job *job);

/* Builds the mpirun argv for the job placed as pl (spec/placement.h): agents
 * (one per node) or, with backend: mpi, every rank (pl->nproc per node).
 * Free with dt_mpirun_line_free(). */
struct dt_placement;
int dt_mpirun_build(const struct dt_job *job, const struct dt_placement *pl,
                    const struct dt_mpirun_call *call, struct dt_mpirun_line *out);
void dt_mpirun_line_free(struct dt_mpirun_line *l);

/* The first host of the job (hosts: or the hostfile's first entry, without
 * ":slots" or " slots=N"), or "" when mpirun picks hosts itself. */
int dt_mpirun_first_host(const struct dt_mpirun_spec *m, char *out, size_t size);

/* --- the environment of an MPI rank (mpirun_rank.c) ---------------------- */

/* Under mpirun with backend: mpi the launcher cannot give each rank its own
 * RANK; the rank reads it from MPI's launcher instead.  When DTRAIN_MPI_RANKS
 * is set, or RANK is not, and OMPI_COMM_WORLD_RANK (or PMIX_RANK with
 * Slurm's SLURM_NTASKS) is, sets RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, DTRAIN_NODE_RANK and the per-rank
 * error file from them.  Returns 1 if it did, 0 if there was nothing to do,
 * or a negative DT_E* code for a malformed variable. */
int dt_mpirun_rank_env(void);

/* `dtrain mpirank -- PROGRAM ...` (mpirun_rank.c): runs PROGRAM as this MPI
 * rank's child with the rank's variables set, passes signals on, records how
 * it ended in <run dir>/attempt_<k>/rank_<r>.exit, and ends the same way. */
int dt_mpirun_rank_main(char *const *argv);

/* One rank's place as an MPI launcher (or srun) describes it, from env
 * ("NAME=value" array); node -1 when the launcher does not say. */
struct dt_mpirun_place {
    int rank, size, local_rank, local_size, node;
};
int dt_mpirun_read_place(char *const *env, struct dt_mpirun_place *out);

/* The environment of the one process that starts every rank (mpirun, srun)
 * from a rank's: less what differs per rank (RANK, LOCAL_RANK, ..., which each
 * rank reads from its launcher), plus DTRAIN_MPI_RANKS=1 and `also`
 * ("NAME=value", or NULL).  *out: malloc'd strings in a malloc'd
 * NULL-terminated array (adapter.h's group env). */
int dt_mpirun_group_env(char *const *rank_env, const char *also, char ***out);

/* Set in a rank's environment: MASTER_ADDR and DTRAIN_COORD_ADDR become
 * SLURM_LAUNCH_NODE_IPADDR's (the agent that hosts the coordinator ran srun). */
#define DT_MPIRUN_COORD_AT_LAUNCH_NODE "DTRAIN_COORD_AT_LAUNCH_NODE"

/* How each of the world ranks of an attempt ended, from the records `dtrain
 * mpirank` left in attempt_dir (status: the launcher's exit status, so a rank
 * without a record was stopped unless it is 0).  Returns the rank that failed
 * first by itself (the earliest record), or -1. */
struct dt_adapter_rank_end;
int dt_mpirun_rank_ends(const char *attempt_dir, int world, int status, struct dt_adapter_rank_end *ends);

/* --- mpirun's output (mpirun_output.c) ----------------------------------- */

/* Splits an --tag-output line "[<job>,<rank>]<stdout>:text": sets *rank,
 * *is_err and *text.  Returns false for mpirun's own lines. */
bool dt_mpirun_parse_tag(const char *line, size_t len, int *rank, bool *is_err, const char **text);

/* Removes tags that arrived inside a line's text; returns the new length. */
size_t dt_mpirun_strip_tags(char *text, size_t len);

/* Reads mpirun's closing report: which rank it says failed first and how.
 * Feed each of mpirun's own lines; then *rank >= 0 once it knows, with
 * *status the exit code or 128 + signal. */
struct dt_mpirun_verdict {
    int rank;   /* -1 until known */
    int status; /* exit code, or 128 + signal */
    bool signaled;
    int state;  /* parser state across lines */
};
void dt_mpirun_verdict_feed(struct dt_mpirun_verdict *v, const char *line, size_t len);

#endif
