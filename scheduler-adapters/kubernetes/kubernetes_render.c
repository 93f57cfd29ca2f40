/* kubernetes_render.c - `dtrain render kubernetes job.yaml`: the manifests a user would apply.
 *
 * The documents, in the order kubectl should create them:
 *   ConfigMap <name>-spec   the job spec, mounted at /etc/dtrain/job.yaml
 *   Secret    <name>-token  the job token, mounted at /etc/dtrain/token
 *                           (only with rendezvous.auth: token)
 *   Service   <name>        headless; publishNotReadyAddresses, so that pod
 *                           <name>-<i> resolves as <name>-<i>.<name> as soon
 *                           as it has an address, before any readiness
 *   PodGroup  <name>        kubernetes.gang: volcano or coscheduling only
 *   Job       <name>        Indexed, one agent per pod (kubernetes_pod.c)
 * The token is made fresh for every render: each rendered manifest is a new
 * job whose clients must prove they belong to it.  The objects are named
 * after the job when rendered (a stable name: applying the manifest again
 * is the same job, and kubectl says so), and "<name>-<run id>" when launched
 * (dt_k8s_render_with), since a Job's template is immutable and a second
 * launch must not meet the first one's Job.  A launch applies the Job first
 * (DT_K8S_PART_JOB) and the rest after it with an ownerReference to its uid,
 * so Kubernetes deletes them with the Job (ttlSecondsAfterFinished, from
 * kubernetes.ttl_after_finished, included).  Labels: app.kubernetes.io/name
 * is the job's name, the same for every launch (what an affinity selects
 * on), instance the objects' name (what the Service selects on), and
 * dtrain/run-id the run's.
 *
 * The Job: completions = parallelism = nodes (an elastic job's MAX) with
 * completionMode Indexed: pod i gets JOB_COMPLETION_INDEX=i and hostname
 * <name>-i, and a failed pod is replaced with the same index
 * (podReplacementPolicy Failed: the replacement starts only once the old
 * pod is gone, so two agents never claim one node rank).  podFailurePolicy
 * carries restart_policy over to pods (the agent exits with the job's
 * status: the failing rank's code, or 128+signal):
 *   - DisruptionTarget (preemption, eviction, node drain): Ignore, the pod is
 *     replaced without counting;
 *   - without restarts: codes restart_policy marks `fail` are FailJob, and
 *     every other failure fails the Job too (backoffLimit 0);
 *   - with restarts (or elastic): a lost agent's pod (137, SIGKILL) is
 *     counted against its index (backoffLimitPerIndex max_restarts) and
 *     replaced, its new agent joining the running job's next round; every
 *     other non-zero status is the job's own end, after the agents spent
 *     their restarts: FailJob, so the pods are not started over and the
 *     budgets do not multiply into (max_restarts + 1)^2 runs.
 * When `otherwise: fail`, the codes marked `retry` are the exceptions, so one
 * FailJob rule with NotIn says it (NotIn only matches non-zero codes; [0]
 * stands in for "no exceptions", since In/NotIn need at least one value).
 * An elastic job may lose MAX - MIN pods for good (maxFailedIndexes) and
 * succeeds with pod 0, the coordinator's (successPolicy).
 *
 * YAML scalars that read back as what was meant.  The trap is YAML's
 * implicit typing: `yes`, `on`, `y`, `True` become booleans under YAML 1.1
 * readers (PyYAML, older Go yaml), `0123` an octal or decimal number, `1e3` a
 * float, `12:30` a sexagesimal integer, `~` null, and `a: b` or `- x` change
 * structure.  Rather than enumerating YAML's grammar, a string is written
 * plain only when it starts with a letter or '/' and holds only letters,
 * digits and ". _ / -", and is not one of the boolean/null words; everything
 * else is double-quoted, which every reader takes as a string, with
 * base/yaml_escape's escapes.
 *
 * Not for the pod template (kubernetes_pod.c), for applying anything
 * (kubernetes_submit.c), or for reading YAML (spec/jobspec_yaml.c).
 */
#include "scheduler-adapters/kubernetes/kubernetes.h"
#include "base/error.h"
#include "base/json.h"
#include "base/yaml_escape.h"
#include "spec/jobspec_yaml.h"
#include "spec/placement.h"
#include "spec/token.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* --- YAML scalars -------------------------------------------------------- */

