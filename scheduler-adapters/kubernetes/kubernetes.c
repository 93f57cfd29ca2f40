/* kubernetes.c - the Kubernetes adapter ("kubernetes", alias "k8s"): table entry and discover.
 *
 * In a pod of the Indexed Job that render writes, an agent learns:
 *   node rank    JOB_COMPLETION_INDEX (set by the Job controller), 0..nodes-1;
 *                an elastic job's pods but pod 0 get -1: the rounds place them;
 *   nnodes       the spec's `nodes` (completions = parallelism = nodes, an
 *                elastic job's MAX);
 *   coordinator  <obj>-0.<obj>:<rendezvous.port or 29500>: pod 0 under the
 *                headless Service of the same name;
 *   run id       the one `dtrain launch` chose (DTRAIN_K8S_RUN_ID), else the
 *                Job's UID's (DTRAIN_JOB_UID, from the downward API): the
 *                same in every pod and new for every Job object;
 *   names        the objects' (DTRAIN_K8S_NAME): the spec's name when
 *                rendered, <name>-<run id> when launched.
 * Cluster DNS knows a pod's name only once the pod has an address, and pods
 * start in any order, so discover waits until the coordinator's name
 * resolves (through comm/resolve.h, so DTRAIN_HOSTS_FILE can stand in for
 * DNS), up to rendezvous.timeout, and then says what is probably missing.
 *
 * Not for writing manifests (kubernetes_render.c) or applying them
 * (kubernetes_submit.c).
 */
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/resolve.h"
#include "base/clock.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Answers that may change once pod 0 is up: retried.  Anything else (a bad
 * DTRAIN_HOSTS_FILE, a resolver misconfiguration) is reported at once. */
static int transient(int g)
{
    return g == EAI_NONAME || g == EAI_AGAIN || g == EAI_FAIL || g == EAI_NODATA;
}

