/* kubernetes_render.c - `dtrain render kubernetes job.yaml`: the manifests a user would apply.
 *
 * Four documents, in the order kubectl should create them:
 *   ConfigMap <name>-spec   the job spec, mounted at /etc/dtrain/job.yaml
 *   Secret    <name>-token  the job token, mounted at /etc/dtrain/token
 *                           (only with rendezvous.auth: token)
 *   Service   <name>        headless; publishNotReadyAddresses, so that pod
 *                           <name>-<i> resolves as <name>-<i>.<name> as soon
 *                           as it has an address, before any readiness
 *   Job       <name>        Indexed, one agent per pod (kubernetes_pod.c)
 * The token is made fresh for every render: each rendered manifest is a new
 * job whose clients must prove they belong to it.  The objects are named
 * after the job when rendered (a stable name: applying the manifest again
 * is the same job, and kubectl says so), and "<name>-<run id>" when launched
 * (dt_k8s_render_run), since a Job's template is immutable and a second
 * launch must not meet the first one's Job.
 *
 * The Job: completions = parallelism = nodes with completionMode Indexed:
 * pod i gets JOB_COMPLETION_INDEX=i and hostname <name>-i, and a failed pod
 * is replaced with the same index (podReplacementPolicy Failed: the
 * replacement starts only once the old pod is gone, so two agents never
 * claim one node rank).  podFailurePolicy carries restart_policy over to
 * pods (the agent exits with the job's status: the failing rank's code, or
 * 128+signal):
 *   - DisruptionTarget (preemption, eviction, node drain): Ignore, the pod is
 *     replaced without counting against backoffLimit;
 *   - codes restart_policy marks `fail`: FailJob, at once;
 *   - every other failure fails the Job too: backoffLimit is 0.
 * One restart budget, the agents': max_restarts restarts of the whole rank
 * group inside the running pods (no rescheduling, no image pull, every node
 * rejoins at once), after which a pod exits with the job's status.  Counting
 * those pod failures against a backoffLimit of max_restarts as well would
 * multiply the budgets: (max_restarts + 1)^2 runs.  Disruptions stay free.
 * When `otherwise: fail`, the codes marked `retry` are the exceptions, so one
 * FailJob rule with NotIn says it (NotIn only matches non-zero codes; [0]
 * stands in for "no exceptions", since In/NotIn need at least one value).
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
#include "base/yaml_escape.h"
#include "spec/jobspec_yaml.h"
#include "spec/placement.h"
#include "spec/token.h"

#include <errno.h>
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

/* dtrain's labels of every object, at indentation `ind`: the Service selects the pods by them. */
static void own_labels(const struct dt_job *job, int ind, FILE *out)
{
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/name: dtrain\n", out);
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/instance: ", out);
    dt_k8s_str(out, job->name);
    fputc('\n', out);
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/managed-by: dtrain\n", out);
}

/* "labels:" with dtrain's and the spec's (kubernetes.labels, Kueue's
 * queue-name among them), and "annotations:" when asked for and given, both
 * at indentation `ind` (a metadata mapping's keys). */
void dt_k8s_put_metadata_maps(const struct dt_job *job, int ind, int annotations, FILE *out)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    dt_k8s_indent(out, ind);
    fputs("labels:\n", out);
    own_labels(job, ind + 2, out);
    dt_k8s_put_map(out, ind + 2, NULL, k->labels, k->n_labels);
    if (annotations)
        dt_k8s_put_map(out, ind, "annotations", k->annotations, k->n_annotations);
}

/* "---", apiVersion, kind and metadata (name <job><suffix>, namespace, labels). */
static void put_meta(const struct dt_job *job, const char *kind, const char *suffix, FILE *out)
{
    fprintf(out, "---\napiVersion: %s\nkind: %s\nmetadata:\n  name: ",
            strcmp(kind, "Job") == 0 ? "batch/v1" : "v1", kind);
    char name[128];
    snprintf(name, sizeof name, "%s%s", job->name, suffix);
    dt_k8s_str(out, name);
    fputs("\n  namespace: ", out);
    dt_k8s_str(out, job->kubernetes->namespace_name);
    fputc('\n', out);
    dt_k8s_put_metadata_maps(job, 2, strcmp(kind, "Job") == 0, out);
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
    FILE *f = fopen(job_path, "rb");
    if (!f)
        return dt_error_set_errno(DT_EIO, errno, "render kubernetes: reading %s", job_path);
    char *buf = malloc(DT_YAML_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, DT_YAML_MAX_BYTES + 1, f) : 0;
    int bad = !buf || ferror(f) || n > DT_YAML_MAX_BYTES;
    fclose(f);
    if (bad) {
        free(buf);
        return dt_error_set(DT_EIO, "render kubernetes: cannot read %s (or it is over %d bytes)", job_path,
                            DT_YAML_MAX_BYTES);
    }
    *text = buf;
    *len = n;
    return 0;
}

static int put_config_map(const struct dt_job *job, const struct dt_job *named, const char *job_path, FILE *out)
{
    char *text;
    size_t len;
    int rc = spec_text(job, job_path, &text, &len);
    if (rc)
        return rc;
    put_meta(named, "ConfigMap", "-spec", out);
    fputs("data:\n  job.yaml: ", out);
    rc = dt_k8s_block(out, 4, text, len);
    free(text);
    if (rc) /* the file changed since libyaml loaded it, which it does only from UTF-8 */
        return dt_error_prefix("render kubernetes: the ConfigMap's copy of %s", job_path);
    return 0;
}

static int put_secret(const struct dt_job *job, FILE *out)
{
    char token[65];
    int rc = dt_token_make(token);
    if (rc)
        return dt_error_prefix("render kubernetes: making the job token");
    put_meta(job, "Secret", "-token", out);
    fputs("type: Opaque\nstringData:\n  token: ", out);
    dt_k8s_str(out, token);
    fputc('\n', out);
    return 0;
}