static const char *const typed_words[] = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", NULL};

static int plain_ok(const char *s)
{
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '/'))
        return 0;
    if (s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-")])
        return 0;
    for (int i = 0; typed_words[i]; i++)
        if (strcasecmp(s, typed_words[i]) == 0)
            return 0;
    return 1;
}

/* A loaded job's strings came through libyaml, which decodes only to UTF-8,
 * so the writer's refusal of anything else cannot happen here. */
void dt_k8s_str(FILE *out, const char *s)
{
    if (plain_ok(s))
        fputs(s, out);
    else
        (void)dt_yaml_put_quoted(out, s, strlen(s), DT_YAML_SHORT_WS);
}

void dt_k8s_indent(FILE *out, int ind)
{
    fprintf(out, "%*s", ind, "");
}

int dt_k8s_block(FILE *out, int ind, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    if (len == 0 || !dt_yaml_block_ok(text, len)) {
        int rc = dt_yaml_put_quoted(out, text, len, DT_YAML_SHORT_WS);
        if (rc == 0)
            fputc('\n', out);
        return rc;
    }
    size_t trailing = 0;
    while (trailing < len && s[len - 1 - trailing] == '\n')
        trailing++;
    /* Chomping: "-" drops the one newline a block would add, "" keeps one, "+" keeps all.
     * An explicit indentation indicator when the content itself starts with
     * a space or an empty line, which would otherwise set the indentation. */
    fputc('|', out);
    if (s[0] == ' ' || s[0] == '\n')
        fputc('2', out);
    fputs(trailing == 0 ? "-\n" : trailing == 1 ? "\n" : "+\n", out);
    size_t i = 0;
    while (i < len) {
        const unsigned char *nl = memchr(s + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - s) : len;
        if (end > i) {
            dt_k8s_indent(out, ind);
            fwrite(s + i, 1, end - i, out);
        }
        fputc('\n', out);
        i = end + 1;
    }
    return 0;
}

void dt_k8s_bytes(FILE *out, uint64_t bytes)
{
    static const char *const units[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    for (int u = 0; u < 6; u++) {
        uint64_t scale = 1ULL << (10 * (6 - u));
        if (bytes >= scale && bytes % scale == 0) {
            fprintf(out, "\"%llu%s\"", (unsigned long long)(bytes / scale), units[u]);
            return;
        }
    }
    fprintf(out, "\"%llu\"", (unsigned long long)bytes);
}

/* --- metadata, ConfigMap, Secret, Service -------------------------------- */

int dt_k8s_port(const struct dt_job *job)
{
    return job->rendezvous.port > 0 ? job->rendezvous.port : DT_K8S_DEFAULT_PORT;
}

void dt_k8s_coord_host(const struct dt_job *job, char *buf, size_t size)
{
    snprintf(buf, size, "%s-0.%s", job->name, job->name);
}

/* dtrain's labels of every object, at indentation `ind`: the app (the
 * spec's name, stable across launches: what examples/kubernetes/template.yaml's
 * affinity selects on), the instance (the objects' name, new for every
 * launch: what the Service, `kubectl logs -l` and `kubectl delete -l` select
 * on), and the run id when launched. */
static void own_labels(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, FILE *out)
{
    const char *pairs[][2] = {{"app.kubernetes.io/name", nm->app},
                              {"app.kubernetes.io/instance", job->name},
                              {"app.kubernetes.io/managed-by", "dtrain"},
                              {DT_K8S_RUN_LABEL, nm->run_id}};
    for (int i = 0; i < 4; i++) {
        if (!pairs[i][1])
            continue;
        dt_k8s_indent(out, ind);
        fprintf(out, "%s: ", pairs[i][0]);
        dt_k8s_str(out, pairs[i][1]);
        fputc('\n', out);
    }
}

/* One "key: value" line at `ind`. */
static void put_pair(FILE *out, int ind, const char *key, const char *value)
{
    dt_k8s_indent(out, ind);
    fprintf(out, "%s: ", key);
    dt_k8s_str(out, value);
    fputc('\n', out);
}

void dt_k8s_put_metadata_maps(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, unsigned parts,
                              FILE *out)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    dt_k8s_indent(out, ind);
    fputs("labels:\n", out);
    own_labels(job, nm, ind + 2, out);
    dt_k8s_put_map(out, ind + 2, NULL, k->labels, k->n_labels);
    if ((parts & DT_K8S_META_QUEUE) && k->gang == DT_K8S_GANG_KUEUE && k->queue)
        put_pair(out, ind + 2, "kueue.x-k8s.io/queue-name", k->queue);
    if ((parts & DT_K8S_META_POD) && k->gang == DT_K8S_GANG_COSCHEDULING)
        put_pair(out, ind + 2, "scheduling.x-k8s.io/pod-group", job->name);
    bool volcano = (parts & DT_K8S_META_POD) && k->gang == DT_K8S_GANG_VOLCANO;
    if (!(parts & DT_K8S_META_NOTES) || (k->n_annotations == 0 && !volcano))
        return;
    dt_k8s_indent(out, ind);
    fputs("annotations:\n", out);
    dt_k8s_put_map(out, ind + 2, NULL, k->annotations, k->n_annotations);
    if (volcano)
        put_pair(out, ind + 2, "scheduling.k8s.io/group-name", job->name);
}

