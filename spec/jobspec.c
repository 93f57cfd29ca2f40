/* jobspec.c - the top level of the job spec: its key table, the rules between sections, load and free.
 *
 * dt_job_load reads the file (bounded), builds the YAML tree, applies the top
 * table (which descends into rendezvous, trainer, slurm, ...) and then checks
 * the rules that join sections: command xor trainer, backend against
 * scheduler and device, the Kubernetes port, setup against scheduler.
 *
 * Not for the trainer's or the schedulers' keys (jobspec_trainer.c,
 * jobspec_sched.c) nor for YAML details (jobspec_yaml.c).
 */
#include "spec/jobspec.h"

#include "base/error.h"
#include "base/fs.h"
#include "spec/jobspec_keys.h"
#include "spec/trainer_spec.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DT_K8S_DEFAULT_PORT 29500
/* rendezvous.timeout where a scheduler starts the agents: torchrun's join
 * timeout (dynamic_rendezvous.py), since a pod or a step may start minutes
 * after the others (an image pulled, resources pending, a lost node's
 * replacement scheduled); a local job's agents are started by hand. */
#define DT_SCHED_JOIN_TIMEOUT_S 600

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const scheduler_names[] = {"local", "slurm", "kubernetes", "mpirun", NULL};
static const char *const backend_names[] = {"auto", "tcp", "shm", "nccl", "mpi", NULL};
static const char *const auth_names[] = {"token", "none", NULL};
static const char *const action_names[] = {"retry", "fail", NULL};

const char *dt_scheduler_name(enum dt_scheduler s)
{
    return (unsigned)s < 4 ? scheduler_names[s] : "?";
}

const char *dt_backend_name(enum dt_backend b)
{
    return (unsigned)b < 5 ? backend_names[b] : "?";
}

int dt_spec_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return 0;
    return 1;
}

/* nproc_per_node: a count, or "gpu" for one rank per visible GPU. */
static int set_nproc(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                     void *obj)
{
    struct dt_job *job = obj;
    long long n;
    char q[96];
    if (v->kind == DT_Y_SCALAR && strcmp(v->text, "gpu") == 0) {
        job->nproc_per_node = DT_NPROC_GPU;
        return 0;
    }
    if (v->kind == DT_Y_SCALAR && v->plain && dt_spec_parse_int(v->text, &n) == 0)
        return dt_spec_check_range(ctx, k, v, (double)n, 1) ? DT_EINVAL : (job->nproc_per_node = (int)n, 0);
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v))
        return dt_spec_fail(ctx, v, k->name, "expected an integer or \"gpu\", got %s", dt_ynode_kind_name(v));
    return dt_spec_fail(ctx, v, k->name, "expected an integer or \"gpu\", got '%s'",
                        dt_yaml_quote(v->text, q, sizeof q));
}

#define NODES_MAX 65536

static int parse_count(const char *s, const char **end, int *out)
{
    long long v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9' && v <= NODES_MAX)
        v = v * 10 + (*p++ - '0');
    *end = p;
    if (p == s)
        return -1;
    *out = v > NODES_MAX ? NODES_MAX + 1 : (int)v;
    return 0;
}

int dt_job_parse_nodes(const char *text, int *min, int *max)
{
    const char *end;
    int lo, hi;
    if (parse_count(text, &end, &lo) < 0 || (*end && *end != ':'))
        return dt_error_set(DT_EINVAL, "expected a node count N or a range MIN:MAX (e.g. 2 or 1:4), got '%s'",
                            text);
    hi = lo;
    if (*end == ':' && (parse_count(end + 1, &end, &hi) < 0 || *end))
        return dt_error_set(DT_EINVAL, "expected a node range MIN:MAX of two whole numbers (e.g. 1:4), got '%s'",
                            text);
    if (lo < 1 || hi > NODES_MAX)
        return dt_error_set(DT_EINVAL, "node counts must be 1..%d, got '%s'", NODES_MAX, text);
    if (lo > hi)
        return dt_error_set(DT_EINVAL, "the node range '%s' has MIN %d above MAX %d (write MIN:MAX)", text, lo,
                            hi);
    *min = lo;
    *max = hi;
    return 0;
}

bool dt_job_elastic(const struct dt_job *job)
{
    return job->nodes_min < job->nodes;
}

/* nodes: N or MIN:MAX (an elastic job).  YAML reads 2:3 as the text "2:3". */
static int set_nodes(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    struct dt_job *job = obj;
    if (v->kind != DT_Y_SCALAR || !v->plain || !strchr(v->text, ':')) { /* N: an integer key's messages */
        struct dt_spec_key n = *k;
        n.type = DT_KT_INT;
        n.lo = 1;
        n.hi = NODES_MAX;
        n.flags = DT_KF_LO | DT_KF_HI;
        int rc = dt_spec_set_number(ctx, &n, v, obj);
        job->nodes_min = job->nodes;
        return rc;
    }
    if (dt_job_parse_nodes(v->text, &job->nodes_min, &job->nodes) < 0)
        return dt_spec_fail(ctx, v, k->name, "%s", dt_error_last());
    return 0;
}

static int print_nodes(const void *obj, char *buf, size_t size)
{
    const struct dt_job *job = obj;
    if (dt_job_elastic(job))
        snprintf(buf, size, "%d:%d", job->nodes_min, job->nodes);
    else
        snprintf(buf, size, "%d", job->nodes);
    return 1;
}

