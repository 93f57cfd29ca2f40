/* jobspec.h - the job spec: one YAML file that describes a job (the user-facing contract).
 *
 * dt_job_load() parses the file with libyaml, expands ${VAR} in values
 * (jobspec_source.c), and validates every key against one table of known keys;
 * every problem is found, the first in file order is reported through
 * dt_error_last() as "<file>:<line>:<column>: <what was expected>" (and, for an
 * unknown key, "did you mean <closest>?"), dt_job_load_with hands back all.  Unknown keys are errors: a typo
 * must never silently change a job.  configs/job.schema.json describes the same keys for editors; it is
 * written from the key tables by `make generated` (spec/gen/) and checked against this parser by the tests.
 *
 * Every key's default is in its key table (spec/jobspec.c, jobspec_trainer.c,
 * jobspec_sched.c), set by the loader; the comments here do not repeat them.
 *
 * Not for running anything: the launcher, agent and adapters read a loaded
 * struct dt_job; the bundled trainer reads its own section, struct dt_trainer_spec.
 */
#ifndef DT_JOBSPEC_H
#define DT_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum dt_scheduler { DT_SCHED_LOCAL, DT_SCHED_SLURM, DT_SCHED_KUBERNETES, DT_SCHED_MPIRUN };
enum dt_backend { DT_BACKEND_AUTO, DT_BACKEND_TCP, DT_BACKEND_SHM, DT_BACKEND_NCCL, DT_BACKEND_MPI };
enum dt_auth { DT_AUTH_TOKEN, DT_AUTH_NONE };
/* slurm.tasks: one Slurm task per node (the agent, which forks the node's
 * ranks), or one per rank (Slurm starts and binds every rank). */
enum dt_slurm_tasks { DT_SLURM_TASKS_PER_NODE, DT_SLURM_TASKS_PER_RANK };

/* grace_period when the spec leaves it out, in whole seconds: torchrun's
 * shutdown timeout (the key's default in spec/jobspec.c is made of it). */
#define DT_JOB_GRACE_DEFAULT_S 30

/* nproc_per_node: "gpu" means one rank per visible GPU, resolved by the agent. */
#define DT_NPROC_GPU (-1)

struct dt_rendezvous_spec {
    int port;                   /* 0: the coordinator picks a free port and publishes it */
    double timeout_s;           /* rendezvous and connect deadline */
    double heartbeat_timeout_s; /* a rank silent this long is hung */
    enum dt_auth auth;          /* token or none (PyTorch scripts) */
    /* Elastic jobs (nodes: MIN:MAX): once MIN agents joined, how long the
     * round waits for more before it starts (torchrun's last_call_timeout). */
    double last_call_timeout_s;
};

struct dt_env_entry {
    char *name;
    char *value;
};

/* comm: how ranks reach each other.  interfaces names the network the ranks'
 * collectives use (the tcp backend's advertised address, Gloo's and NCCL's
 * socket interface: the agent sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME
 * from it) and, under scheduler: mpirun without mpirun.interfaces, the address
 * node 0 advertises for the coordinator.  Those variables set elsewhere must
 * agree with it (dt_job_ifname_agrees): a disagreement is an error, never a
 * silent choice. */
struct dt_comm_spec {
    char **interfaces; /* NULL-terminated interface names, in order of preference; NULL: not set */
    int n_interfaces;
};

/* restart_policy: what a rank's exit status means for the group.  A rank
 * killed by signal N counts as exit status 128+N (the shell's convention), so
 * `137: fail` also catches SIGKILL; codes may be written as SIGKILL too. */
enum dt_exit_action { DT_EXIT_RETRY, DT_EXIT_FAIL };

struct dt_exit_rule {
    int code; /* 1..255 */
    enum dt_exit_action action;
};

struct dt_restart_policy {
    struct dt_exit_rule *on_exit; /* in file order; codes are unique */
    int n_on_exit;
    enum dt_exit_action otherwise; /* codes not listed: retry (up to max_restarts) or fail */
};

