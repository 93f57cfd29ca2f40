/* jobspec_sched.c - the key tables of the scheduler sections: slurm, kubernetes, mpirun.
 *
 * Values are checked here as far as the scheduler itself would refuse them
 * (time formats, label names, toleration rules), so `dtrain validate` catches
 * what sbatch or kubectl would only catch after submission.
 *
 * Not for rendering sbatch scripts, manifests or mpirun lines
 * (scheduler-adapters/ reads these structs).
 */
#include "base/error.h"
#include "spec/jobspec.h"
#include "spec/jobspec_keys.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TIME_S (3650LL * 86400) /* ten years: beyond any partition's limit */
#define MAX_BYTES 1e18              /* an exabyte: beyond any node */

static const char *const pull_policies[] = {"IfNotPresent", "Always", "Never", NULL};
static const char *const operators[] = {"Equal", "Exists", NULL};
static const char *const effects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute", NULL};
static const char *const slurm_tasks[] = {"per_node", "per_rank", NULL};
static const char *const gangs[] = {"none", "kueue", "volcano", "coscheduling", NULL};

/* Slurm's own time forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
 * D-HH:MM:SS; and dtrain durations (2h, 90m) for people who think in those. */
static int parse_slurm_time(const char *s, long long *seconds)
{
    long long d = 0, f[3] = {0, 0, 0};
    int n = 0;
    double dur;
    /* Bounds first: a hostile "9999...9h" must not overflow the conversions below. */
    if (strpbrk(s, "hms") && dt_spec_parse_duration(s, &dur) == 0) {
        if (!(dur >= 1 && dur <= MAX_TIME_S))
            return -1;
        *seconds = (long long)(dur + 0.5);
        return 0;
    }
    const char *dash = strchr(s, '-');
    char buf[64];
    if (strlen(s) >= sizeof buf)
        return -1;
    if (dash) {
        snprintf(buf, sizeof buf, "%.*s", (int)(dash - s), s);
        if (dt_spec_parse_int(buf, &d) || d < 0 || d > MAX_TIME_S / 86400)
            return -1;
        s = dash + 1;
    }
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        if (n == 3 || dt_spec_parse_int(tok, &f[n]) || f[n] < 0 || f[n] > MAX_TIME_S / 60 ||
            (n > 0 && f[n] > 59))
            return -1;
        n++;
    }
    if (n == 0)
        return -1;
    if (dash) /* D-HH[:MM[:SS]] */
        *seconds = d * 86400 + f[0] * 3600 + f[1] * 60 + f[2];
    else if (n == 1) /* minutes */
        *seconds = f[0] * 60;
    else if (n == 2) /* MM:SS */
        *seconds = f[0] * 60 + f[1];
    else
        *seconds = f[0] * 3600 + f[1] * 60 + f[2];
    return 0; /* 0: no limit asked for, the line is left out */
}

static int set_slurm_time(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                          void *obj)
{
    struct dt_slurm_spec *s = obj;
    char q[96];
    long long sec;
    if (v->kind == DT_Y_SCALAR && parse_slurm_time(v->text, &sec) == 0) {
        s->time_s = sec;
        return 0;
    }
    return dt_spec_fail(ctx, v, k->name,
                        "expected a time limit like \"02:00:00\", \"1-12:00:00\", 90 (minutes), 2h "
                        "or 0 (none asked for), got %s",
                        dt_spec_got(v, q, sizeof q));
}

static int print_slurm_time(const void *obj, char *buf, size_t size)
{
    const struct dt_slurm_spec *s = obj;
    long long t = s->time_s;
    if (t <= 0)
        return 0;
    snprintf(buf, size, "\"%lld-%02lld:%02lld:%02lld\"", t / 86400, t / 3600 % 24, t / 60 % 60, t % 60);
    return 1;
}

/* --mem as sbatch reads it: a whole number with K, M, G or T, binary (64G is
 * 64 GiB), a bare number in MiB, and 0 for all of the node's memory; dtrain's
 * sizes (64Gi, 500MB: MB and GB decimal, as everywhere in the spec) too. */
static int parse_slurm_mem(const char *s, double *bytes)
{
    static const char units[] = "KMGT";
    size_t len = strlen(s), n = len;
    const char *u =
        len && isalpha((unsigned char)s[len - 1]) ? strchr(units, toupper((unsigned char)s[len - 1])) : NULL;
    if (u && len >= 2 && isdigit((unsigned char)s[len - 2]))
        n--; /* sbatch's one-letter unit */
    else if (!(len && isdigit((unsigned char)s[len - 1])))
        return dt_spec_parse_bytes(s, 1048576.0, bytes); /* 64Gi, 500MB, 1GiB */
    else
        u = units + 1; /* a bare number: MiB */
    /* sbatch reads whole numbers only: 0.5G is refused there, so here too */
    if (n == 0 || n > 30 || strspn(s, "0123456789") != n)
        return -1;
    *bytes = strtod(s, NULL) * (double)(1ULL << (10 * (u - units + 1)));
    return 0;
}