/* Exit codes may be written as numbers or signal names (SIGKILL = 137). */
static int exit_code_of(const char *text)
{
    static const struct {
        const char *name;
        int sig;
    } sigs[] = {{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL},
                {"SIGABRT", SIGABRT}, {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},   {"SIGKILL", SIGKILL},
                {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2}, {"SIGPIPE", SIGPIPE},
                {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM}};
    long long n;
    if (dt_spec_parse_int(text, &n) == 0)
        return n >= 1 && n <= 255 ? (int)n : -1;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (strcmp(text, sigs[i].name) == 0)
            return 128 + sigs[i].sig;
    return -1;
}

static void release_on_exit(void *obj)
{
    struct dt_restart_policy *p = obj;
    free(p->on_exit);
    p->on_exit = NULL;
    p->n_on_exit = 0;
}

static int set_on_exit(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       void *obj)
{
    struct dt_restart_policy *p = obj;
    char q[96];
    if (v->kind != DT_Y_MAP)
        return dt_spec_fail(ctx, v, k->name,
                            "expected a mapping of exit codes to fail or retry, like {42: fail}, "
                            "got %s",
                            dt_ynode_kind_name(v));
    release_on_exit(p);
    if (!(p->on_exit = calloc(v->n ? v->n : 1, sizeof *p->on_exit)))
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    for (size_t i = 0; i < v->n; i++) {
        const struct dt_ynode *key = dt_ymap_key(v, i), *val = dt_ymap_val(v, i);
        int code = exit_code_of(key->text);
        if (code < 0)
            return dt_spec_fail(ctx, key, k->name,
                                "expected an exit code from 1 to 255 or a signal name like "
                                "SIGKILL, got '%s'",
                                dt_yaml_quote(key->text, q, sizeof q));
        for (int j = 0; j < p->n_on_exit; j++)
            if (p->on_exit[j].code == code)
                return dt_spec_fail(ctx, key, k->name, "exit code %d is listed twice", code);
        int action = val->kind == DT_Y_SCALAR ? (strcmp(val->text, "retry") == 0  ? 0
                                                 : strcmp(val->text, "fail") == 0 ? 1
                                                                                  : -1)
                                              : -1;
        if (action < 0)
            return dt_spec_fail(ctx, val, k->name, "%s: expected fail or retry, got %s", key->text,
                                dt_spec_got(val, q, sizeof q));
        p->on_exit[p->n_on_exit].code = code;
        p->on_exit[p->n_on_exit++].action = (enum dt_exit_action)action;
    }
    return 0;
}

static int print_nproc(const void *obj, char *buf, size_t size)
{
    const struct dt_job *job = obj;
    if (job->nproc_per_node == DT_NPROC_GPU)
        snprintf(buf, size, "gpu");
    else
        snprintf(buf, size, "%d", job->nproc_per_node);
    return 1;
}