/* slurm: the sbatch settings of `scheduler: slurm` (issue 10).  Zero or NULL
 * means "not asked for": the line is left out and Slurm's default applies. */
struct dt_slurm_spec {
    char *partition;
    char *account;
    char *qos;
    char *constraint;
    int64_t time_s; /* time limit in seconds, written 02:00:00, 1-00:00:00 or 2h; 0 = not asked */
    int gpus_per_node;
    char *gpu_type; /* gpus_per_node: "h100:8" is type h100, 8 GPUs; NULL for a bare count */
    int cpus_per_task;
    uint64_t mem_bytes; /* per node, as sbatch reads --mem (64G = 64 GiB, a bare number MiB) */
    bool mem_all;       /* mem: 0, Slurm's "all of the node's memory" (mem_bytes is 0) */
    bool exclusive;
    bool requeue;         /* --requeue, and SIGUSR1 signal_lead_s before the time limit */
    double signal_lead_s; /* whole seconds before the time limit that the requeue warning comes */
    char **extra_sbatch;  /* NULL-terminated: lines added as "#SBATCH <line>" */
    int n_extra_sbatch;
    enum dt_slurm_tasks tasks;
    char *cpu_bind;            /* srun --cpu-bind=, --gpu-bind= of the step; NULL: Slurm's default */
    char *gpu_bind;
};

struct dt_k8s_toleration {
    char *key;
    char *operator_name; /* Equal, Exists, or NULL (Equal) */
    char *value;
    char *effect;               /* NoSchedule, PreferNoSchedule, NoExecute, or NULL (all) */
    int64_t toleration_seconds; /* -1 = not set (NoExecute only) */
};

struct dt_k8s_volume {
    char *name;       /* DNS-1123 label */
    char *mount_path; /* absolute path in the pod */
    char *host_path;  /* exactly one of host_path, pvc, config_map, secret */
    char *pvc;        /* a PersistentVolumeClaim's name */
    char *config_map;
    char *secret;
    bool read_only;
};

/* kubernetes.gang: how the pods are scheduled all at once, or not at all. */
enum dt_k8s_gang {
    DT_K8S_GANG_NONE,
    DT_K8S_GANG_KUEUE,        /* Kueue admits the (suspended) Job whole: label kueue.x-k8s.io/queue-name */
    DT_K8S_GANG_VOLCANO,      /* a Volcano PodGroup (scheduling.volcano.sh/v1beta1), schedulerName volcano */
    DT_K8S_GANG_COSCHEDULING, /* a scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1) */
};

/* kubernetes: the pods of `scheduler: kubernetes` (issue 11). */
struct dt_kubernetes_spec {
    char *image;             /* required */
    char *image_pull_policy; /* IfNotPresent, Always, Never, or NULL (Kubernetes' default) */
    char *namespace_name;
    char *service_account;
    char *priority_class;
    int gpus_per_node;       /* nvidia.com/gpu per pod */
    int cpu_millis;          /* CPU request and limit in millicores; 0 = not set */
    uint64_t memory_bytes;   /* 0 = not set */
    uint64_t shm_size_bytes; /* /dev/shm size limit; 0 = no limit */
    struct dt_env_entry *node_selector;
    int n_node_selector;
    struct dt_k8s_toleration *tolerations;
    int n_tolerations;
    struct dt_env_entry *env; /* extra environment of the agent pods */
    int n_env;
    struct dt_k8s_volume *volumes;
    int n_volumes;
    char **image_pull_secrets; /* NULL-terminated Secret names: imagePullSecrets */
    int n_image_pull_secrets;
    struct dt_env_entry *labels; /* on every object and the pod template (Kueue's queue-name) */
    int n_labels;
    struct dt_env_entry *annotations; /* on the Job and the pod template */
    int n_annotations;
    char *pod_template; /* a PodTemplateSpec mapping as flow YAML, merged into the rendered one; or NULL */
    char *job_spec;     /* a JobSpec mapping (no template) as flow YAML, merged into the Job's spec; or NULL */
    /* Seconds a finished Job (and its pods, and through owner references the
     * objects a launch made with it) stays before Kubernetes deletes it;
     * 0: it stays until deleted. */
    double ttl_after_finished_s;
    enum dt_k8s_gang gang;
    char *queue; /* gang: kueue's LocalQueue, volcano's queue; NULL: none named */
    /* Where run directories go so they outlive the pods: a PVC (ReadWriteMany
     * for several nodes) or a host path mounted at DT_K8S_LOG_PATH, the
     * agent's --log-dir.  Only pvc or host_path is set; NULL: in the container. */
    struct dt_k8s_volume *log_volume;
};