static int set_slurm_mem(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                         void *obj)
{
    struct dt_slurm_spec *s = obj;
    char q[96];
    double x;
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v) || parse_slurm_mem(v->text, &x))
        return dt_spec_fail(ctx, v, k->name,
                            "expected a size like 512Mi, 64Gi or 4GB, or as sbatch writes --mem: 64G "
                            "(GiB), 500M, 4096 (a bare number is MiB) or 0 (all of the node's memory), "
                            "got %s",
                            dt_spec_got(v, q, sizeof q));
    struct dt_spec_key as_bytes = *k; /* the range's message in bytes, as for any size */
    as_bytes.type = DT_KT_BYTES;
    s->mem_all = x == 0;
    if (!s->mem_all && dt_spec_check_range(ctx, &as_bytes, v, x, 0))
        return DT_EINVAL;
    s->mem_bytes = (uint64_t)x;
    return 0;
}

/* Back as sbatch reads it: G or M when exact, else bytes. */
static int print_slurm_mem(const void *obj, char *buf, size_t size)
{
    const struct dt_slurm_spec *s = obj;
    unsigned long long b = s->mem_bytes;
    if (s->mem_all)
        snprintf(buf, size, "0");
    else if (!b)
        return 0;
    else if (b % (1ULL << 30) == 0)
        snprintf(buf, size, "%lluG", b >> 30);
    else if (b % (1ULL << 20) == 0)
        snprintf(buf, size, "%lluM", b >> 20);
    else
        snprintf(buf, size, "%lluB", b);
    return 1;
}

/* Slurm's GRES type names: letters, digits, '_', '-' and '.' (h100, a100_80gb). */
static int gpu_type_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("_-.", s[i]))
            return 0;
    return 1;
}

/* gpus_per_node: a count, or "TYPE:N" (--gpus-per-node=h100:8). */
static int set_slurm_gpus(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                          void *obj)
{
    struct dt_slurm_spec *s = obj;
    char q[96];
    long long n = -1;
    const char *colon = v->kind == DT_Y_SCALAR ? strrchr(v->text, ':') : NULL;
    if (v->kind == DT_Y_SCALAR && v->plain && !colon && dt_spec_parse_int(v->text, &n) == 0) {
        if (dt_spec_check_range(ctx, k, v, (double)n, 1))
            return DT_EINVAL;
        free(s->gpu_type);
        s->gpu_type = NULL;
        s->gpus_per_node = (int)n;
        return 0;
    }
    if (colon && gpu_type_ok(v->text, (size_t)(colon - v->text)) && dt_spec_parse_int(colon + 1, &n) == 0 &&
        n >= 1 && n <= k->hi) {
        char *type = strndup(v->text, (size_t)(colon - v->text));
        if (!type)
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        free(s->gpu_type);
        s->gpu_type = type;
        s->gpus_per_node = (int)n;
        return 0;
    }
    return dt_spec_fail(
        ctx, v, k->name,
        "expected a GPU count from 0 to %g or \"TYPE:N\" like \"h100:8\" (a Slurm GPU type of "
        "letters, digits, '_', '-' and '.', and a count from 1 to %g), got %s",
        k->hi, k->hi, dt_spec_got(v, q, sizeof q));
}

static void release_slurm_gpus(void *obj)
{
    struct dt_slurm_spec *s = obj;
    free(s->gpu_type);
    s->gpu_type = NULL;
}

static int print_slurm_gpus(const void *obj, char *buf, size_t size)
{
    const struct dt_slurm_spec *s = obj;
    if (s->gpu_type)
        snprintf(buf, size, "\"%s:%d\"", s->gpu_type, s->gpus_per_node);
    else
        snprintf(buf, size, "%d", s->gpus_per_node);
    return 1;
}

/* srun's --cpu-bind and --gpu-bind values (cores, map_cpu:0,1, closest,
 * verbose,map_gpu:0,1): one shell word, so a bad one fails here and not in srun. */
static int check_bind(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const char *key, const char *v)
{
    char q[96];
    if (!v || (*v && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_,:.=-") ==
                         strlen(v)))
        return 0;
    return dt_spec_fail(ctx, dt_ymap_get(map, key), key,
                        "expected an srun --%.3s-bind value like %s (letters, digits and _ , : . = -), got '%s'",
                        key, key[0] == 'c' ? "cores or map_cpu:0,1" : "closest or map_gpu:0,1",
                        dt_yaml_quote(v, q, sizeof q));
}

/* sbatch --signal takes whole seconds; a lead as long as the limit would stop the job as it starts. */
static int check_slurm(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_slurm_spec *s = obj;
    if (check_bind(ctx, map, "cpu_bind", s->cpu_bind) || check_bind(ctx, map, "gpu_bind", s->gpu_bind))
        return DT_EINVAL;
    const struct dt_ynode *lead = dt_ymap_get(map, "signal_lead");
    if (s->signal_lead_s != (double)(long long)s->signal_lead_s)
        return dt_spec_fail(ctx, lead, "signal_lead",
                            "expected whole seconds (sbatch --signal takes seconds)");
    if (s->requeue && s->time_s > 0 && s->signal_lead_s >= (double)s->time_s)
        return dt_spec_fail(
            ctx, lead ? lead : map, lead ? "signal_lead" : NULL,
            "the requeue warning comes %g s before the time limit (signal_lead), but the limit "
            "is %lld s: the job would be asked to stop as it starts; give a shorter signal_lead "
            "or a longer time",
            s->signal_lead_s, (long long)s->time_s);
    return 0;
}