static int print_on_exit(const void *obj, char *buf, size_t size)
{
    const struct dt_restart_policy *p = obj;
    size_t used = 0;
    if (!p->n_on_exit)
        return 0;
    for (int i = 0; i < p->n_on_exit && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d: %s", i ? ", " : "{", p->on_exit[i].code,
                                 action_names[p->on_exit[i].action]);
    if (used < size)
        snprintf(buf + used, size - used, "}");
    return 1;
}

enum dt_exit_action dt_job_exit_action(const struct dt_job *job, int status)
{
    for (int i = 0; i < job->restart_policy.n_on_exit; i++)
        if (job->restart_policy.on_exit[i].code == status)
            return job->restart_policy.on_exit[i].action;
    return job->restart_policy.otherwise;
}

bool dt_job_exit_listed(const struct dt_job *job, int status)
{
    for (int i = 0; i < job->restart_policy.n_on_exit; i++)
        if (job->restart_policy.on_exit[i].code == status)
            return true;
    return false;
}

static const struct dt_spec_key rendezvous_keys[] = {
    DT_KEY("port", DT_KT_INT, struct dt_rendezvous_spec, port, .lo = 0, .hi = 65535,
           .flags = DT_KF_LO | DT_KF_HI, .def = "0",
           .help =
               "Coordinator port. 0 = a free port chosen at start and published to the ranks; on Kubernetes "
               "the default is 29500 and 0 is refused, as pods must know the port in advance."),
    DT_KEY("timeout", DT_KT_DURATION, struct dt_rendezvous_spec, timeout_s, .lo = 0, .hi = 86400,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI, .def = "60s",
           .help =
               "Rendezvous and connect deadline: how long the agents wait for every node to join a round, the "
               "first one and each after a lost node (torchrun's join timeout; under slurm, kubernetes and "
               "mpirun " STR(DT_SCHED_JOIN_TIMEOUT_S) "s unless set, as a scheduler may start a node minutes "
               "after the others). See docs/multinode.md."),
    DT_KEY("heartbeat_timeout", DT_KT_DURATION, struct dt_rendezvous_spec, heartbeat_timeout_s, .lo = 0,
           .hi = 86400, .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI, .def = "30s",
           .help =
               "A rank stopped, silent or stuck this long is declared hung, described and restarted "
               "(docs/faults.md); a host silent this long is lost (the job ends, or with restarts left waits for "
               "a new agent of that node), and a `tcp` collective stalled this long (+2 s) names its peer "
               "(docs/multinode.md)."),
    DT_KEY("auth", DT_KT_ENUM, struct dt_rendezvous_spec, auth, .names = auth_names, .def = "token",
           .help =
               "How ranks prove they belong to the job. `token`: the trainer's ranks present the job's "
               "token to the coordinator; a `command`'s ranks (PyTorch's TCPStore client has no token) "
               "use their node's store endpoint on 127.0.0.1, which admits only the job's processes and "
               "presents it for them. `none`: anyone who reaches the coordinator's port is a rank."),
    DT_KEY("last_call_timeout", DT_KT_DURATION, struct dt_rendezvous_spec, last_call_timeout_s, .lo = 0,
           .hi = 86400, .flags = DT_KF_LO | DT_KF_HI, .def = "30s",
           .help =
               "Elastic jobs: once MIN agents joined a round, how long it waits for more before it starts "
               "(torchrun's last_call_timeout); a round of MAX starts at once."),
};
static const struct dt_spec_section rendezvous_section = {
    .keys = rendezvous_keys, .n_keys = DT_NKEYS(rendezvous_keys), .size = sizeof(struct dt_rendezvous_spec)};

static const struct dt_spec_key restart_keys[] = {
    DT_KEY(
        "on_exit", DT_KT_CUSTOM, struct dt_restart_policy, on_exit, .set = set_on_exit,
        .release = release_on_exit, .print = print_on_exit, .unset = "none",
        .example = "{42: fail, SIGKILL: retry}", .form = "mapping status → `fail` | `retry`",
        .help =
            "What an exit status means: status 1–255, or a signal name (`SIGKILL`, `SIGSEGV`, ...). A rank "
            "killed by signal N counts as status 128+N, as in a shell, so `137` and `SIGKILL` are the same "
            "entry (listing both is an error). `fail` ends the job at once; `retry` restarts the group "
            "while `max_restarts` allows.",
        .schema =
            "{\"type\": \"object\", \"propertyNames\": {\"pattern\": \"^([1-9][0-9]{0,2}|SIG[A-Z0-9]+)$\"},"
            " \"additionalProperties\": {\"enum\": [\"fail\", \"retry\"]}}"),
    DT_KEY("default", DT_KT_ENUM, struct dt_restart_policy, otherwise, .names = action_names, .def = "retry",
           .help = "For statuses not listed; retries stop after `max_restarts`."),
};
static const struct dt_spec_section restart_section = {
    .keys = restart_keys, .n_keys = DT_NKEYS(restart_keys), .size = sizeof(struct dt_restart_policy)};

static const struct dt_spec_key comm_keys[] = {
    DT_KEY("interfaces", DT_KT_STRLIST, struct dt_comm_spec, interfaces,
           DT_COUNT(struct dt_comm_spec, n_interfaces), .lo = 1, .flags = DT_KF_LO,
           .hint = "like [eth1]: the interfaces the ranks' collectives use",
           .unset = "the route to the coordinator", .example = "[eth0]", .form = "list of interface names",
           .help =
               "The network the ranks' collectives use, in order of preference: the `tcp` backend advertises "
               "the first one's IPv4 address, and every rank gets `GLOO_SOCKET_IFNAME` and "
               "`NCCL_SOCKET_IFNAME` from it; under `scheduler: mpirun` without `mpirun.interfaces` node 0 "
               "advertises its address for the coordinator. `DTRAIN_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME` or "
               "`NCCL_SOCKET_IFNAME` set to another list (in `env:` or the agents' environment) is an error "
               "(docs/multinode.md)."),
};
static const struct dt_spec_section comm_section = {
    .keys = comm_keys, .n_keys = DT_NKEYS(comm_keys), .size = sizeof(struct dt_comm_spec)};

static int check_top(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj);

static const struct dt_spec_key top_keys[] = {
    DT_KEY("name", DT_KT_STR, struct dt_job, name, .flags = DT_KF_REQUIRED, .example = "reference",
           .help = "Job name, a DNS-1123 label (`a-z`, `0-9`, `-`; at most 63). Names Slurm jobs, Kubernetes "
                   "objects and run directories.",
           .schema = "{\"pattern\": \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\", \"maxLength\": 63}"),
    DT_KEY("scheduler", DT_KT_ENUM, struct dt_job, scheduler, .names = scheduler_names, .def = "local",
           .help =
               "Where the job runs: here (`local`), or through Slurm, Kubernetes or mpirun, each set up by "
               "its section below."),
    DT_KEY("nodes", DT_KT_CUSTOM, struct dt_job, nodes, .set = set_nodes, .print = print_nodes, .def = "1",
           .form = "integer 1–65536, or `MIN:MAX`",
           .help =
               "Agents, one per node. A range makes an elastic job (agents started with "
               "`dtrain agent --nnodes MIN:MAX`, by Slurm with `--nodes=MIN-MAX`, or as an Indexed Job of MAX "
               "pods; mpirun refuses it): it starts with at least MIN, admits late agents and survives lost "
               "ones between rounds (docs/elastic.md).",
           .schema = "{\"oneOf\": [{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 65536},"
                     " {\"type\": \"string\", \"pattern\": \"^[0-9]+:[0-9]+$\"}]}"),
    DT_KEY("nproc_per_node", DT_KT_CUSTOM, struct dt_job, nproc_per_node, .set = set_nproc,
           .print = print_nproc, .lo = 1, .hi = 1024, .flags = DT_KF_LO | DT_KF_HI, .def = "1",
           .form = "integer 1–1024 or `gpu`",
           .help = "Ranks per node; `gpu` = one per visible GPU (the trainer then needs `device: cuda`).",
           .schema = "{\"anyOf\": [{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1024}, {\"const\": "
                     "\"gpu\"}]}"),
    DT_KEY("backend", DT_KT_ENUM, struct dt_job, backend, .names = backend_names, .def = "auto",
           .help =
               "Communicator of the bundled trainer: `auto` picks nccl on GPUs, shm within a node (tcp when "
               "/dev/shm has no room for it), tcp across. `shm` needs `nodes: 1`; `mpi` needs "
               "`scheduler: mpirun`; `nccl` needs `trainer.device: cuda`; a cuda trainer needs `nccl` or "
               "`auto`."),
    DT_KEY("command", DT_KT_STRLIST, struct dt_job, command, DT_COUNT(struct dt_job, command_argc), .lo = 1,
           .flags = DT_KF_LO | DT_KF_VERBATIM, .hint = "to run a shell line write [sh, -c, 'your line']",
           .example = "[python3, train.py, --epochs, 3]", .doc = DT_DOC_REF_COMMENT,
           .help = "The program every rank runs, as a list (an argv), never a shell line: for a shell write "
                   "`[sh, -c, 'echo $RANK']`. Exactly one of `command` and `trainer`."),
    DT_KEY(
        "trainer", DT_KT_SECTION_PTR, struct dt_job, trainer, .sub = &dt_jobspec_trainer_section,
        .help =
            "The bundled C trainer (docs/trainer.md). Exactly one of `command` and `trainer`. Defaults are "
            "PyTorch's where PyTorch has the same setting (AdamW, OneCycleLR, DDP buckets, GradScaler)."),
    DT_KEY("env", DT_KT_STRMAP, struct dt_job, env, DT_COUNT(struct dt_job, n_env), .flags = DT_KF_ENVNAME,
           .unset = "none", .example = "{OMP_NUM_THREADS: 1}",
           .help = "Extra environment for every rank; values are taken as written (`OMP_NUM_THREADS: 1` sets "
                   "\"1\"; write `\"\"` for an empty value). The variables dtrain sets per rank (`RANK`, "
                   "`WORLD_SIZE`, `MASTER_ADDR`, `DTRAIN_JOB_TOKEN`, ...) are refused."),
    DT_KEY("max_restarts", DT_KT_INT, struct dt_job, max_restarts, .lo = 0, .hi = 10000,
           .flags = DT_KF_LO | DT_KF_HI, .def = "0", .help = "Restarts of the whole group after a failure."),
    DT_KEY(
        "grace_period", DT_KT_DURATION, struct dt_job, grace_period_s, .lo = 0, .hi = 3600,
        .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI, .def = STR(DT_JOB_GRACE_DEFAULT_S) "s",
        .help =
            "Time between SIGTERM and SIGKILL when ranks are stopped (a failure elsewhere, a restart, "
            "Ctrl-C), as torchrun's 30 s; a rank may save its state in it. `--grace-period` overrides it."),
    DT_KEY("role", DT_KT_STR, struct dt_job, role, .def = "default",
           .help = "The ranks' role (torchrun's `--role`): `ROLE_NAME` in their environment."),
    DT_KEY("virtual_local_rank", DT_KT_BOOL, struct dt_job, virtual_local_rank, .def = "false",
           .help = "Each rank sees only its own GPU, as device 0 (torchrun's `--virtual-local-rank`): "
                   "`LOCAL_RANK=0` and `CUDA_VISIBLE_DEVICES` the local rank's entry of the node's list "
                   "(or the local rank itself when the list is not set)."),
    DT_KEY("signals_to_handle", DT_KT_CUSTOM, struct dt_job, signals_to_handle, .set = dt_spec_set_signals,
           .print = dt_spec_print_signals, .def = "[SIGHUP, SIGINT, SIGQUIT, SIGTERM]",
           .form = "list of signal names",
           .schema = "{\"anyOf\": [{\"type\": \"array\", \"items\": {\"enum\": [\"SIGHUP\", \"SIGINT\", "
                     "\"SIGQUIT\", \"SIGTERM\", \"SIGUSR1\", \"SIGUSR2\", \"SIGALRM\"]}}, {\"type\": \"string\"}]}",
           .help = "The signals the agent passes on to the ranks (torchrun's `--signals-to-handle`: a list, or "
                   "one comma-separated string). SIGHUP, SIGINT, SIGQUIT and SIGTERM stop the job (passed on, "
                   "SIGKILL after `grace_period`) listed or not. SIGUSR1 always, and SIGUSR2 or SIGALRM when "
                   "listed, warn of a time limit: passed on if every rank catches it, else every rank is "
                   "stopped and the job ends with 75 to be requeued (docs/slurm.md)."),
    DT_KEY("console", DT_KT_SECTION, struct dt_job, console, .sub = &dt_jobspec_console_section,
           .help = "How the ranks' output reaches the console and the log files (torchrun's `-r`, `-t` and "
                   "`--log-line-prefix-template`)."),
    DT_KEY("rendezvous", DT_KT_SECTION, struct dt_job, rendezvous, .sub = &rendezvous_section,
           .help = "Coordinator settings."),
    DT_KEY("comm", DT_KT_SECTION, struct dt_job, comm, .sub = &comm_section,
           .help = "How ranks reach each other."),
    DT_KEY("log_dir", DT_KT_STR, struct dt_job, log_dir, .def = "runs",
           .help = "Directory of the run directories, `<log_dir>/<name>-<run id>/`."),
    DT_KEY(
        "setup", DT_KT_STRLIST, struct dt_job, setup, DT_COUNT(struct dt_job, n_setup),
        .flags = DT_KF_VERBATIM,
        .hint = "each item is one shell line, like ['module load cuda/12.4', 'source venv/bin/activate']",
        .unset = "none", .example = "['module load cuda/12.4', 'source venv/bin/activate']",
        .doc = DT_DOC_REF_COMMENT,
        .help =
            "Shell lines run before the agent starts (module load, a virtual environment): in the sbatch "
            "script (Slurm), in the container's /bin/sh before it execs the agent (Kubernetes), in a shell "
            "on each host before its agent (mpirun). Refused with `scheduler: local`."),
    DT_KEY("restart_policy", DT_KT_SECTION, struct dt_job, restart_policy, .sub = &restart_section,
           .help = "Which exit statuses are retried (docs/faults.md)."),
    DT_KEY(
        "slurm", DT_KT_SECTION_PTR, struct dt_job, slurm, .sub = &dt_jobspec_slurm_section, .unset = "absent",
        .help = "The sbatch settings of `scheduler: slurm`; zero or absent means \"not asked for\": the "
                "`#SBATCH` line is left out and Slurm's default applies. A section may be present whatever "
                "`scheduler` says (it is checked, and used by `dtrain render`). How such a job runs: "
                "docs/slurm.md."),
    DT_KEY("kubernetes", DT_KT_SECTION_PTR, struct dt_job, kubernetes, .sub = &dt_jobspec_kubernetes_section,
           .unset = "absent",
           .help = "The pods of `scheduler: kubernetes`, which requires this section (docs/kubernetes.md)."),
    DT_KEY("mpirun", DT_KT_SECTION_PTR, struct dt_job, mpirun, .sub = &dt_jobspec_mpirun_section,
           .unset = "absent",
           .help =
               "How `scheduler: mpirun` starts agents: one per node, or with `backend: mpi` every rank as an "
               "MPI process (docs/mpirun.md)."),
};
/* What the key tables cannot say one key at a time: exactly one of command
 * and trainer; backend mpi only under mpirun; kubernetes needs its section. */
#define TOP_SCHEMA                                                                                           \
    "{\"oneOf\": [{\"required\": [\"command\"], \"not\": {\"required\": [\"trainer\"]}},"                    \
    " {\"required\": [\"trainer\"], \"not\": {\"required\": [\"command\"]}}],"                               \
    " \"allOf\": [{\"if\": {\"properties\": {\"backend\": {\"const\": \"mpi\"}}, \"required\": "             \
    "[\"backend\"]},"                                                                                        \
    " \"then\": {\"properties\": {\"scheduler\": {\"const\": \"mpirun\"}}, \"required\": [\"scheduler\"]}}," \
    " {\"if\": {\"properties\": {\"scheduler\": {\"const\": \"kubernetes\"}}, \"required\": "                \
    "[\"scheduler\"]},"                                                                                      \
    " \"then\": {\"required\": [\"kubernetes\"]}}]}"
const struct dt_spec_section dt_jobspec_root = {
    .title = "the top level",
    .keys = top_keys,
    .n_keys = DT_NKEYS(top_keys),
    .size = sizeof(struct dt_job),
    .check = check_top,
    .help =
        "One YAML file describes a job: `dtrain validate job.yaml` checks it, `dtrain launch job.yaml` runs "
        "it. YAML 1.2 (true/false only; yes/no/on/off are strings).",
    .schema = TOP_SCHEMA};

void dt_job_print(const struct dt_job *job, FILE *out)
{
    dt_spec_print(&dt_jobspec_root, job, 0, out);
}

void dt_job_list_keys(FILE *out)
{
    dt_spec_list_keys(&dt_jobspec_root, out);
}

static int check_name(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    char q[96];
    if (dt_spec_dns_label(job->name))
        return 0;
    return dt_spec_fail(
        ctx, dt_ymap_get(map, "name"), "name",
        "expected a DNS-1123 label (lower-case letters, digits and '-', starting and ending with "
        "a letter or digit, at most 63 characters; it names Slurm and Kubernetes objects), got '%s'%s",
        dt_yaml_quote(job->name, q, sizeof q), strlen(job->name) > 63 ? " (too long)" : "");
}

static int check_program(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    if (!job->command && !job->trainer)
        return dt_spec_fail(ctx, map, NULL,
                            "neither command nor trainer is set; a job runs either a command on every rank "
                            "(command: [python3, train.py]) or the bundled trainer (trainer: {...})");
    if (job->command && job->trainer) {
        const struct dt_ynode *c = dt_ymap_key_node(map, "command"), *t = dt_ymap_key_node(map, "trainer");
        const struct dt_ynode *later = c->line > t->line || (c->line == t->line && c->col > t->col) ? c : t;
        return dt_spec_fail(ctx, later, NULL,
                            "both command and trainer are set; a job runs exactly one of them (remove one)");
    }
    return 0;
}

static int check_backend(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    const struct dt_ynode *b = dt_ymap_get(map, "backend"), *np = dt_ymap_get(map, "nproc_per_node");
    int cuda = job->trainer && job->trainer->device == DT_DEVICE_CUDA;
    if (job->backend == DT_BACKEND_MPI && job->scheduler != DT_SCHED_MPIRUN)
        return dt_spec_fail(ctx, b, "backend",
                            "mpi needs scheduler: mpirun (MPI ranks must be started by "
                            "mpirun), but scheduler is %s",
                            dt_scheduler_name(job->scheduler));
    if (job->backend == DT_BACKEND_SHM && job->nodes > 1)
        return dt_spec_fail(ctx, b, "backend",
                            "shm works only within one node, but nodes is %d; use auto or "
                            "tcp",
                            job->nodes);
    if (job->trainer && job->backend == DT_BACKEND_NCCL && !cuda)
        return dt_spec_fail(ctx, b, "backend",
                            "nccl runs on GPUs; set trainer.device: cuda or use auto, tcp "
                            "or shm");
    if (cuda && (job->backend == DT_BACKEND_TCP || job->backend == DT_BACKEND_SHM))
        return dt_spec_fail(ctx, b, "backend", "%s is a CPU backend; trainer.device: cuda needs nccl or auto",
                            dt_backend_name(job->backend));
    if (job->trainer && job->nproc_per_node == DT_NPROC_GPU && !cuda)
        return dt_spec_fail(ctx, np, "nproc_per_node",
                            "gpu starts one rank per GPU, but the trainer runs on "
                            "the CPU; set trainer.device: cuda or give a number");
    return 0;
}

/* The variables the agent sets for every rank, whatever the launcher's
 * environment or the spec says (launcher/agent/agent_plan.c builds them). */
static const char *const reserved[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "DTRAIN_COORD_ADDR",
    "DTRAIN_COORD_HOST",
    "DTRAIN_JOB_TOKEN",
    "DTRAIN_RUN_DIR",
    "DTRAIN_RUN_ID",
    "DTRAIN_JOB_NAME",
    "DTRAIN_NODE_RANK",
    "DTRAIN_NNODES",
    "DTRAIN_RESTART_COUNT",
    "DTRAIN_ERROR_FILE",
    "DTRAIN_ELASTIC",
    "DTRAIN_ELASTIC_MAX_NODES",
    "DTRAIN_METRICS_FILE",
    "DTRAIN_TRACEBACK_FILE",
    "DTRAIN_TRACEBACK_SIGNAL",
};

bool dt_job_env_is_reserved(const char *name)
{
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(reserved[i], name) == 0)
            return true;
    return false;
}