/* mpirun: how `scheduler: mpirun` starts agents (issue 12). */
struct dt_mpirun_spec {
    char *program;
    char **hosts;  /* NULL-terminated "host" or "host:slots"; or hostfile */
    int n_hosts;
    char *hostfile;
    char **interfaces; /* network interfaces for Open MPI (btl/oob_tcp_if_include) */
    int n_interfaces;
    bool allow_run_as_root; /* passes --allow-run-as-root; only when asked */
    bool oversubscribe;
    char **extra_args; /* NULL-terminated, added before the program */
    int n_extra_args;
};

/* console: how the ranks' output reaches the console (torchrun's -r, -t,
 * --log-line-prefix-template; spec/jobspec_torchrun.c).  redirects and tee
 * are torchrun's Std text ("3", "0:3,1:2"), read with dt_job_std_of. */
struct dt_console_spec {
    char *redirects;   /* streams that go to the log files only */
    char *tee;         /* streams that go to the console and the log files */
    char *line_prefix; /* NULL: "[rank N] " */
};

/* A console.redirects or console.tee value for one local rank: a mask of
 * DT_STD_OUT and DT_STD_ERR. */
#define DT_STD_OUT 1
#define DT_STD_ERR 2
int dt_job_std_of(const char *std, int local_rank);

struct dt_trainer_spec; /* the bundled trainer's section: spec/trainer_spec.h */

struct dt_job {
    char *path; /* the file it was loaded from ("<string>" otherwise) */
    char *name; /* DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 */
    enum dt_scheduler scheduler;
    int nodes;          /* agents, one per node, >= 1; with nodes: MIN:MAX, MAX */
    int nodes_min;      /* MIN of nodes: MIN:MAX (docs/elastic.md); nodes when it is one number */
    int nproc_per_node; /* ranks per node, >= 1, or DT_NPROC_GPU */
    enum dt_backend backend;
    char **command; /* NULL-terminated argv, or NULL when the trainer runs */
    int command_argc;
    struct dt_trainer_spec *trainer; /* NULL when command runs; exactly one of the two is set */
    struct dt_env_entry *env;        /* extra environment for every rank, in file order */
    int n_env;
    int max_restarts; /* restarts of the whole group after a failure, >= 0 */
    /* Seconds from SIGTERM to SIGKILL when the ranks are stopped, default
     * DT_JOB_GRACE_DEFAULT_S (torchrun's 30 s); --grace-period overrides it. */
    double grace_period_s;
    struct dt_rendezvous_spec rendezvous;
    struct dt_comm_spec comm;
    char *log_dir;
    /* Shell lines run before the agent starts: in the sbatch script (Slurm),
     * in the container's shell (Kubernetes), before each agent under mpirun;
     * a local job has no script to run them in. */
    char **setup;
    int n_setup;
    struct dt_restart_policy restart_policy;
    struct dt_slurm_spec *slurm; /* NULL unless the section is present */
    struct dt_kubernetes_spec *kubernetes;
    struct dt_mpirun_spec *mpirun;
    char *role;                 /* ROLE_NAME of every rank (torchrun's --role) */
    bool virtual_local_rank;    /* LOCAL_RANK=0 and one GPU per rank (torchrun's --virtual-local-rank) */
    struct dt_console_spec console;
    uint64_t signals_to_handle; /* bit N: signal N is passed on to the ranks (torchrun's --signals-to-handle) */
    /* A value came from ${VAR} or --set: the file alone does not say this job, so
     * whoever hands the spec on (nodes, ranks) hands on dt_job_print's copy. */
    bool derived;
};