static int wait_resolvable(const struct dt_job *job, const char *host)
{
    double timeout = job->rendezvous.timeout_s, deadline = dt_clock_s() + timeout, pause = 0.05;
    for (int tries = 0;; tries++) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = dt_resolve(host, NULL, &hints, &res);
        if (g == 0) {
            freeaddrinfo(res);
            return 0;
        }
        if (!transient(g))
            return dt_error_set(DT_ECONN, "kubernetes: resolving the coordinator's name '%s': %s", host,
                                dt_resolve_strerror(g));
        if (tries == 0)
            dt_log_info("kubernetes: waiting for '%s' to resolve (pod 0 may still be starting; up to %gs)",
                        host, timeout);
        double left = deadline - dt_clock_s();
        if (left <= 0)
            return dt_error_set(DT_ETIMEDOUT,
                                "kubernetes: the coordinator's name '%s' did not resolve within %gs "
                                "(last answer: %s): is pod 0 of Job '%s' running, and does the headless "
                                "Service '%s' exist in namespace '%s'? (rendezvous.timeout sets the wait)",
                                host, timeout, gai_strerror(g), job->name, job->name,
                                job->kubernetes ? job->kubernetes->namespace_name : "default");
        struct timespec ts = {0, (long)((pause < left ? pause : left) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 1.0 ? 1.0 : pause * 2;
    }
}

static int parse_index(const struct dt_job *job, const char *s, int *rank)
{
    char *end = NULL;
    long v = s && *s ? strtol(s, &end, 10) : -1;
    if (!s || !*s)
        return dt_error_set(DT_EINVAL, "kubernetes: JOB_COMPLETION_INDEX is not set: with scheduler: "
                                       "kubernetes, `dtrain agent` runs in a pod of the Indexed Job that "
                                       "`dtrain render kubernetes` writes (elsewhere, give --node-rank, "
                                       "--nnodes and --coordinator)");
    if (*end || v < 0 || v >= job->nodes)
        return dt_error_set(DT_EINVAL, "kubernetes: JOB_COMPLETION_INDEX='%.32s' is not a node rank of "
                                       "this job (0..%d, as nodes is %d)", s, job->nodes - 1, job->nodes);
    *rank = (int)v;
    return 0;
}

/* The run id: the Job's UID without dashes, first 12 hex digits (48 bits:
 * distinct across any realistic number of runs of one job name). */
static int run_id_from_uid(const char *uid, char *out, size_t size)
{
    if (!uid || !*uid)
        return dt_error_set(DT_EINVAL, "kubernetes: %s is not set or empty: the manifest passes the "
                                       "Job's UID from the pod label " DT_K8S_UID_LABEL " (Kubernetes 1.27 "
                                       "or later sets it), which names this run",
                            DT_K8S_UID_ENV);
    size_t n = 0;
    for (const char *p = uid; *p && n < 12 && n + 1 < size; p++) {
        if (*p == '-')
            continue;
        if (!strchr("0123456789abcdef", *p))
            return dt_error_set(DT_EINVAL, "kubernetes: %s='%.40s' is not a Kubernetes UID (hex digits "
                                           "and dashes)", DT_K8S_UID_ENV, uid);
        out[n++] = *p;
    }
    out[n] = 0;
    return 0;
}

/* `s` made only of `chars`, 1 to max characters. */
static int only(const char *s, const char *chars, size_t max)
{
    size_t n = strlen(s);
    return n > 0 && n <= max && s[strspn(s, chars)] == 0;
}

/* The objects' name (DTRAIN_K8S_NAME; the spec's name in a manifest older
 * than the variable) and the run id a launch chose (DTRAIN_K8S_RUN_ID), else
 * the one of the Job's UID. */
static int names_from_env(const struct dt_job *job, char *const *env, char *name, size_t size,
                          struct dt_adapter_node *out)
{
    const char *obj = dt_adapter_getenv(env, DT_K8S_NAME_ENV);
    if (obj && !only(obj, "abcdefghijklmnopqrstuvwxyz0123456789-", 63))
        return dt_error_set(DT_EINVAL, "kubernetes: %s='%.70s' is not a Kubernetes object name (a DNS-1123 "
                                       "label): the manifest sets it to the Job's name", DT_K8S_NAME_ENV, obj);
    snprintf(name, size, "%s", obj ? obj : job->name);
    const char *rid = dt_adapter_getenv(env, DT_K8S_RUN_ID_ENV);
    if (!rid)
        return run_id_from_uid(dt_adapter_getenv(env, DT_K8S_UID_ENV), out->run_id, sizeof out->run_id);
    if (!only(rid, "0123456789abcdef", DT_K8S_RUN_ID_LEN))
        return dt_error_set(DT_EINVAL, "kubernetes: %s='%.40s' is not a run id (at most %d hex digits, as "
                                       "`dtrain launch` writes it)", DT_K8S_RUN_ID_ENV, rid, DT_K8S_RUN_ID_LEN);
    snprintf(out->run_id, sizeof out->run_id, "%s", rid);
    return 0;
}

static int k8s_discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    char name[64];
    memset(out, 0, sizeof *out);
    int rc = parse_index(job, dt_adapter_getenv(env, "JOB_COMPLETION_INDEX"), &out->node_rank);
    if (rc == 0)
        rc = names_from_env(job, env, name, sizeof name, out);
    if (rc)
        return rc;
    struct dt_job named = *job; /* shallow: the objects' name for the coordinator's and the messages */
    named.name = name;
    out->nnodes = job->nodes;
    if (dt_job_elastic(job) && out->node_rank != 0)
        out->node_rank = -1; /* an elastic job's rounds place every pod but pod 0 (docs/elastic.md) */
    out->coord_port = dt_k8s_port(job);
    dt_k8s_coord_host(&named, out->coord_host, sizeof out->coord_host);
    snprintf(out->job_id, sizeof out->job_id, "%s", name);
    return wait_resolvable(&named, out->coord_host);
}

const struct dt_adapter dt_adapter_kubernetes = {
    .name = "kubernetes",
    .scheduler = DT_SCHED_KUBERNETES,
    .render = dt_k8s_render,
    .check = dt_k8s_check,
    .plan = dt_k8s_plan,
    .dry_run = dt_k8s_dry_run,
    .discover = k8s_discover,
    .status = dt_k8s_status,
    .cancel = dt_k8s_cancel,
    .resume_check = dt_k8s_resume_check,
};