/* A value in env: for a name the agent sets would be silently overridden,
 * so it is refused here. */
static int check_env(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    const struct dt_ynode *env = dt_ymap_get(map, "env");
    for (int i = 0; i < job->n_env; i++)
        if (dt_job_env_is_reserved(job->env[i].name))
            return dt_spec_fail(ctx, dt_ymap_key(env, (size_t)i), "env",
                                "%s is set by dtrain for every rank and cannot be overridden",
                                job->env[i].name);
    return 0;
}

/* Pods must know the coordinator's port before it starts, so Kubernetes
 * jobs get a fixed one (29500, as torchrun) unless the spec names one. */
static int check_kubernetes(struct dt_spec_ctx *ctx, const struct dt_ynode *map, struct dt_job *job)
{
    if (job->scheduler != DT_SCHED_KUBERNETES)
        return 0;
    if (!job->kubernetes)
        return dt_spec_fail(ctx, dt_ymap_get(map, "scheduler"), "scheduler",
                            "kubernetes needs a kubernetes: section with at least image");
    const struct dt_ynode *rdzv = dt_ymap_get(map, "rendezvous");
    const struct dt_ynode *port = rdzv ? dt_ymap_get(rdzv, "port") : NULL;
    if (!port)
        job->rendezvous.port = DT_K8S_DEFAULT_PORT;
    else if (job->rendezvous.port == 0)
        return dt_spec_fail(
            ctx, port, "rendezvous.port",
            "0 (a free port) cannot work on Kubernetes: every pod must know the port before the "
            "coordinator starts; leave it out for 29500 or give a port");
    return 0;
}