/* One rendering: the spec, the job under the objects' name, and the choices. */
struct render {
    const struct dt_job *job;   /* as loaded (the ConfigMap's spec) */
    const struct dt_job *named; /* the same under the objects' name */
    const char *job_path;
    struct dt_k8s_names nm;
    const struct dt_k8s_render_opts *o;
};

/* "---", apiVersion, kind and metadata (name <objects' name><suffix>,
 * namespace, labels and what `parts` adds, the owner reference to the Job). */
static void put_meta(const struct render *r, const char *api, const char *kind, const char *suffix,
                     unsigned parts, FILE *out)
{
    const struct dt_job *job = r->named;
    fprintf(out, "---\napiVersion: %s\nkind: %s\nmetadata:\n  name: ", api, kind);
    char name[128];
    snprintf(name, sizeof name, "%s%s", job->name, suffix);
    dt_k8s_str(out, name);
    fputs("\n  namespace: ", out);
    dt_k8s_str(out, job->kubernetes->namespace_name);
    fputc('\n', out);
    dt_k8s_put_metadata_maps(job, &r->nm, 2, parts, out);
    if (r->o->owner_uid && strcmp(kind, "Job") != 0) {
        /* Deleted with the Job (by kubectl delete or its TTL), by the garbage collector. */
        fputs("  ownerReferences:\n    - apiVersion: batch/v1\n      kind: Job\n      name: ", out);
        dt_k8s_str(out, job->name);
        fputs("\n      uid: ", out);
        dt_k8s_str(out, r->o->owner_uid);
        fputc('\n', out);
    }
}

/* The spec file as the user wrote it (comments and all) when it says
 * scheduler: kubernetes and is the job as given.  Otherwise (rendering a
 * spec written for another scheduler, one with ${VAR} or --set values, or
 * one not read from a file) the loaded job with its defaults and scheduler:
 * kubernetes, so the agents in the pods discover as pods and read what was
 * rendered, never a file left behind. */
static int spec_text(const struct dt_job *job, const char *job_path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!job_path || job->scheduler != DT_SCHED_KUBERNETES || job->derived) {
        struct dt_job pod_job = *job; /* shallow: only printed */
        pod_job.scheduler = DT_SCHED_KUBERNETES;
        pod_job.rendezvous.port = dt_k8s_port(job);
        FILE *m = open_memstream(text, len);
        if (!m)
            return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
        dt_job_print(&pod_job, m);
        return fclose(m) == 0 ? 0 : dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    }
    /* The user's own spec file (a link is followed), checked regular first
     * so a FIFO named as the spec is refused, not waited on. */
    int rc = dt_json_read_file(job_path, DT_YAML_MAX_BYTES, text, len);
    return rc < 0 ? dt_error_prefix("render kubernetes") : 0;
}

static int put_config_map(const struct render *r, FILE *out)
{
    char *text;
    size_t len;
    int rc = spec_text(r->job, r->job_path, &text, &len);
    if (rc)
        return rc;
    put_meta(r, "v1", "ConfigMap", "-spec", 0, out);
    fputs("data:\n  job.yaml: ", out);
    rc = dt_k8s_block(out, 4, text, len);
    free(text);
    if (rc) /* the file changed since libyaml loaded it, which it does only from UTF-8 */
        return dt_error_prefix("render kubernetes: the ConfigMap's copy of %s", r->job_path);
    return 0;
}