static const struct dt_spec_key slurm_keys[] = {
    DT_KEY("partition", DT_KT_STR, struct dt_slurm_spec, partition, .example = "gpu",
           .help = "sbatch --partition."),
    DT_KEY("account", DT_KT_STR, struct dt_slurm_spec, account, .example = "ml", .help = "sbatch --account."),
    DT_KEY(
        "time", DT_KT_CUSTOM, struct dt_slurm_spec, time_s, .set = set_slurm_time, .print = print_slurm_time,
        .example = "\"02:00:00\"",
        .form = "`\"MM\"`, `\"MM:SS\"`, `\"HH:MM:SS\"`, `\"D-HH\"`, `\"D-HH:MM\"`, `\"D-HH:MM:SS\"`, minutes "
                "as a "
                "number, or a duration (`2h`)",
        .help =
            "Time limit; quote the colon forms. `0`: none asked for, the line is left out (the partition's "
            "`DefaultTime` applies).",
        .schema = "{\"anyOf\": [{\"type\": \"string\", \"pattern\":"
                  " \"^([0-9]+-)?[0-9]+(:[0-5]?[0-9]){0,2}$|^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$\"},"
                  " {\"type\": \"integer\", \"minimum\": 0}]}"),
    DT_KEY(
        "gpus_per_node", DT_KT_CUSTOM, struct dt_slurm_spec, gpus_per_node, .lo = 0, .hi = 64,
        .flags = DT_KF_LO | DT_KF_HI, .set = set_slurm_gpus, .release = release_slurm_gpus,
        .print = print_slurm_gpus, .example = "8", .form = "integer 0–64, or `\"TYPE:N\"` (`\"h100:8\"`)",
        .help = "GPUs per node, typed as Slurm names them (`--gpus-per-node=h100:8`); "
                "`nproc_per_node: gpu` starts N ranks.",
        .schema =
            "{\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 64},"
            " {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9_.-]{1,63}:([1-9]|[1-5][0-9]|6[0-4])$\"}]}"),
    DT_KEY("cpus_per_task", DT_KT_INT, struct dt_slurm_spec, cpus_per_task, .lo = 1, .hi = 4096,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET, .example = "32",
           .help = "CPUs for each node's agent task (and its ranks); passed to `srun` too, which does not "
                   "inherit it from sbatch."),
    DT_KEY(
        "mem", DT_KT_CUSTOM, struct dt_slurm_spec, mem_bytes, .lo = 1, .hi = MAX_BYTES,
        .flags = DT_KF_LO | DT_KF_HI, .set = set_slurm_mem, .print = print_slurm_mem, .example = "256G",
        .form = "as sbatch reads `--mem`: `64G` (K/M/G/T are powers of 1024), a bare number in MiB, `0` for "
                "all of the node's memory; or a size (`64Gi`, `500MB`)",
        .help = "Memory per node.",
        .schema =
            "{\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0},"
            " {\"type\": \"string\", \"pattern\": \"^[0-9]+[KkMmGgTt]?$\"}, {\"$ref\": \"#/$defs/bytes\"}]}"),
    DT_KEY("qos", DT_KT_STR, struct dt_slurm_spec, qos, .example = "normal", .help = "sbatch --qos."),
    DT_KEY("constraint", DT_KT_STR, struct dt_slurm_spec, constraint, .example = "h100",
           .help = "sbatch --constraint: node features."),
    DT_KEY("exclusive", DT_KT_BOOL, struct dt_slurm_spec, exclusive, .def = "false", .help = "Whole nodes."),
    DT_KEY("requeue", DT_KT_BOOL, struct dt_slurm_spec, requeue, .def = "false",
           .help = "`--requeue`, and SIGUSR1 before the time limit: if every rank catches it they get it (the "
                   "trainer checkpoints and exits 75, and the job is requeued), else every rank is stopped and "
                   "the job is requeued."),
    DT_KEY("signal_lead", DT_KT_DURATION, struct dt_slurm_spec, signal_lead_s, .lo = 1, .hi = 65535,
           .flags = DT_KF_LO | DT_KF_HI, .def = "90s",
           .help =
               "How long before the time limit SIGUSR1 comes (`--signal=B:USR1@90`), in whole seconds; Slurm "
               "may send it up to a minute early."),
    DT_KEY("extra_sbatch", DT_KT_STRLIST, struct dt_slurm_spec, extra_sbatch,
           DT_COUNT(struct dt_slurm_spec, n_extra_sbatch),
           .hint = "each item is one sbatch option, like [--mail-type=END, --comment=x]", .unset = "none",
           .example = "[--mail-type=END]", .help = "Extra options, one `#SBATCH <item>` line each."),
    DT_KEY("tasks", DT_KT_ENUM, struct dt_slurm_spec, tasks, .names = slurm_tasks, .def = "per_node",
           .help =
               "`per_node`: one Slurm task per node, the agent, which forks the node's ranks. `per_rank`: "
               "`--ntasks-per-node=`nproc_per_node; the agent runs in the batch script on node 0 and starts "
               "every rank with one `srun` step, each task under `dtrain mpirank` reading SLURM_PROCID, "
               "SLURM_LOCALID, SLURM_STEP_NUM_TASKS and SLURM_NODEID."),
    DT_KEY("cpu_bind", DT_KT_STR, struct dt_slurm_spec, cpu_bind, .unset = "none", .example = "cores",
           .help =
               "`srun --cpu-bind=`value (cores, map_cpu:0,1, ...) for the step: the ranks' (per_rank) or the "
               "agents' (per_node)."),
    DT_KEY("gpu_bind", DT_KT_STR, struct dt_slurm_spec, gpu_bind, .unset = "none", .example = "closest",
           .help = "`srun --gpu-bind=`value (closest, map_gpu:0,1, ...), as cpu_bind."),
};
const struct dt_spec_section dt_jobspec_slurm_section = {.keys = slurm_keys,
                                                         .n_keys = DT_NKEYS(slurm_keys),
                                                         .size = sizeof(struct dt_slurm_spec),
                                                         .check = check_slurm};