/* ---- comm.interfaces and the variables it stands for ---- */

const char *const dt_job_ifname_vars[] = {"DTRAIN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                                          NULL};

bool dt_job_ifnames(const struct dt_job *job, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < job->comm.n_interfaces && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "", job->comm.interfaces[i]);
    return job->comm.n_interfaces > 0;
}

bool dt_job_ifname_agrees(const struct dt_job *job, const char *var, const char *value)
{
    char want[512];
    if (!dt_job_ifnames(job, want, sizeof want))
        return true;
    if (!strcmp(var, "NCCL_SOCKET_IFNAME") && value[0] == '=') /* NCCL: exact names, not prefixes */
        value++;
    return strcmp(value, want) == 0;
}

/* Each name an interface name can be (Linux: 1-15 bytes, no '/', ',', '=' or
 * blank; the variables are comma lists), and the spec's env: saying the same. */
static int check_comm(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    const struct dt_ynode *comm = dt_ymap_get(map, "comm");
    for (int i = 0; i < job->comm.n_interfaces; i++) {
        const char *n = job->comm.interfaces[i];
        if (strlen(n) > 15 || n[strcspn(n, "/,= \t:")])
            return dt_spec_fail(ctx, dt_ymap_get(comm, "interfaces"), "comm.interfaces",
                                "'%.40s' is not an interface name (at most 15 characters, none of / , = : or "
                                "blanks; list several as [eth1, eth2])",
                                n);
    }
    const struct dt_ynode *env = dt_ymap_get(map, "env");
    for (int i = 0; i < job->n_env; i++)
        for (int v = 0; dt_job_ifname_vars[v]; v++)
            if (!strcmp(job->env[i].name, dt_job_ifname_vars[v]) &&
                !dt_job_ifname_agrees(job, job->env[i].name, job->env[i].value)) {
                char want[512];
                dt_job_ifnames(job, want, sizeof want);
                return dt_spec_fail(ctx, dt_ymap_key(env, (size_t)i), "env",
                                    "%s=%s disagrees with comm.interfaces [%s]: the ranks would use one "
                                    "network or the other depending on the backend; keep one of them",
                                    job->env[i].name, job->env[i].value, want);
            }
    return 0;
}