static void put_service(const struct dt_job *job, FILE *out)
{
    put_meta(job, "Service", "", out);
    fputs("spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n", out);
    own_labels(job, 4, out);
    fprintf(out, "  ports:\n    - name: rendezvous\n      port: %d\n      targetPort: %d\n", dt_k8s_port(job),
            dt_k8s_port(job));
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

static void put_failure_policy(const struct dt_job *job, FILE *out)
{
    int codes[256];
    fputs("  podFailurePolicy:\n    rules:\n"
          "      - action: Ignore\n        onPodConditions:\n"
          "          - type: DisruptionTarget\n            status: \"True\"\n",
          out);
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

/* The Job's "spec:" (its pod template through dt_k8s_put_pod_spec, or with
 * pod_template merged in through dt_k8s_put_template), at column 0. */
static int put_job_spec(const struct dt_job *job, const char *run_id, FILE *out)
{
    char *head = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&head, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    fprintf(m,
            "  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n"
            "  backoffLimit: 0\n  podReplacementPolicy: Failed\n",
            job->nodes, job->nodes);
    put_failure_policy(job, m);
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
        return dt_k8s_put_template(job, run_id, 4, out);
    fputs("    metadata:\n", out);
    dt_k8s_put_metadata_maps(job, 6, 1, out);
    fputs("    spec:\n", out);
    dt_k8s_put_pod_spec(job, run_id, 6, out);
    return 0;
}

static int put_job(const struct dt_job *job, const char *run_id, FILE *out)
{
    put_meta(job, "Job", "", out);
    return put_job_spec(job, run_id, out);
}

/* --- a JobSet around the Job --------------------------------------------- */

/* The JobSet's one replicated Job; its Job is "<jobset>-node-0", its pods
 * "<jobset>-node-0-<i>" under the JobSet's headless Service, which
 * network.subdomain names "<jobset>-node-0": so the pods' objects' name
 * (DTRAIN_K8S_NAME) is "<jobset>-node-0" and node 0 is <that>-0.<that>, as
 * for a plain Job, and discover is the same. */
#define DT_K8S_JOBSET_RJOB "node"

static int put_jobset(const struct dt_job *job, const struct dt_job *named, FILE *out)
{
    fputs("---\napiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: ", out);
    dt_k8s_str(out, job->name);
    fputs("\n  namespace: ", out);
    dt_k8s_str(out, job->kubernetes->namespace_name);
    fputc('\n', out);
    dt_k8s_put_metadata_maps(named, 2, 1, out);
    /* One restart budget, the agents' (as backoffLimit 0 for the Job). */
    fputs("spec:\n  failurePolicy:\n    maxRestarts: 0\n  network:\n    enableDNSHostnames: true\n"
          "    publishNotReadyAddresses: true\n    subdomain: ", out);
    dt_k8s_str(out, named->name);
    fputs("\n  replicatedJobs:\n    - name: " DT_K8S_JOBSET_RJOB "\n      replicas: 1\n      template:\n"
          "        metadata:\n", out);
    dt_k8s_put_metadata_maps(named, 10, 1, out);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    int rc = put_job_spec(named, NULL, m);
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
                            "%s: nproc_per_node: gpu starts one rank per GPU, but "
                            "kubernetes.gpus_per_node is 0, so the pods get no GPU: "
                            "set kubernetes.gpus_per_node",
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

/* Every object is written from `named`, the job under the objects' name;
 * the ConfigMap still holds the spec as written (its name is the run's). */
static int put_all(const struct dt_job *job, const struct dt_job *named, const char *job_path, const char *run_id,
                   FILE *out)
{
    char shown[256]; /* a path with a newline must not end the comment */
    fprintf(out, "# Rendered by `dtrain render kubernetes %s`; apply with `kubectl apply -f FILE`.\n",
            dt_yaml_quote(job_path ? job_path : job->path, shown, sizeof shown));
    int rc = put_config_map(job, named, job_path, out);
    if (rc == 0 && job->rendezvous.auth == DT_AUTH_TOKEN)
        rc = put_secret(named, out);
    if (rc == 0)
        put_service(named, out);
    return rc ? rc : put_job(named, run_id, out);
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
    char *text = NULL, shown[256];
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render jobset: out of memory");
    fprintf(m, "# Rendered by `dtrain render jobset %s`; apply with `kubectl apply -f FILE` (JobSet controller\n"
               "# needed: jobset.x-k8s.io/v1alpha2).\n",
            dt_yaml_quote(job_path ? job_path : job->path, shown, sizeof shown));
    rc = put_config_map(job, &named, job_path, m);
    if (rc == 0 && job->rendezvous.auth == DT_AUTH_TOKEN)
        rc = put_secret(&named, m);
    if (rc == 0)
        rc = put_jobset(job, &named, m);
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

/* Written whole or not at all: the documents are made in memory first (a
 * pod_template that cannot merge is found only at the Job, the last one). */
int dt_k8s_render_run(const struct dt_job *job, const char *job_path, const char *launch_id,
                      const char *run_id, FILE *out)
{
    char name[96];
    dt_k8s_object_name(job, launch_id, name, sizeof name);
    struct dt_job named = *job; /* shallow: only read */
    named.name = name;
    int rc = check_job(&named);
    if (rc)
        return rc;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    rc = put_all(job, &named, job_path, run_id, m);
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    if (rc == 0 && (fwrite(text, 1, len, out) != len || ferror(out)))
        rc = dt_error_set(DT_EIO, "render kubernetes: writing the manifest failed");
    free(text);
    return rc;
}
