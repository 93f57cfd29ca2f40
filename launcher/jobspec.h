/* jobspec.h - the job spec: one YAML file that describes a job (the user-facing contract).
 *
 * dt_job_load() parses the file with libyaml and validates every key against
 * one table of known keys; the first problem found is reported through
 * dt_error_last() as "<file>:<line>:<column>: <what was expected>" (and, for an
 * unknown key, "did you mean <closest>?").  Unknown keys are errors: a typo must
 * never silently change a job.  configs/job.schema.json describes the same keys
 * for editors and is checked against this parser by the tests.
 *
 * Not for running anything: the launcher, agent and adapters read a loaded
 * struct dt_job; the bundled trainer reads its own section, struct dt_trainer_spec.
 */
#ifndef DT_JOBSPEC_H
#define DT_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

enum dt_scheduler { DT_SCHED_LOCAL, DT_SCHED_SLURM, DT_SCHED_KUBERNETES, DT_SCHED_MPIRUN };
enum dt_backend { DT_BACKEND_AUTO, DT_BACKEND_TCP, DT_BACKEND_SHM, DT_BACKEND_NCCL, DT_BACKEND_MPI };
enum dt_auth { DT_AUTH_TOKEN, DT_AUTH_NONE };

/* nproc_per_node: "gpu" means one rank per visible GPU, resolved by the agent. */
#define DT_NPROC_GPU (-1)

struct dt_rendezvous_spec {
    int port;                   /* 0: the coordinator picks a free port and publishes it */
    double timeout_s;           /* rendezvous and connect deadline, default 60 s */
    double heartbeat_timeout_s; /* a rank silent this long is hung, default 30 s */
    enum dt_auth auth;          /* token (default) or none (PyTorch scripts) */
};

struct dt_env_entry {
    char *name;
    char *value;
};

struct dt_trainer_spec; /* the bundled trainer's section: worker/trainer_spec.h */
struct dt_slurm_spec;
struct dt_kubernetes_spec;
struct dt_mpirun_spec;

struct dt_job {
    char *path;                 /* the file it was loaded from ("<string>" otherwise) */
    char *name;                 /* DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 */
    enum dt_scheduler scheduler;
    int nodes;                  /* agents, one per node, >= 1 */
    int nproc_per_node;         /* ranks per node, >= 1, or DT_NPROC_GPU */
    enum dt_backend backend;
    char **command;             /* NULL-terminated argv, or NULL when the trainer runs */
    int command_argc;
    struct dt_trainer_spec *trainer; /* NULL when command runs; exactly one of the two is set */
    struct dt_env_entry *env;   /* extra environment for every rank, in file order */
    int n_env;
    int max_restarts;           /* restarts of the whole group after a failure, >= 0 */
    struct dt_rendezvous_spec rendezvous;
    char *log_dir;              /* default "runs" */
    struct dt_slurm_spec *slurm;           /* NULL unless the section is present */
    struct dt_kubernetes_spec *kubernetes;
    struct dt_mpirun_spec *mpirun;
};

/* Loads and validates a job spec file.  On failure returns a negative DT_E*
 * code and leaves "<path>:<line>:<col>: <message>" in dt_error_last(). */
int dt_job_load(const char *path, struct dt_job **out);

/* The same from memory; `name` stands in for the path in messages. */
int dt_job_load_string(const char *text, size_t len, const char *name, struct dt_job **out);

void dt_job_free(struct dt_job *job);

/* Names for messages and for rendering: "local", "tcp", ... */
const char *dt_scheduler_name(enum dt_scheduler s);
const char *dt_backend_name(enum dt_backend b);

#endif