/* Kubernetes CPU quantities: 4, 0.5 (cores) or "500m" (millicores). */
static int set_cpu(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    struct dt_kubernetes_spec *s = obj;
    char q[96], buf[64];
    double x = -1;
    if (v->kind == DT_Y_SCALAR && v->len > 1 && v->len < sizeof buf && v->text[v->len - 1] == 'm') {
        snprintf(buf, sizeof buf, "%.*s", (int)v->len - 1, v->text);
        if (dt_spec_parse_num(buf, &x) == 0)
            x /= 1000.0;
        else
            x = -1;
    } else if (v->kind == DT_Y_SCALAR && dt_spec_parse_num(v->text, &x)) {
        x = -1;
    }
    if (x > 0 && x <= 100000 && x * 1000 >= 1) {
        s->cpu_millis = (int)(x * 1000 + 0.5);
        return 0;
    }
    return dt_spec_fail(ctx, v, k->name, "expected a CPU amount like 4, 0.5 or \"500m\" (> 0), got %s",
                        dt_spec_got(v, q, sizeof q));
}

static int print_cpu(const void *obj, char *buf, size_t size)
{
    const struct dt_kubernetes_spec *s = obj;
    if (s->cpu_millis <= 0)
        return 0;
    snprintf(buf, size, "\"%dm\"", s->cpu_millis);
    return 1;
}

static int check_toleration(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_k8s_toleration *t = obj;
    int exists = t->operator_name && strcmp(t->operator_name, "Exists") == 0;
    if (exists && t->value)
        return dt_spec_fail(ctx, dt_ymap_get(map, "value"), "value", "operator Exists takes no value");
    if (!exists && !t->key)
        return dt_spec_fail(ctx, map, NULL, "a toleration without a key needs operator: Exists");
    if (t->toleration_seconds >= 0 && !(t->effect && strcmp(t->effect, "NoExecute") == 0))
        return dt_spec_fail(ctx, dt_ymap_get(map, "toleration_seconds"), "toleration_seconds",
                            "only applies with effect: NoExecute");
    return 0;
}

static void toleration_init(void *obj)
{
    ((struct dt_k8s_toleration *)obj)->toleration_seconds = -1;
}

static const struct dt_spec_key toleration_keys[] = {
    DT_KEY("key", DT_KT_STR, struct dt_k8s_toleration, key, .example = "nvidia.com/gpu",
           .help = "Taint key."),
    DT_KEY("operator", DT_KT_STR, struct dt_k8s_toleration, operator_name, .names = operators,
           .unset = "`Equal`", .example = "Exists",
           .help = "`Exists` takes no value; a toleration without a key "
                   "needs `Exists`."),
    DT_KEY("value", DT_KT_STR, struct dt_k8s_toleration, value, .flags = DT_KF_EMPTY_OK,
           .example = "\"true\"", .doc = DT_DOC_REF_COMMENT, .help = "Taint value (not with `Exists`).",
           .schema = "{\"type\": null, \"$ref\": \"#/$defs/text\"}"),
    DT_KEY("effect", DT_KT_STR, struct dt_k8s_toleration, effect, .names = effects, .unset = "all effects",
           .example = "NoSchedule", .help = "Effect of the taint tolerated."),
    DT_KEY("toleration_seconds", DT_KT_I64, struct dt_k8s_toleration, toleration_seconds, .lo = 0, .hi = 1e12,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_NEG_UNSET, .example = "300", .doc = DT_DOC_REF_COMMENT,
           .help = "Seconds tolerated; only with `effect: NoExecute`."),
};
static const struct dt_spec_section toleration_section = {.keys = toleration_keys,
                                                          .n_keys = DT_NKEYS(toleration_keys),
                                                          .size = sizeof(struct dt_k8s_toleration),
                                                          .init = toleration_init,
                                                          .check = check_toleration,
                                                          .help = "A toleration."};

static int check_volume(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_k8s_volume *v = obj;
    char q[96];
    if (!dt_spec_dns_label(v->name))
        return dt_spec_fail(ctx, dt_ymap_get(map, "name"), "name", "expected a DNS-1123 label, got '%s'",
                            dt_yaml_quote(v->name, q, sizeof q));
    if (v->mount_path[0] != '/')
        return dt_spec_fail(ctx, dt_ymap_get(map, "mount_path"), "mount_path",
                            "expected an absolute path, got '%s'", dt_yaml_quote(v->mount_path, q, sizeof q));
    int sources = !!v->host_path + !!v->pvc + !!v->config_map + !!v->secret;
    if (sources != 1)
        return dt_spec_fail(ctx, map, NULL,
                            "a volume needs exactly one of host_path, pvc, config_map and secret "
                            "(got %d)",
                            sources);
    return 0;
}