/* setup: lines run in the sbatch script, the pod's shell or mpirun's shell
 * before the agent; a local job has no such shell (the launcher is the agent). */
static int check_setup(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    if (!job->setup || job->scheduler != DT_SCHED_LOCAL)
        return 0;
    return dt_spec_fail(ctx, dt_ymap_get(map, "setup"), "setup",
                        "runs before the agent starts on each node (Slurm, Kubernetes, mpirun), but "
                        "scheduler is local, where `dtrain launch` is the agent: run these lines in the "
                        "shell before `dtrain launch`");
}

/* An elastic job's agents are started by hand (`dtrain agent --nnodes
 * MIN:MAX`, scheduler local), by Slurm (--nodes=MIN-MAX) or by Kubernetes
 * (an Indexed Job of MAX pods); mpirun starts a fixed number of agents. */
static int check_elastic(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    if (!dt_job_elastic(job) || job->scheduler != DT_SCHED_MPIRUN)
        return 0;
    return dt_spec_fail(ctx, dt_ymap_get(map, "nodes"), "nodes",
                        "a range (%d:%d) makes an elastic job, whose agents are started with `dtrain agent "
                        "--nnodes %d:%d`; scheduler %s starts a fixed number of nodes: give one number",
                        job->nodes_min, job->nodes, job->nodes_min, job->nodes, dt_scheduler_name(job->scheduler));
}