static int put_secret(const struct render *r, FILE *out)
{
    char token[65];
    if (r->o->token)
        snprintf(token, sizeof token, "%s", r->o->token);
    else if (dt_token_make(token))
        return dt_error_prefix("render kubernetes: making the job token");
    put_meta(r, "v1", "Secret", "-token", 0, out);
    fputs("type: Opaque\nstringData:\n  token: ", out);
    dt_k8s_str(out, token);
    fputc('\n', out);
    memset(token, 0, sizeof token);
    return 0;
}

static void put_service(const struct render *r, FILE *out)
{
    const struct dt_job *job = r->named;
    put_meta(r, "v1", "Service", "", 0, out);
    fputs("spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n", out);
    put_pair(out, 4, "app.kubernetes.io/name", r->nm.app);
    put_pair(out, 4, "app.kubernetes.io/instance", job->name);
    fprintf(out, "  ports:\n    - name: rendezvous\n      port: %d\n      targetPort: %d\n", dt_k8s_port(job),
            dt_k8s_port(job));
}

/* gang: volcano or coscheduling: the PodGroup the pods name (label or
 * annotation, dt_k8s_put_metadata_maps), its minimum the nodes the job
 * starts with (an elastic job's MIN), so the scheduler binds none of them
 * until that many fit.  scheduleTimeoutSeconds (coscheduling): how long
 * the group may wait to be placed, the join timeout. */
static void put_pod_group(const struct render *r, FILE *out)
{
    const struct dt_job *job = r->named;
    const struct dt_kubernetes_spec *k = job->kubernetes;
    if (k->gang == DT_K8S_GANG_VOLCANO)
        put_meta(r, "scheduling.volcano.sh/v1beta1", "PodGroup", "", 0, out);
    else if (k->gang == DT_K8S_GANG_COSCHEDULING)
        put_meta(r, "scheduling.x-k8s.io/v1alpha1", "PodGroup", "", 0, out);
    else
        return;
    fprintf(out, "spec:\n  minMember: %d\n", job->nodes_min);
    if (k->gang == DT_K8S_GANG_VOLCANO && k->queue)
        put_pair(out, 2, "queue", k->queue);
    if (k->gang == DT_K8S_GANG_COSCHEDULING)
        fprintf(out, "  scheduleTimeoutSeconds: %lld\n", (long long)ceil(job->rendezvous.timeout_s));
}

/* --- the Job and its failure policy -------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The codes whose action is `want`, ascending (Kubernetes requires order). */
static int codes_with(const struct dt_job *job, enum dt_exit_action want, int codes[256])
{
    int n = 0;
    for (int i = 0; i < job->restart_policy.n_on_exit; i++)
        if (job->restart_policy.on_exit[i].action == want)
            codes[n++] = job->restart_policy.on_exit[i].code;
    qsort(codes, (size_t)n, sizeof codes[0], cmp_int);
    return n;
}

static void put_exit_rule(const char *action, const char *op, const int *codes, int n, FILE *out)
{
    fprintf(out,
            "      - action: %s\n        onExitCodes:\n          containerName: %s\n"
            "          operator: %s\n          values: [",
            action, DT_K8S_CONTAINER, op);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%d", i ? ", " : "", codes[i]);
    fputs("]\n", out);
}

/* The exit status of an agent that was lost rather than ended with the job:
 * SIGKILL's, as the OOM killer or `kill -9` leave it. */
#define LOST_STATUS 137

/* Pods are replaced (backoffLimitPerIndex) when the job may lose a node:
 * restarts are left, or it is elastic. */
static bool replaces_pods(const struct dt_job *job)
{
    return job->max_restarts > 0 || dt_job_elastic(job);
}

static void put_failure_policy(const struct dt_job *job, FILE *out)
{
    int codes[256];
    fputs("  podFailurePolicy:\n    rules:\n"
          "      - action: Ignore\n        onPodConditions:\n"
          "          - type: DisruptionTarget\n            status: \"True\"\n",
          out);
    if (replaces_pods(job)) {
        /* A lost agent's pod is counted against its index's backoff and
         * replaced; any other status is the job's own end (every agent exits
         * with it once restarts are spent), which fails the Job at once. */
        int zero = 0, lost = LOST_STATUS;
        if (dt_job_exit_action(job, LOST_STATUS) != DT_EXIT_FAIL)
            put_exit_rule("Count", "In", &lost, 1, out);
        put_exit_rule("FailJob", "NotIn", &zero, 1, out);
        return;
    }
    if (job->restart_policy.otherwise == DT_EXIT_RETRY) {
        int n = codes_with(job, DT_EXIT_FAIL, codes);
        if (n > 0)
            put_exit_rule("FailJob", "In", codes, n, out);
    } else {
        int n = codes_with(job, DT_EXIT_RETRY, codes);
        if (n == 0)
            codes[n++] = 0;
        put_exit_rule("FailJob", "NotIn", codes, n, out);
    }
}

