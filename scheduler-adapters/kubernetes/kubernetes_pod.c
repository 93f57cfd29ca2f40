/* kubernetes_pod.c - the pod template: one container running `dtrain agent /etc/dtrain/job.yaml`.
 *
 * What the pod gives the agent, and why:
 *   /etc/dtrain/job.yaml, /etc/dtrain/token  one projected volume of the
 *       ConfigMap and the Secret (two volumes cannot share a directory); the
 *       token file mode 0400, as the agent requires of a token file: a root
 *       container reads it as its owner, another user through the pod's
 *       fsGroup (the kubelet makes it 0440 under that group, which the agent
 *       accepts in a pod: spec/token.c);
 *   DTRAIN_JOB_TOKEN_FILE  the token's path: tokens never travel in env or argv;
 *   DTRAIN_JOB_UID         the Job's UID (downward API, pod label
 *       batch.kubernetes.io/controller-uid): a run id all pods share and a
 *       re-created Job does not;
 *   DTRAIN_COMM_HOST       the pod IP (downward API), the address the tcp
 *       backend gives its peers;
 *   DTRAIN_K8S_NAME        the objects' name, which a launch makes unique
 *       (the coordinator is <name>-0.<name>); DTRAIN_K8S_RUN_ID the run id
 *       a launch chose (render leaves the run id to the UID);
 *   JOB_COMPLETION_INDEX   set by the Job controller itself: the node rank;
 *   schedulerName          volcano with kubernetes.gang: volcano;
 *   /dev/shm               an in-memory emptyDir (a container's default
 *       /dev/shm is 64 MiB, too small for the shm backend and DataLoaders);
 *   /var/log/dtrain        kubernetes.log_volume, when given, and the agent's
 *       --log-dir: run directories that outlive the pod;
 *   setup:                 the spec's lines, run by /bin/sh in the container
 *       before it execs the agent (dt_adapter_setup_script): the command is
 *       [/bin/sh, -c, SCRIPT, dtrain-setup, dtrain, agent, ...], the agent's
 *       words kept apart so what it runs stays readable.
 * The user's env, volumes and names may not collide with these: the result
 * would be a pod that silently does something else, so render refuses.
 *
 * Not for the Job around it (kubernetes_render.c).
 */
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"
#include "scheduler-adapters/adapter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const own_env[] = {"DTRAIN_JOB_TOKEN_FILE", DT_K8S_UID_ENV, "DTRAIN_COMM_HOST",
                                      "JOB_COMPLETION_INDEX", DT_K8S_NAME_ENV, DT_K8S_RUN_ID_ENV, NULL};

int dt_k8s_check_pod(const struct dt_job *job)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    for (int i = 0; i < k->n_env; i++)
        for (int j = 0; own_env[j]; j++)
            if (strcmp(k->env[i].name, own_env[j]) == 0)
                return dt_error_set(DT_EINVAL, "%s: kubernetes.env.%s: the manifest sets %s itself "
                                               "(see docs/kubernetes.md); remove it from env",
                                    job->path, own_env[j], own_env[j]);
    for (int i = 0; i < k->n_volumes; i++) {
        const struct dt_k8s_volume *v = &k->volumes[i];
        if (strcmp(v->name, "dtrain-job") == 0 || strcmp(v->name, "dshm") == 0 ||
            strcmp(v->name, DT_K8S_LOG_VOLUME) == 0)
            return dt_error_set(DT_EINVAL, "%s: kubernetes.volumes[%d].name: '%s' is the name of a "
                                           "volume dtrain adds; choose another", job->path, i, v->name);
        if (strcmp(v->mount_path, DT_K8S_SPEC_DIR) == 0 || strcmp(v->mount_path, "/dev/shm") == 0 ||
            (k->log_volume && strcmp(v->mount_path, DT_K8S_LOG_PATH) == 0))
            return dt_error_set(DT_EINVAL, "%s: kubernetes.volumes[%d].mount_path: dtrain mounts %s "
                                           "itself (shm_size sets /dev/shm's size, log_volume what is at "
                                           DT_K8S_LOG_PATH ")",
                                job->path, i, v->mount_path);
        for (int j = 0; j < i; j++)
            if (strcmp(k->volumes[j].name, v->name) == 0)
                return dt_error_set(DT_EINVAL, "%s: kubernetes.volumes[%d].name: '%s' is also "
                                               "volumes[%d]'s; Kubernetes needs unique names",
                                    job->path, i, v->name, j);
    }
    return 0;
}