/* How to read a spec beyond its file (dt_job_load_with). */
struct dt_job_load_opts {
    char *const *set; /* "key.path=value" overrides, applied over the file in order */
    int n_set;
    char *const *env; /* what ${VAR} reads ("NAME=value", NULL-terminated); NULL: environ */
    bool run_file;    /* a run directory's job.yaml: a symbolic link at the path is refused, not followed */
    /* Out, optional: every problem found, one a line in file order (then the
     * overrides'), malloc'd; NULL when the spec is valid.  dt_error_last()
     * holds the first either way. */
    char **problems;
};

/* Loads and validates a job spec file.  On failure returns a negative DT_E*
 * code and leaves "<path>:<line>:<col>: <message>" in dt_error_last().  The
 * file must be a regular one: a FIFO, a device or a directory is refused
 * before it is opened (base/fs.h, dt_fs_open_read), so none blocks. */
int dt_job_load(const char *path, struct dt_job **out);

/* The same from memory; `name` stands in for the path in messages. */
int dt_job_load_string(const char *text, size_t len, const char *name, struct dt_job **out);

/* The same with ${VAR} interpolation read from o->env, --set overrides, and
 * every problem reported (o may be NULL: environ, no overrides). */
int dt_job_load_with(const char *path, const struct dt_job_load_opts *o, struct dt_job **out);
int dt_job_load_string_with(const char *text, size_t len, const char *name, const struct dt_job_load_opts *o,
                            struct dt_job **out);

void dt_job_free(struct dt_job *job);

/* A node count as `nodes:` and `dtrain agent --nnodes` take it: "N" (N:N)
 * or "MIN:MAX" with 1 <= MIN <= MAX <= 65536.  On a bad value returns
 * DT_EINVAL with a sentence (no file position) in dt_error_last(). */
int dt_job_parse_nodes(const char *text, int *min, int *max);

/* True when the job's node count is a range (nodes: MIN:MAX, MIN < MAX):
 * agents join and leave between rounds (docs/elastic.md). */
bool dt_job_elastic(const struct dt_job *job);

/* Names for messages and for rendering: "local", "tcp", ... */
const char *dt_scheduler_name(enum dt_scheduler s);
const char *dt_backend_name(enum dt_backend b);

/* What restart_policy says for a rank that ended with `status` (exit code,
 * or 128+N for signal N). */
enum dt_exit_action dt_job_exit_action(const struct dt_job *job, int status);

/* True when restart_policy.on_exit names `status` itself (not through default). */
bool dt_job_exit_listed(const struct dt_job *job, int status);

/* True if `name` is a variable dtrain sets for every rank (RANK, MASTER_ADDR,
 * DTRAIN_JOB_TOKEN, ...), so the spec's env: may not set it. */
bool dt_job_env_is_reserved(const char *name);

/* The variables comm.interfaces stands for, NULL-terminated:
 * DTRAIN_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME. */
extern const char *const dt_job_ifname_vars[];

/* Writes comm.interfaces as those variables hold it ("eth1,eth2") into buf;
 * false (buf "") when the spec has none. */
bool dt_job_ifnames(const struct dt_job *job, char *buf, size_t size);

/* Whether `value` of the variable `var` (one of dt_job_ifname_vars) says
 * what comm.interfaces says: the same list, for NCCL also with its "="
 * (exact names) prefix.  True when the spec has no comm.interfaces. */
bool dt_job_ifname_agrees(const struct dt_job *job, const char *var, const char *value);

/* Writes the job as YAML with every default filled in; it loads back to the same job. */
void dt_job_print(const struct dt_job *job, FILE *out);

/* Prints every key path the parser knows ("rendezvous.timeout", one a line):
 * the schema test compares this list with configs/job.schema.json. */
void dt_job_list_keys(FILE *out);

#endif