/* The counts and the failure policy.  Without restarts the Job fails on
 * the first pod failure (backoffLimit 0) as the agents' job does; with
 * them (or elastic), each node's pod may be replaced max_restarts times
 * (backoffLimitPerIndex; the replacement's agent joins the running job's
 * next round), a node out of replacements fails the Job (maxFailedIndexes
 * 0), or for an elastic job only once more than MAX - MIN are gone.  An
 * elastic job succeeds when node 0 (the coordinator's, whose agent exits
 * with the job's outcome) succeeds: pods that never started or were left
 * out of the last round do not hold it (successPolicy).  `own`: the Job's
 * own fields, which a JobSet holds itself (TTL, suspend). */
static void put_job_head(const struct dt_job *job, bool own, FILE *m)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    fprintf(m, "  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n", job->nodes, job->nodes);
    if (replaces_pods(job))
        fprintf(m, "  backoffLimitPerIndex: %d\n  maxFailedIndexes: %d\n", job->max_restarts,
                job->nodes - job->nodes_min);
    else
        fputs("  backoffLimit: 0\n", m);
    fputs("  podReplacementPolicy: Failed\n", m);
    if (dt_job_elastic(job))
        fputs("  successPolicy:\n    rules:\n      - succeededIndexes: \"0\"\n", m);
    if (own && k->ttl_after_finished_s > 0)
        fprintf(m, "  ttlSecondsAfterFinished: %lld\n", (long long)k->ttl_after_finished_s);
    if (own && k->gang == DT_K8S_GANG_KUEUE)
        fputs("  suspend: true\n", m); /* Kueue resumes it once the whole Job is admitted */
    put_failure_policy(job, m);
}

/* The Job's "spec:" (its pod template through dt_k8s_put_pod_spec, or with
 * pod_template merged in through dt_k8s_put_template), at column 0. */
static int put_job_spec(const struct dt_job *job, const struct dt_k8s_names *nm, bool own, FILE *out)
{
    char *head = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&head, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    put_job_head(job, own, m);
    int rc = fclose(m) ? dt_error_set(DT_ENOMEM, "render kubernetes: out of memory") : 0;
    fputs("spec:\n", out);
    if (rc == 0 && job->kubernetes->job_spec)
        rc = dt_k8s_put_job_spec(job, head, len, 2, out);
    else if (rc == 0)
        fwrite(head, 1, len, out);
    free(head);
    if (rc)
        return rc;
    fputs("  template:\n", out);
    if (job->kubernetes->pod_template)
        return dt_k8s_put_template(job, nm, 4, out);
    fputs("    metadata:\n", out);
    dt_k8s_put_metadata_maps(job, nm, 6, DT_K8S_META_NOTES | DT_K8S_META_POD, out);
    fputs("    spec:\n", out);
    dt_k8s_put_pod_spec(job, nm, 6, out);
    return 0;
}

static int put_job(const struct render *r, FILE *out)
{
    put_meta(r, "batch/v1", "Job", "", DT_K8S_META_NOTES | DT_K8S_META_QUEUE, out);
    return put_job_spec(r->named, &r->nm, true, out);
}

/* --- a JobSet around the Job --------------------------------------------- */

/* The JobSet's one replicated Job; its Job is "<jobset>-node-0", its pods
 * "<jobset>-node-0-<i>" under the JobSet's headless Service, which
 * network.subdomain names "<jobset>-node-0": so the pods' objects' name
 * (DTRAIN_K8S_NAME) is "<jobset>-node-0" and node 0 is <that>-0.<that>, as
 * for a plain Job, and discover is the same. */
#define DT_K8S_JOBSET_RJOB "node"