/* "- name: X\n  value: Y" or a downward-API fieldRef, at indentation ind. */
static void put_env(FILE *out, int ind, const char *name, const char *value, const char *field)
{
    dt_k8s_indent(out, ind);
    fputs("- name: ", out);
    dt_k8s_str(out, name);
    fputc('\n', out);
    dt_k8s_indent(out, ind + 2);
    if (field) {
        fputs("valueFrom:\n", out);
        dt_k8s_indent(out, ind + 4);
        fputs("fieldRef:\n", out);
        dt_k8s_indent(out, ind + 6);
        fputs("fieldPath: ", out);
    } else {
        fputs("value: ", out);
    }
    dt_k8s_str(out, field ? field : value);
    fputc('\n', out);
}

void dt_k8s_put_map(FILE *out, int ind, const char *key, const struct dt_env_entry *e, int n)
{
    if (n == 0)
        return;
    if (key) {
        dt_k8s_indent(out, ind);
        fprintf(out, "%s:\n", key);
        ind += 2;
    }
    for (int i = 0; i < n; i++) {
        dt_k8s_indent(out, ind);
        dt_k8s_str(out, e[i].name);
        fputs(": ", out);
        dt_k8s_str(out, e[i].value);
        fputc('\n', out);
    }
}

static void put_tolerations(FILE *out, int ind, const struct dt_kubernetes_spec *k)
{
    if (k->n_tolerations == 0)
        return;
    dt_k8s_indent(out, ind);
    fputs("tolerations:\n", out);
    for (int i = 0; i < k->n_tolerations; i++) {
        const struct dt_k8s_toleration *t = &k->tolerations[i];
        const char *fields[][2] = {{"key", t->key}, {"operator", t->operator_name ? t->operator_name : "Equal"},
                                   {"value", t->value}, {"effect", t->effect}};
        for (int f = 0, first = 1; f < 4; f++) {
            if (!fields[f][1])
                continue;
            dt_k8s_indent(out, ind + 2);
            fprintf(out, "%s%s: ", first ? "- " : "  ", fields[f][0]);
            dt_k8s_str(out, fields[f][1]);
            fputc('\n', out);
            first = 0;
        }
        if (t->toleration_seconds >= 0) {
            dt_k8s_indent(out, ind + 4);
            fprintf(out, "tolerationSeconds: %lld\n", (long long)t->toleration_seconds);
        }
    }
}

static void put_resources(FILE *out, int ind, const struct dt_kubernetes_spec *k)
{
    if (k->cpu_millis <= 0 && k->memory_bytes == 0 && k->gpus_per_node <= 0)
        return;
    dt_k8s_indent(out, ind);
    fputs("resources:\n", out);
    /* Requests equal to limits: the pod's QoS is Guaranteed, so the kubelet
     * neither throttles it below what it asked nor evicts it first. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && k->cpu_millis <= 0 && k->memory_bytes == 0)
            break; /* GPU only: requests default to limits for extended resources */
        dt_k8s_indent(out, ind + 2);
        fputs(pass == 0 ? "limits:\n" : "requests:\n", out);
        if (k->cpu_millis > 0) {
            dt_k8s_indent(out, ind + 4);
            fprintf(out, "cpu: \"%dm\"\n", k->cpu_millis);
        }
        if (k->memory_bytes > 0) {
            dt_k8s_indent(out, ind + 4);
            fputs("memory: ", out);
            dt_k8s_bytes(out, k->memory_bytes);
            fputc('\n', out);
        }
        if (pass == 0 && k->gpus_per_node > 0) {
            dt_k8s_indent(out, ind + 4);
            fprintf(out, "nvidia.com/gpu: %d\n", k->gpus_per_node);
        }
    }
}

static void put_mount(FILE *out, int ind, const char *name, const char *path, int read_only)
{
    dt_k8s_indent(out, ind);
    fputs("- name: ", out);
    dt_k8s_str(out, name);
    fputc('\n', out);
    dt_k8s_indent(out, ind + 2);
    fputs("mountPath: ", out);
    dt_k8s_str(out, path);
    fputc('\n', out);
    if (read_only) {
        dt_k8s_indent(out, ind + 2);
        fputs("readOnly: true\n", out);
    }
}