/* Unless the spec sets it, a scheduler's job waits torchrun's join timeout
 * (DT_SCHED_JOIN_TIMEOUT_S, said in rendezvous.timeout's help). */
static void default_join_timeout(const struct dt_ynode *map, struct dt_job *job)
{
    const struct dt_ynode *rdzv = dt_ymap_get(map, "rendezvous");
    if (job->scheduler != DT_SCHED_LOCAL && !(rdzv && dt_ymap_get(rdzv, "timeout")))
        job->rendezvous.timeout_s = DT_SCHED_JOIN_TIMEOUT_S;
}

/* Where a problem of trainer.ddp.elastic_batch is shown: the key, else nodes. */
static const struct dt_ynode *elastic_batch_node(const struct dt_ynode *map)
{
    const struct dt_ynode *tr = dt_ymap_get(map, "trainer"), *ddp = tr ? dt_ymap_get(tr, "ddp") : NULL;
    const struct dt_ynode *key = ddp ? dt_ymap_get(ddp, "elastic_batch") : NULL;
    return key ? key : dt_ymap_get(map, "nodes");
}

static long long gcd_ll(long long a, long long b)
{
    while (b) {
        long long r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* The least grad_accum with which MAX x grad_accum divides by every node
 * count in MIN..MAX (MAX x A / n micro-batches on n nodes); 0 past 65536. */
static long long least_accum(int min, int max)
{
    long long l = 1;
    for (int n = min; n <= max && l <= 65536LL * max; n++)
        l = l / gcd_ll(l, n) * n;
    long long a = l / gcd_ll(l, max);
    return l <= 65536LL * max && a <= 65536 ? a : 0;
}

/* An elastic trainer job works at every node count of its range or is
 * refused here: keep_global runs MAX x grad_accum / n micro-batches on n
 * nodes (nproc_per_node cancels out), which must be whole, and a GPU trainer
 * cannot run another grad_accum than its spec's; keep_per_rank holds at
 * every count but cannot keep a token run's place in its shards. */
static int check_elastic_batch(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_job *job)
{
    const struct dt_trainer_spec *t = job->trainer;
    if (!t || !dt_job_elastic(job))
        return 0;
    enum dt_elastic_batch mode = dt_trainer_elastic_batch(t);
    if (mode == DT_ELASTIC_BATCH_PER_RANK && strcmp(t->data.dataset, "tokens") == 0)
        return dt_spec_fail(ctx, elastic_batch_node(map), "trainer.ddp.elastic_batch",
                            "keep_per_rank cannot keep a token run's place: its shards are read in whole global "
                            "batches (docs/elastic.md); use keep_global (the default for dataset: tokens)");
    if (mode != DT_ELASTIC_BATCH_GLOBAL)
        return 0;
    long long a = t->ddp.grad_accum, keep = (long long)job->nodes * a, fit = least_accum(job->nodes_min, job->nodes);
    char hint[160] = "";
    if (fit > 0)
        snprintf(hint, sizeof hint, "take trainer.ddp.grad_accum a multiple of %lld, ", fit);
    for (int n = job->nodes_min; n < job->nodes; n++) {
        bool device = t->device == DT_DEVICE_CUDA;
        if (keep % n == 0 && !device)
            continue;
        if (keep % n == 0 && keep / n == a)
            continue;
        if (device)
            return dt_spec_fail(ctx, elastic_batch_node(map), "trainer.ddp.elastic_batch",
                                "keep_global on %d nodes of %d:%d needs grad_accum %lld x %d / %d, but a GPU "
                                "trainer cannot change grad_accum: use keep_per_rank",
                                n, job->nodes_min, job->nodes, a, job->nodes, n);
        return dt_spec_fail(ctx, elastic_batch_node(map), "trainer.ddp.elastic_batch",
                            "keep_global keeps the global batch of %d nodes x grad_accum %lld (x nproc_per_node x "
                            "batch_size %d), which a round of %d nodes cannot keep: it would need grad_accum "
                            "%lld x %d / %d, no whole number; %sor use keep_per_rank",
                            job->nodes, a, t->data.batch_size, n, a, job->nodes, n, hint);
    }
    return 0;
}

static int check_top(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    struct dt_job *job = obj;
    default_join_timeout(map, job);
    /* Independent rules: each one's problem is reported, not only the first. */
    int (*const rules[])(struct dt_spec_ctx *, const struct dt_ynode *, const struct dt_job *) = {
        check_name, check_elastic, check_elastic_batch, check_program, check_backend, check_env, check_setup,
        check_comm};
    int rc = check_kubernetes(ctx, map, job);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0] && (rc == 0 || rc == DT_EINVAL); i++) {
        int r = rules[i](ctx, map, job);
        rc = rc ? rc : r;
    }
    return rc;
}