/* The JobSet restarts (recreates its Job) max_restarts times when the Job
 * fails for a reason of its own (a node's pod out of replacements, a
 * deadline), but not when the agents ended the job (a FailJob rule of the
 * Job's podFailurePolicy: the job's own failure, restarts spent): the
 * agents' restarts and the JobSet's do not multiply. */
static void put_jobset_policy(const struct dt_job *job, FILE *out)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    fprintf(out, "spec:\n  failurePolicy:\n    maxRestarts: %d\n", job->max_restarts);
    if (job->max_restarts > 0)
        fputs("    rules:\n      - name: the-job-ended\n        action: FailJobSet\n"
              "        onJobFailureReasons: [PodFailurePolicy]\n",
              out);
    if (k->ttl_after_finished_s > 0)
        fprintf(out, "  ttlSecondsAfterFinished: %lld\n", (long long)k->ttl_after_finished_s);
    if (k->gang == DT_K8S_GANG_KUEUE)
        fputs("  suspend: true\n", out); /* Kueue resumes it once admitted */
}

static int put_jobset(const struct render *r, FILE *out)
{
    const struct dt_job *job = r->job, *named = r->named;
    fputs("---\napiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: ", out);
    dt_k8s_str(out, job->name);
    fputs("\n  namespace: ", out);
    dt_k8s_str(out, job->kubernetes->namespace_name);
    fputc('\n', out);
    dt_k8s_put_metadata_maps(named, &r->nm, 2, DT_K8S_META_NOTES | DT_K8S_META_QUEUE, out);
    put_jobset_policy(job, out);
    fputs("  network:\n    enableDNSHostnames: true\n    publishNotReadyAddresses: true\n    subdomain: ", out);
    dt_k8s_str(out, named->name);
    fputs("\n  replicatedJobs:\n    - name: " DT_K8S_JOBSET_RJOB "\n      replicas: 1\n      template:\n"
          "        metadata:\n", out);
    dt_k8s_put_metadata_maps(named, &r->nm, 10, DT_K8S_META_NOTES, out);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    int rc = put_job_spec(named, &r->nm, false, m);
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    /* the Job's spec, 8 columns in: every line alike keeps block scalars whole */
    for (size_t i = 0; rc == 0 && i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        if (text[i] != '\n')
            dt_k8s_indent(out, 8);
        fwrite(text + i, 1, end - i, out);
        i = end;
    }
    free(text);
    return rc;
}

/* --- every document, in order -------------------------------------------- */

/* What Kubernetes or the pods would refuse later, refused now. */
static int check_job(const struct dt_job *job)
{
    if (!job->kubernetes)
        return dt_error_set(DT_EINVAL,
                            "%s: render kubernetes needs a kubernetes: section (at least "
                            "kubernetes: {image: ...})",
                            job->path);
    /* Pod hostnames are <name>-<index>, a DNS label of at most 63 characters. */
    char host[96];
    int n = snprintf(host, sizeof host, "%s-%d", job->name, job->nodes - 1);
    if (n > 63)
        return dt_error_set(DT_EINVAL,
                            "%s: name: pod hostnames would be '%s' (%d characters), over "
                            "Kubernetes' 63: shorten the job's name",
                            job->path, host, n);
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl); /* fails only on a host's GPUs */
    /* gpu, and the pods get no GPU to count */
    if (pl.source == DT_NPROC_PER_NODE)
        return dt_error_set(DT_EINVAL,
                            "%s: nproc_per_node: gpu starts one rank per GPU, but kubernetes.gpus_per_node is "
                            "not set, so the pods ask for no GPU: set kubernetes.gpus_per_node (8)",
                            job->path);
    return dt_k8s_check_pod(job);
}

void dt_k8s_object_name(const struct dt_job *job, const char *run_id, char *buf, size_t size)
{
    if (!run_id) {
        snprintf(buf, size, "%s", job->name);
        return;
    }
    char last[16];
    int room = 63 - snprintf(last, sizeof last, "-%d", job->nodes - 1) - 1 - (int)strlen(run_id);
    int keep = (int)strlen(job->name) < room ? (int)strlen(job->name) : room;
    while (keep > 0 && job->name[keep - 1] == '-')
        keep--;
    snprintf(buf, size, "%.*s-%s", keep, job->name, run_id);
}

int dt_k8s_render(const struct dt_job *job, const char *job_path, FILE *out)
{
    return dt_k8s_render_run(job, job_path, NULL, NULL, out);
}