static const struct dt_spec_key volume_keys[] = {
    DT_KEY("name", DT_KT_STR, struct dt_k8s_volume, name, .flags = DT_KF_REQUIRED, .example = "data",
           .help = "Volume name (DNS-1123 label).",
           .schema = "{\"pattern\": \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\", \"maxLength\": 63}"),
    DT_KEY("mount_path", DT_KT_STR, struct dt_k8s_volume, mount_path, .flags = DT_KF_REQUIRED,
           .example = "/data", .help = "Absolute path in the pod.", .schema = "{\"pattern\": \"^/\"}"),
    DT_KEY("host_path", DT_KT_STR, struct dt_k8s_volume, host_path, .example = "/srv/data",
           .doc = DT_DOC_REF_COMMENT, .help = "A host directory."),
    DT_KEY("pvc", DT_KT_STR, struct dt_k8s_volume, pvc, .example = "datasets",
           .help = "A PersistentVolumeClaim."),
    DT_KEY("config_map", DT_KT_STR, struct dt_k8s_volume, config_map, .example = "settings",
           .doc = DT_DOC_REF_COMMENT, .help = "A ConfigMap."),
    DT_KEY("secret", DT_KT_STR, struct dt_k8s_volume, secret, .example = "credentials",
           .doc = DT_DOC_REF_COMMENT, .help = "A Secret."),
    DT_KEY("read_only", DT_KT_BOOL, struct dt_k8s_volume, read_only, .def = "false",
           .help = "Mount read-only."),
};
static const struct dt_spec_section volume_section = {
    .keys = volume_keys,
    .n_keys = DT_NKEYS(volume_keys),
    .size = sizeof(struct dt_k8s_volume),
    .check = check_volume,
    .help = "A volume mounted in each pod; exactly one source of host_path, pvc, config_map and secret.",
    .schema = "{\"oneOf\": [{\"required\": [\"host_path\"]}, {\"required\": [\"pvc\"]},"
              " {\"required\": [\"config_map\"]}, {\"required\": [\"secret\"]}]}"};

/* ---- Kubernetes object names, label and annotation keys ---- */

/* A DNS-1123 subdomain: dot-separated labels, at most 253 characters. */
static int dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *part = strtok_r(buf, ".", &save); part; part = strtok_r(NULL, ".", &save))
        if (!dt_spec_dns_label(part))
            return 0;
    return s[0] != '.' && s[n - 1] != '.' && !strstr(s, "..");
}

/* Kubernetes' "name" part of a qualified name, and a label value (which may
 * also be empty): at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends. */
static int k8s_name_part(const char *s, size_t n, int empty_ok)
{
    if (n == 0)
        return empty_ok;
    if (n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
            return 0;
    return 1;
}

/* A label or annotation key: [prefix/]name, the prefix a DNS subdomain. */
static int qualified_name(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash)
        return k8s_name_part(s, strlen(s), 0);
    char prefix[256];
    if ((size_t)(slash - s) >= sizeof prefix)
        return 0;
    snprintf(prefix, sizeof prefix, "%.*s", (int)(slash - s), s);
    return dns_subdomain(prefix) && k8s_name_part(slash + 1, strlen(slash + 1), 0);
}

/* Labels dtrain sets itself (the Service selects the pods by them; the run
 * id's dtrain/run-id; a gang's pod-group label) or the Job controller does
 * (the UID label names the run). */
static int reserved_label(const char *key)
{
    static const char *const own[] = {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                      "app.kubernetes.io/managed-by", "job-name", "controller-uid",
                                      "scheduling.x-k8s.io/pod-group", NULL};
    for (int i = 0; own[i]; i++)
        if (strcmp(key, own[i]) == 0)
            return 1;
    return strncmp(key, "batch.kubernetes.io/", 20) == 0 || strncmp(key, "dtrain/", 7) == 0;
}

static int check_meta_map(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const char *key,
                          const struct dt_env_entry *e, int n, int labels)
{
    const struct dt_ynode *node = dt_ymap_get(map, key);
    char q[96], v[96];
    for (int i = 0; i < n; i++) {
        if (!qualified_name(e[i].name))
            return dt_spec_fail(ctx, node, key,
                                "'%s' is not a Kubernetes key ([prefix/]name: the name at most 63 of "
                                "letters, digits, '-', '_' and '.', starting and ending with a letter or "
                                "digit; the prefix a DNS subdomain)",
                                dt_yaml_quote(e[i].name, q, sizeof q));
        if (labels && reserved_label(e[i].name))
            return dt_spec_fail(ctx, node, key, "'%s': dtrain or the Job controller sets this label itself",
                                dt_yaml_quote(e[i].name, q, sizeof q));
        if (labels && !k8s_name_part(e[i].value, strlen(e[i].value), 1))
            return dt_spec_fail(ctx, node, key,
                                "%s: '%s' is not a label value (at most 63 of letters, digits, '-', '_' "
                                "and '.', starting and ending with a letter or digit, or empty)",
                                dt_yaml_quote(e[i].name, q, sizeof q), dt_yaml_quote(e[i].value, v, sizeof v));
    }
    return 0;
}

static int check_log_volume(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_k8s_volume *v = obj;
    if (!!v->pvc + !!v->host_path != 1)
        return dt_spec_fail(ctx, map, NULL, "needs exactly one of pvc and host_path");
    return 0;
}