/* The agent, after the setup: lines in a shell when there are any. */
static int put_command(const struct dt_job *job, FILE *out, int ind)
{
    /* log_volume: the run directories on the volume, whatever log_dir says. */
    const char *agent = job->kubernetes->log_volume
                            ? "dtrain, agent, " DT_K8S_SPEC_PATH ", --log-dir, " DT_K8S_LOG_PATH
                            : "dtrain, agent, " DT_K8S_SPEC_PATH;
    dt_k8s_indent(out, ind);
    char *setup = dt_adapter_setup_script(job);
    if (!setup) {
        fprintf(out, "command: [%s]\n", agent);
        return job->setup ? dt_error_set(DT_ENOMEM, "render kubernetes: out of memory") : 0;
    }
    fputs("command:\n", out);
    dt_k8s_indent(out, ind + 2);
    fputs("- /bin/sh\n", out);
    dt_k8s_indent(out, ind + 2);
    fputs("- -c\n", out);
    dt_k8s_indent(out, ind + 2);
    fputs("- ", out);
    int rc = dt_k8s_block(out, ind + 4, setup, strlen(setup));
    free(setup);
    dt_k8s_indent(out, ind + 2);
    fputs("- " DT_ADAPTER_SETUP_ARG0 "\n", out);
    char words[160];
    snprintf(words, sizeof words, "%s", agent);
    for (char *save = NULL, *w = strtok_r(words, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        dt_k8s_indent(out, ind + 2);
        fprintf(out, "- %s\n", w);
    }
    return rc;
}

static void put_container(const struct dt_job *job, const char *run_id, FILE *out, int ind)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    dt_k8s_indent(out, ind);
    fputs("containers:\n", out);
    dt_k8s_indent(out, ind + 2);
    fputs("- name: " DT_K8S_CONTAINER "\n", out);
    ind += 4;
    dt_k8s_indent(out, ind);
    fputs("image: ", out);
    dt_k8s_str(out, k->image);
    fputc('\n', out);
    if (k->image_pull_policy) {
        dt_k8s_indent(out, ind);
        fprintf(out, "imagePullPolicy: %s\n", k->image_pull_policy);
    }
    (void)put_command(job, out, ind); /* its only failures: out of memory, or text libyaml never yields */
    dt_k8s_indent(out, ind);
    fputs("env:\n", out);
    if (job->rendezvous.auth == DT_AUTH_TOKEN)
        put_env(out, ind + 2, "DTRAIN_JOB_TOKEN_FILE", DT_K8S_TOKEN_PATH, NULL);
    put_env(out, ind + 2, DT_K8S_UID_ENV, NULL, "metadata.labels['" DT_K8S_UID_LABEL "']");
    put_env(out, ind + 2, "DTRAIN_COMM_HOST", NULL, "status.podIP");
    put_env(out, ind + 2, DT_K8S_NAME_ENV, job->name, NULL);
    if (run_id)
        put_env(out, ind + 2, DT_K8S_RUN_ID_ENV, run_id, NULL);
    for (int i = 0; i < k->n_env; i++)
        put_env(out, ind + 2, k->env[i].name, k->env[i].value, NULL);
    dt_k8s_indent(out, ind);
    fprintf(out, "ports:\n%*s- name: rendezvous\n%*scontainerPort: %d\n", ind + 2, "", ind + 4, "",
            dt_k8s_port(job));
    put_resources(out, ind, k);
    dt_k8s_indent(out, ind);
    fputs("volumeMounts:\n", out);
    put_mount(out, ind + 2, "dtrain-job", DT_K8S_SPEC_DIR, 1);
    put_mount(out, ind + 2, "dshm", "/dev/shm", 0);
    if (k->log_volume)
        put_mount(out, ind + 2, DT_K8S_LOG_VOLUME, DT_K8S_LOG_PATH, 0);
    for (int i = 0; i < k->n_volumes; i++)
        put_mount(out, ind + 2, k->volumes[i].name, k->volumes[i].mount_path, k->volumes[i].read_only);
}

/* One user volume's source: exactly one of the four is set (the parser checked). */
static void put_volume_source(FILE *out, int ind, const struct dt_k8s_volume *v)
{
    const char *kind = v->host_path ? "hostPath" : v->pvc ? "persistentVolumeClaim"
                       : v->config_map ? "configMap" : "secret";
    const char *key = v->host_path ? "path" : v->pvc ? "claimName" : v->config_map ? "name" : "secretName";
    const char *val = v->host_path ? v->host_path : v->pvc ? v->pvc : v->config_map ? v->config_map : v->secret;
    dt_k8s_indent(out, ind);
    fprintf(out, "%s:\n", kind);
    dt_k8s_indent(out, ind + 2);
    fprintf(out, "%s: ", key);
    dt_k8s_str(out, val);
    fputc('\n', out);
    if (v->pvc && v->read_only) {
        dt_k8s_indent(out, ind + 2);
        fputs("readOnly: true\n", out);
    }
}