void dt_job_free(struct dt_job *job)
{
    if (!job)
        return;
    dt_spec_release(&dt_jobspec_root, job);
    free(job->path);
    free(job);
}

extern char **environ;

/* The tree as the tables will read it: the overrides put in, then ${VAR} expanded. */
static int prepare_tree(struct dt_spec_ctx *ctx, struct dt_ynode *root, const struct dt_job_load_opts *o,
                        bool *derived)
{
    int rc = 0;
    for (int i = 0; o && i < o->n_set && (rc == 0 || rc == DT_EINVAL); i++) {
        int r = dt_spec_override(ctx, root, i);
        rc = rc ? rc : r;
    }
    int changed = dt_spec_interpolate(ctx, root, o && o->env ? o->env : environ);
    *derived = changed > 0 || (o && o->n_set > 0);
    return rc ? rc : changed < 0 ? changed : 0;
}

int dt_job_load_string_with(const char *text, size_t len, const char *name, const struct dt_job_load_opts *o,
                            struct dt_job **out)
{
    *out = NULL;
    if (o && o->problems)
        *o->problems = NULL;
    if (!name)
        name = "<string>";
    if (len > DT_YAML_MAX_BYTES)
        return dt_error_set(DT_EINVAL,
                            "%s: the file is %zu bytes; a job spec may be at most %d bytes (1 MiB)", name,
                            len, DT_YAML_MAX_BYTES);
    struct dt_ynode *root;
    int rc = dt_yaml_parse(text, len, name, &root);
    if (rc)
        return rc;
    struct dt_job *job = calloc(1, sizeof *job);
    if (!job || !(job->path = strdup(name))) {
        free(job);
        dt_yaml_free(root);
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    }
    rc = dt_spec_init(&dt_jobspec_root, job);
    if (rc) {
        dt_job_free(job);
        dt_yaml_free(root);
        return rc;
    }
    struct dt_spec_ctx ctx = {.file = name, .root = &dt_jobspec_root, .sets = o ? o->set : NULL};
    rc = prepare_tree(&ctx, root, o, &job->derived);
    /* The keys are read even when an override or a variable failed: every problem is said at once. */
    if (rc == 0 || rc == DT_EINVAL) {
        int r = dt_spec_apply(&ctx, &dt_jobspec_root, root, job);
        rc = rc ? rc : r;
    }
    dt_yaml_free(root);
    if (ctx.n_problems && rc != DT_ENOMEM)
        rc = DT_EINVAL;
    dt_spec_problems_finish(&ctx, rc == DT_EINVAL && o ? o->problems : NULL);
    if (rc) {
        dt_job_free(job);
        return rc;
    }
    *out = job;
    return 0;
}

int dt_job_load_string(const char *text, size_t len, const char *name, struct dt_job **out)
{
    return dt_job_load_string_with(text, len, name, NULL, out);
}

/* Reads at most DT_YAML_MAX_BYTES + 1 bytes, so a huge file or an endless
 * pipe (/dev/zero) costs nothing before it is refused. */
static int read_bounded(int fd, const char *path, char **text, size_t *len)
{
    size_t cap = DT_YAML_MAX_BYTES + 1, used = 0;
    char *buf = malloc(cap);
    if (!buf)
        return dt_error_set(DT_ENOMEM, "%s: out of memory reading the file", path);
    for (;;) {
        ssize_t n = read(fd, buf + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(buf);
            return dt_error_set_errno(DT_EIO, errno, "%s: cannot read", path);
        }
        if (n == 0 || (used += (size_t)n) == cap)
            break;
    }
    *text = buf;
    *len = used;
    return 0;
}

int dt_job_load(const char *path, struct dt_job **out)
{
    return dt_job_load_with(path, NULL, out);
}

int dt_job_load_with(const char *path, const struct dt_job_load_opts *o, struct dt_job **out)
{
    *out = NULL;
    if (o && o->problems)
        *o->problems = NULL;
    /* a FIFO (or a device) is refused before it is opened: reading one
     * would wait for a writer, and `launch --resume` reads the run's job.yaml */
    struct stat st;
    int fd = dt_fs_open_read(AT_FDCWD, path, o && o->run_file ? DT_FS_NOFOLLOW : DT_FS_FOLLOW, &st);
    if (fd < 0)
        return fd;
    if (st.st_size > DT_YAML_MAX_BYTES) {
        close(fd);
        return dt_error_set(DT_EINVAL,
                            "%s: the file is %lld bytes; a job spec may be at most %d bytes (1 MiB)", path,
                            (long long)st.st_size, DT_YAML_MAX_BYTES);
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_bounded(fd, path, &text, &len);
    close(fd);
    if (rc)
        return rc;
    if (len > DT_YAML_MAX_BYTES)
        rc = dt_error_set(DT_EINVAL, "%s: more than %d bytes; a job spec may be at most %d bytes (1 MiB)",
                          path, DT_YAML_MAX_BYTES, DT_YAML_MAX_BYTES);
    else
        rc = dt_job_load_string_with(text, len, path, o, out);
    free(text);
    return rc;
}