static const struct dt_spec_key log_volume_keys[] = {
    DT_KEY("pvc", DT_KT_STR, struct dt_k8s_volume, pvc, .example = "runs",
           .help = "A PersistentVolumeClaim (ReadWriteMany for several nodes)."),
    DT_KEY("host_path", DT_KT_STR, struct dt_k8s_volume, host_path, .example = "/var/log/dtrain-runs",
           .doc = DT_DOC_REF_COMMENT, .help = "A path on the node."),
};
static const struct dt_spec_section log_volume_section = {.keys = log_volume_keys,
                                                          .n_keys = DT_NKEYS(log_volume_keys),
                                                          .size = sizeof(struct dt_k8s_volume),
                                                          .check = check_log_volume,
                                                          .schema =
                                                              "{\"minProperties\": 1, \"maxProperties\": 1}"};

/* gang: kueue needs the LocalQueue (queue, or its label in labels, not
 * both); queue means something only to kueue and volcano. */
static int check_gang(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_kubernetes_spec *k)
{
    char q[96];
    bool labelled = false;
    for (int i = 0; i < k->n_labels; i++)
        labelled = labelled || strcmp(k->labels[i].name, "kueue.x-k8s.io/queue-name") == 0;
    if (k->gang == DT_K8S_GANG_KUEUE && !k->queue && !labelled)
        return dt_spec_fail(ctx, dt_ymap_get(map, "gang"), "gang",
                            "kueue admits a Job to a LocalQueue: name it in kubernetes.queue");
    if (k->queue && labelled)
        return dt_spec_fail(ctx, dt_ymap_get(map, "queue"), "queue",
                            "the queue is named twice (queue and labels.kueue.x-k8s.io/queue-name): keep queue");
    if (k->queue && k->gang != DT_K8S_GANG_KUEUE && k->gang != DT_K8S_GANG_VOLCANO)
        return dt_spec_fail(ctx, dt_ymap_get(map, "queue"), "queue",
                            "names a Kueue LocalQueue (gang: kueue) or a Volcano queue (gang: volcano), but "
                            "gang is %s",
                            gangs[k->gang]);
    if (k->queue && !k8s_name_part(k->queue, strlen(k->queue), 0))
        return dt_spec_fail(ctx, dt_ymap_get(map, "queue"), "queue",
                            "'%s' is not a queue name (at most 63 of letters, digits, '-', '_' and '.', starting "
                            "and ending with a letter or digit)",
                            dt_yaml_quote(k->queue, q, sizeof q));
    return 0;
}

static int check_kubernetes(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    struct dt_kubernetes_spec *k = obj;
    char q[96];
    for (int i = 0; i < k->n_image_pull_secrets; i++)
        if (!dns_subdomain(k->image_pull_secrets[i]))
            return dt_spec_fail(ctx, dt_ymap_get(map, "image_pull_secrets"), "image_pull_secrets",
                                "'%s' is not a Secret name (a DNS-1123 subdomain: lower-case letters, "
                                "digits, '-' and '.')",
                                dt_yaml_quote(k->image_pull_secrets[i], q, sizeof q));
    if (check_meta_map(ctx, map, "labels", k->labels, k->n_labels, 1) ||
        check_meta_map(ctx, map, "annotations", k->annotations, k->n_annotations, 0))
        return DT_EINVAL;
    if (k->namespace_name && !dt_spec_dns_label(k->namespace_name))
        return dt_spec_fail(ctx, dt_ymap_get(map, "namespace"), "namespace",
                            "expected a DNS-1123 label, got '%s'",
                            dt_yaml_quote(k->namespace_name, q, sizeof q));
    if (k->ttl_after_finished_s > 0 && k->ttl_after_finished_s < 60)
        return dt_spec_fail(ctx, dt_ymap_get(map, "ttl_after_finished"), "ttl_after_finished",
                            "expected 0s (the finished Job stays) or at least 60s: `dtrain launch` reads the "
                            "finished Job's pods before Kubernetes deletes them");
    return check_gang(ctx, map, k);
}

/* Fields of the Job's spec that dtrain owns (job_spec may not set them). */
#define JOB_SPEC_OWN                                                                                         \
    "[\"template\", \"completions\", \"parallelism\", \"completionMode\", \"backoffLimit\","                 \
    " \"backoffLimitPerIndex\", \"maxFailedIndexes\", \"podFailurePolicy\", \"podReplacementPolicy\","       \
    " \"successPolicy\", \"selector\", \"manualSelector\"]"

