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
 * job whose clients must prove they belong to it.
 *
 * Not for the pod template (kubernetes_pod.c) or for applying anything.
 */
#include "scheduler-adapters/kubernetes_internal.h"

#include "base/error.h"
#include "spec/jobspec_yaml.h"
#include "spec/token.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dt_k8s_port(const struct dt_job *job)
{
    return job->rendezvous.port > 0 ? job->rendezvous.port : DT_K8S_DEFAULT_PORT;
}

void dt_k8s_coord_host(const struct dt_job *job, char *buf, size_t size)
{
    snprintf(buf, size, "%s-0.%s", job->name, job->name);
}

void dt_k8s_put_meta(const struct dt_job *job, const char *kind, const char *suffix, FILE *out)
{
    fprintf(out, "---\napiVersion: %s\nkind: %s\nmetadata:\n  name: ",
            strcmp(kind, "Job") == 0 ? "batch/v1" : "v1", kind);
    char name[128];
    snprintf(name, sizeof name, "%s%s", job->name, suffix);
    dt_k8s_str(out, name);
    fputs("\n  namespace: ", out);
    dt_k8s_str(out, job->kubernetes->namespace_name);
    fputs("\n  labels:\n", out);
    dt_k8s_labels(job, 4, out);
}

/* The spec file as the user wrote it (comments and all) when it says
 * scheduler: kubernetes.  Otherwise (rendering a spec written for another
 * scheduler, or one not read from a file) the loaded job with its defaults
 * and scheduler: kubernetes, so the agents in the pods discover as pods. */
static int spec_text(const struct dt_job *job, const char *job_path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!job_path || job->scheduler != DT_SCHED_KUBERNETES) {
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

static int put_config_map(const struct dt_job *job, const char *job_path, FILE *out)
{
    char *text;
    size_t len;
    int rc = spec_text(job, job_path, &text, &len);
    if (rc)
        return rc;
    dt_k8s_put_meta(job, "ConfigMap", "-spec", out);
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
    dt_k8s_put_meta(job, "Secret", "-token", out);
    fputs("type: Opaque\nstringData:\n  token: ", out);
    dt_k8s_str(out, token);
    fputc('\n', out);
    return 0;
}

static void put_service(const struct dt_job *job, FILE *out)
{
    dt_k8s_put_meta(job, "Service", "", out);
    fputs("spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n", out);
    dt_k8s_labels(job, 4, out);
    fprintf(out, "  ports:\n    - name: rendezvous\n      port: %d\n      targetPort: %d\n", dt_k8s_port(job),
            dt_k8s_port(job));
}

/* What Kubernetes or the pods would refuse later, refused now. */
static int check_job(const struct dt_job *job)
{
    if (!job->kubernetes)
        return dt_error_set(DT_EINVAL, "%s: render kubernetes needs a kubernetes: section (at least "
                                       "kubernetes: {image: ...})", job->path);
    /* Pod hostnames are <name>-<index>, a DNS label of at most 63 characters. */
    char host[96];
    int n = snprintf(host, sizeof host, "%s-%d", job->name, job->nodes - 1);
    if (n > 63)
        return dt_error_set(DT_EINVAL, "%s: name: pod hostnames would be '%s' (%d characters), over "
                                       "Kubernetes' 63: shorten the job's name", job->path, host, n);
    if (job->nproc_per_node == DT_NPROC_GPU && job->kubernetes->gpus_per_node == 0)
        return dt_error_set(DT_EINVAL, "%s: nproc_per_node: gpu starts one rank per GPU, but "
                                       "kubernetes.gpus_per_node is 0, so the pods get no GPU: "
                                       "set kubernetes.gpus_per_node", job->path);
    return dt_k8s_check_pod(job);
}

int dt_k8s_render(const struct dt_job *job, const char *job_path, FILE *out)
{
    int rc = check_job(job);
    if (rc)
        return rc;
    char shown[256]; /* a path with a newline must not end the comment */
    fprintf(out, "# Rendered by `dtrain render kubernetes %s`; apply with `kubectl apply -f FILE`.\n",
            dt_yaml_quote(job_path ? job_path : job->path, shown, sizeof shown));
    if ((rc = put_config_map(job, job_path, out)))
        return rc;
    if (job->rendezvous.auth == DT_AUTH_TOKEN && (rc = put_secret(job, out)))
        return rc;
    put_service(job, out);
    dt_k8s_put_job(job, out);
    return ferror(out) ? dt_error_set(DT_EIO, "render kubernetes: writing the manifest failed") : 0;
}