/* Every object is written from r->named, the job under the objects' name;
 * the ConfigMap still holds the spec as written (its name is the run's).
 * Apply order: what the pods mount and resolve first, the Job last; a
 * launch applies the Job first instead, to own the others by its uid. */
static int put_all(const struct render *r, FILE *out)
{
    const struct dt_job *job = r->job;
    unsigned parts = r->o->parts ? r->o->parts : DT_K8S_PART_JOB | DT_K8S_PART_REST;
    char shown[256]; /* a path with a newline must not end the comment */
    fprintf(out, "# Rendered by `dtrain render kubernetes %s`; apply with `kubectl apply -f FILE`.\n",
            dt_yaml_quote(r->job_path ? r->job_path : job->path, shown, sizeof shown));
    if (!(parts & DT_K8S_PART_REST))
        return put_job(r, out);
    if (!r->o->owner_uid)
        fputs("# The objects have no owner references (the Job has no uid before it exists): `kubectl delete -f\n"
              "# FILE` removes them all; `dtrain launch` applies the Job first and makes it their owner.\n",
              out);
    int rc = put_config_map(r, out);
    if (rc == 0 && job->rendezvous.auth == DT_AUTH_TOKEN)
        rc = put_secret(r, out);
    if (rc == 0) {
        put_service(r, out);
        put_pod_group(r, out);
    }
    return rc || !(parts & DT_K8S_PART_JOB) ? rc : put_job(r, out);
}

int dt_k8s_render_jobset(const struct dt_job *job, const char *job_path, FILE *out)
{
    if (!job->kubernetes)
        return check_job(job);
    char name[128];
    snprintf(name, sizeof name, "%s-" DT_K8S_JOBSET_RJOB "-0", job->name);
    struct dt_job named = *job; /* shallow: only read */
    named.name = name;
    int rc = check_job(&named);
    if (rc)
        return rc;
    struct dt_k8s_render_opts o = {0};
    struct render r = {.job = job, .named = &named, .job_path = job_path, .nm = {.app = job->name}, .o = &o};
    char *text = NULL, shown[256];
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    fprintf(m, "# Rendered by `dtrain render jobset %s`; apply with `kubectl apply -f FILE` (JobSet controller\n"
               "# needed: jobset.x-k8s.io/v1alpha2).\n",
            dt_yaml_quote(job_path ? job_path : job->path, shown, sizeof shown));
    rc = put_config_map(&r, m);
    if (rc == 0 && job->rendezvous.auth == DT_AUTH_TOKEN)
        rc = put_secret(&r, m);
    if (rc == 0) {
        put_pod_group(&r, m);
        rc = put_jobset(&r, m);
    }
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    if (rc == 0 && (fwrite(text, 1, len, out) != len || ferror(out)))
        rc = dt_error_set(DT_EIO, "render jobset: writing the manifest failed");
    free(text);
    return rc;
}

int dt_k8s_check(const struct dt_job *job)
{
    char name[96];
    dt_k8s_object_name(job, NULL, name, sizeof name);
    struct dt_job named = *job; /* shallow: only read */
    named.name = name;
    return check_job(&named);
}

int dt_k8s_render_run(const struct dt_job *job, const char *job_path, const char *launch_id,
                      const char *run_id, FILE *out)
{
    struct dt_k8s_render_opts o = {.launch_id = launch_id, .run_id = run_id};
    return dt_k8s_render_with(job, job_path, &o, out);
}

/* Written whole or not at all: the documents are made in memory first (a
 * pod_template that cannot merge is found only at the Job, the last one). */
int dt_k8s_render_with(const struct dt_job *job, const char *job_path, const struct dt_k8s_render_opts *o,
                       FILE *out)
{
    char name[96];
    dt_k8s_object_name(job, o->launch_id, name, sizeof name);
    struct dt_job named = *job; /* shallow: only read */
    named.name = name;
    int rc = check_job(&named);
    if (rc)
        return rc;
    struct render r = {
        .job = job, .named = &named, .job_path = job_path, .nm = {.app = job->name, .run_id = o->run_id}, .o = o};
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    rc = put_all(&r, m);
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    if (rc == 0 && (fwrite(text, 1, len, out) != len || ferror(out)))
        rc = dt_error_set(DT_EIO, "render kubernetes: writing the manifest failed");
    free(text);
    return rc;
}