static const struct dt_spec_key kubernetes_keys[] = {
    DT_KEY("image", DT_KT_STR, struct dt_kubernetes_spec, image, .flags = DT_KF_REQUIRED,
           .example = "ghcr.io/example/dtrain:latest", .help = "Container image holding dtrain."),
    DT_KEY("image_pull_policy", DT_KT_STR, struct dt_kubernetes_spec, image_pull_policy,
           .names = pull_policies, .unset = "Kubernetes'", .example = "IfNotPresent", .help = "Pull policy."),
    DT_KEY("namespace", DT_KT_STR, struct dt_kubernetes_spec, namespace_name, .def = "default",
           .form = "DNS-1123 label", .help = "Namespace.",
           .schema = "{\"pattern\": \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\", \"maxLength\": 63}"),
    DT_KEY("gpus_per_node", DT_KT_INT, struct dt_kubernetes_spec, gpus_per_node, .lo = 0, .hi = 64,
           .flags = DT_KF_LO | DT_KF_HI, .def = "0", .help = "`nvidia.com/gpu` per pod."),
    DT_KEY("cpu", DT_KT_CUSTOM, struct dt_kubernetes_spec, cpu_millis, .set = set_cpu, .print = print_cpu,
           .unset = "unset", .example = "\"32\"", .form = "number of cores or `\"500m\"`",
           .help = "CPU per pod (request and limit).",
           .schema = "{\"anyOf\": [{\"type\": \"number\", \"exclusiveMinimum\": 0},"
                     " {\"type\": \"string\", \"pattern\": \"^[0-9]+(\\\\.[0-9]+)?m?$\"}]}"),
    DT_KEY("memory", DT_KT_BYTES, struct dt_kubernetes_spec, memory_bytes, .lo = 1, .hi = MAX_BYTES,
           .flags = DT_KF_LO | DT_KF_HI, .unset = "unset", .example = "256Gi", .help = "Memory per pod."),
    DT_KEY("service_account", DT_KT_STR, struct dt_kubernetes_spec, service_account, .unset = "unset",
           .example = "dtrain", .help = "The pods' service account."),
    DT_KEY("node_selector", DT_KT_STRMAP, struct dt_kubernetes_spec, node_selector,
           DT_COUNT(struct dt_kubernetes_spec, n_node_selector), .unset = "none",
           .example = "{nvidia.com/gpu.product: NVIDIA-H200}", .form = "mapping label → value",
           .help = "Node labels the pods need."),
    DT_KEY("tolerations", DT_KT_SECLIST, struct dt_kubernetes_spec, tolerations,
           DT_COUNT(struct dt_kubernetes_spec, n_tolerations), .sub = &toleration_section, .unset = "none",
           .help = "Taints the pods tolerate."),
    DT_KEY("priority_class", DT_KT_STR, struct dt_kubernetes_spec, priority_class, .unset = "unset",
           .example = "training", .help = "The pods' PriorityClass."),
    DT_KEY("shm_size", DT_KT_BYTES, struct dt_kubernetes_spec, shm_size_bytes, .lo = 1, .hi = MAX_BYTES,
           .flags = DT_KF_LO | DT_KF_HI, .unset = "no limit", .example = "16Gi",
           .help = "Size limit of the in-memory `/dev/shm`."),
    DT_KEY("env", DT_KT_STRMAP, struct dt_kubernetes_spec, env, DT_COUNT(struct dt_kubernetes_spec, n_env),
           .flags = DT_KF_ENVNAME, .unset = "none", .example = "{NCCL_DEBUG: WARN}",
           .help = "Extra environment of the agent pods."),
    DT_KEY("volumes", DT_KT_SECLIST, struct dt_kubernetes_spec, volumes,
           DT_COUNT(struct dt_kubernetes_spec, n_volumes), .sub = &volume_section, .unset = "none",
           .help = "Volumes mounted in each pod."),
    DT_KEY("image_pull_secrets", DT_KT_STRLIST, struct dt_kubernetes_spec, image_pull_secrets,
           DT_COUNT(struct dt_kubernetes_spec, n_image_pull_secrets), .hint = "Secret names, like [regcred]",
           .unset = "none", .example = "[regcred]", .form = "list of Secret names",
           .help = "The pods' `imagePullSecrets` (a private registry's credentials).",
           .schema = "{\"items\": {\"type\": \"string\", \"pattern\": \"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$\","
                     " \"maxLength\": 253}}"),
    DT_KEY("labels", DT_KT_STRMAP, struct dt_kubernetes_spec, labels,
           DT_COUNT(struct dt_kubernetes_spec, n_labels), .unset = "none",
           .example = "{team: ml}", .form = "mapping key → value",
           .help =
               "Labels of every object and the pods (Kueue's queue: `gang: kueue` and `queue`); dtrain's own "
               "(`app.kubernetes.io/*`, `dtrain/*`) and the Job controller's are refused."),
    DT_KEY("annotations", DT_KT_STRMAP, struct dt_kubernetes_spec, annotations,
           DT_COUNT(struct dt_kubernetes_spec, n_annotations), .unset = "none",
           .example = "{example.com/team: ml}", .form = "mapping key → value",
           .help = "Annotations of the Job and the pods."),
    DT_KEY("pod_template", DT_KT_YAML, struct dt_kubernetes_spec, pod_template, .unset = "none",
           .example = "{spec: {hostIPC: true}}", .form = "mapping `{metadata, spec}`",
           .help =
               "A pod template merged into the rendered one, for any pod field without a key (affinity, "
               "securityContext, RDMA resources, sidecars): mappings merge, `containers`, `initContainers`, "
               "`volumes` and `env` by `name` and `volumeMounts` by `mountPath`, other lists and scalars "
               "replace; dtrain's restartPolicy, subdomain, agent command and volumes are refused "
               "(docs/kubernetes.md).",
           .schema = "{\"additionalProperties\": {\"type\": \"object\"},"
                     " \"propertyNames\": {\"enum\": [\"metadata\", \"spec\"]}}"),
    DT_KEY("job_spec", DT_KT_YAML, struct dt_kubernetes_spec, job_spec, .unset = "none",
           .example = "{ttlSecondsAfterFinished: 3600}",
           .help = "Job spec fields merged into the rendered Job's spec by the same rules "
                   "(`ttlSecondsAfterFinished`, `activeDeadlineSeconds`, `suspend`); the template, counts, "
                   "`backoffLimit` and failure policy are dtrain's and refused.",
           .schema = "{\"propertyNames\": {\"not\": {\"enum\": " JOB_SPEC_OWN "}}}"),
    DT_KEY("ttl_after_finished", DT_KT_DURATION, struct dt_kubernetes_spec, ttl_after_finished_s, .lo = 0,
           .hi = 315360000, .flags = DT_KF_LO | DT_KF_HI, .def = "24h",
           .help = "How long a finished Job stays before Kubernetes deletes it with its pods "
                   "(`ttlSecondsAfterFinished`), and with it the Service, ConfigMap and Secret a launch made "
                   "(owned by the Job); `0s`: it stays until deleted, else at least 60s. `job_spec`'s "
                   "`ttlSecondsAfterFinished` wins."),
    DT_KEY("gang", DT_KT_ENUM, struct dt_kubernetes_spec, gang, .names = gangs, .def = "none",
           .help = "Start the pods all at once or not at all: `kueue` (the Job suspended, labelled with "
                   "`queue`, admitted whole by Kueue), `volcano` (a Volcano PodGroup, `schedulerName: volcano`), "
                   "`coscheduling` (a scheduler-plugins PodGroup; the pods' `schedulerName` is the "
                   "cluster's, `pod_template` sets another). The group's minimum is `nodes` (an elastic "
                   "job's MIN). See docs/kubernetes.md."),
    DT_KEY("queue", DT_KT_STR, struct dt_kubernetes_spec, queue, .unset = "none", .example = "team-a",
           .doc = DT_DOC_REF_COMMENT,
           .help = "`gang: kueue`: the LocalQueue (label `kueue.x-k8s.io/queue-name`, required); "
                   "`gang: volcano`: the Volcano queue of the PodGroup."),
    DT_KEY("log_volume", DT_KT_SECTION_PTR, struct dt_kubernetes_spec, log_volume, .sub = &log_volume_section,
           .unset = "none (in the container)",
           .help =
               "Run directories on a volume mounted at `/var/log/dtrain` (the agent's `--log-dir`), so they "
               "outlive the pods: exactly one of `pvc` and `host_path`."),
};
const struct dt_spec_section dt_jobspec_kubernetes_section = {.keys = kubernetes_keys,
                                                              .n_keys = DT_NKEYS(kubernetes_keys),
                                                              .size = sizeof(struct dt_kubernetes_spec),
                                                              .check = check_kubernetes};