static void put_volumes(const struct dt_job *job, FILE *out, int ind)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    dt_k8s_indent(out, ind);
    fputs("volumes:\n", out);
    dt_k8s_indent(out, ind + 2);
    fprintf(out, "- name: dtrain-job\n%*sprojected:\n%*ssources:\n", ind + 4, "", ind + 6, "");
    dt_k8s_indent(out, ind + 8);
    fputs("- configMap:\n", out);
    dt_k8s_indent(out, ind + 12);
    fputs("name: ", out);
    char name[128];
    snprintf(name, sizeof name, "%s-spec", job->name);
    dt_k8s_str(out, name);
    fputc('\n', out);
    if (job->rendezvous.auth == DT_AUTH_TOKEN) {
        dt_k8s_indent(out, ind + 8);
        fputs("- secret:\n", out);
        dt_k8s_indent(out, ind + 12);
        fputs("name: ", out);
        snprintf(name, sizeof name, "%s-token", job->name);
        dt_k8s_str(out, name);
        fputc('\n', out);
        /* 0400 (256): the agent refuses a token file others may read, and
         * Kubernetes makes Secret files 0644 unless told (0440 under an fsGroup). */
        dt_k8s_indent(out, ind + 12);
        fprintf(out, "items:\n%*s- key: token\n%*spath: token\n%*smode: 256\n", ind + 14, "", ind + 16, "",
                ind + 16, "");
    }
    dt_k8s_indent(out, ind + 2);
    fprintf(out, "- name: dshm\n%*semptyDir:\n%*smedium: Memory\n", ind + 4, "", ind + 6, "");
    if (k->shm_size_bytes > 0) {
        dt_k8s_indent(out, ind + 6);
        fputs("sizeLimit: ", out);
        dt_k8s_bytes(out, k->shm_size_bytes);
        fputc('\n', out);
    }
    if (k->log_volume) {
        dt_k8s_indent(out, ind + 2);
        fputs("- name: " DT_K8S_LOG_VOLUME "\n", out);
        put_volume_source(out, ind + 4, k->log_volume);
    }
    for (int i = 0; i < k->n_volumes; i++) {
        dt_k8s_indent(out, ind + 2);
        fputs("- name: ", out);
        dt_k8s_str(out, k->volumes[i].name);
        fputc('\n', out);
        put_volume_source(out, ind + 4, &k->volumes[i]);
    }
}

void dt_k8s_put_pod_spec(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, FILE *out)
{
    const struct dt_kubernetes_spec *k = job->kubernetes;
    dt_k8s_indent(out, ind);
    fputs("restartPolicy: Never\n", out); /* podFailurePolicy requires it; the agent restarts ranks */
    if (k->gang == DT_K8S_GANG_VOLCANO) {
        dt_k8s_indent(out, ind);
        fputs("schedulerName: volcano\n", out); /* Volcano places the PodGroup's pods together */
    }
    dt_k8s_indent(out, ind);
    fputs("subdomain: ", out);
    dt_k8s_str(out, job->name);
    fputc('\n', out);
    /* A deleted pod's agent gets SIGTERM and must have the job's grace period
     * to stop its ranks, then time to write summary.json, before the kubelet's
     * SIGKILL (30 s by default, as long as the grace period alone). */
    dt_k8s_indent(out, ind);
    fprintf(out, "terminationGracePeriodSeconds: %lld\n",
            (long long)ceil(job->grace_period_s) + DT_K8S_STOP_SLACK_S);
    const char *opt[][2] = {{"serviceAccountName", k->service_account}, {"priorityClassName", k->priority_class}};
    for (int i = 0; i < 2; i++) {
        if (!opt[i][1])
            continue;
        dt_k8s_indent(out, ind);
        fprintf(out, "%s: ", opt[i][0]);
        dt_k8s_str(out, opt[i][1]);
        fputc('\n', out);
    }
    dt_k8s_put_map(out, ind, "nodeSelector", k->node_selector, k->n_node_selector);
    if (k->n_image_pull_secrets > 0) {
        dt_k8s_indent(out, ind);
        fputs("imagePullSecrets:\n", out);
    }
    for (int i = 0; i < k->n_image_pull_secrets; i++) {
        dt_k8s_indent(out, ind + 2);
        fputs("- name: ", out);
        dt_k8s_str(out, k->image_pull_secrets[i]);
        fputc('\n', out);
    }
    put_tolerations(out, ind, k);
    put_container(job, nm->run_id, out, ind);
    put_volumes(job, out, ind);
}