static int check_mpirun(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    struct dt_mpirun_spec *m = obj;
    if (m->hosts && m->hostfile)
        return dt_spec_fail(ctx, dt_ymap_get(map, "hostfile"), NULL,
                            "set either hosts or hostfile, not both");
    return 0;
}

static const struct dt_spec_key mpirun_keys[] = {
    DT_KEY("program", DT_KT_STR, struct dt_mpirun_spec, program, .def = "mpirun",
           .help = "The mpirun to run."),
    DT_KEY("hosts", DT_KT_STRLIST, struct dt_mpirun_spec, hosts, DT_COUNT(struct dt_mpirun_spec, n_hosts),
           .lo = 1, .flags = DT_KF_LO, .hint = "like [node1, node2:4] (host or host:slots)", .unset = "none",
           .example = "[node1, \"node2:1\"]", .form = "list of `host` or `host:slots`",
           .help = "Hosts; exclusive with `hostfile`."),
    DT_KEY("hostfile", DT_KT_STR, struct dt_mpirun_spec, hostfile, .unset = "none",
           .example = "/path/to/hostfile", .doc = DT_DOC_REF_COMMENT, .help = "An Open MPI hostfile."),
    DT_KEY("interfaces", DT_KT_STRLIST, struct dt_mpirun_spec, interfaces,
           DT_COUNT(struct dt_mpirun_spec, n_interfaces), .lo = 1, .flags = DT_KF_LO, .hint = "like [eth0]",
           .unset = "none", .example = "[eth0]", .help = "Network interfaces Open MPI may use."),
    DT_KEY("allow_run_as_root", DT_KT_BOOL, struct dt_mpirun_spec, allow_run_as_root, .def = "false",
           .help = "Passes `--allow-run-as-root`; only when asked."),
    DT_KEY("oversubscribe", DT_KT_BOOL, struct dt_mpirun_spec, oversubscribe, .def = "false",
           .help = "Passes `--oversubscribe`."),
    DT_KEY("extra_args", DT_KT_STRLIST, struct dt_mpirun_spec, extra_args,
           DT_COUNT(struct dt_mpirun_spec, n_extra_args), .hint = "like [--mca, btl, ^openib]",
           .unset = "none", .example = "[--mca, btl_tcp_if_exclude, lo]", .help = "Extra mpirun arguments."),
};
const struct dt_spec_section dt_jobspec_mpirun_section = {
    .keys = mpirun_keys,
    .n_keys = DT_NKEYS(mpirun_keys),
    .size = sizeof(struct dt_mpirun_spec),
    .check = check_mpirun,
    .schema = "{\"not\": {\"required\": [\"hosts\", \"hostfile\"]}}"};
