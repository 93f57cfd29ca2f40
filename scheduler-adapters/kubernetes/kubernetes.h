/* kubernetes.h - the Kubernetes adapter's parts, shared by its files and
 * reached by the unit tests (the adapter itself is dt_adapter_kubernetes,
 * adapter.h's contract, in kubernetes.c).
 *
 * The adapter (kubernetes.c: discover and the table entry) renders through
 * kubernetes_render.c (ConfigMap, Secret, Service, the Job and its failure
 * policy, YAML scalars) and kubernetes_pod.c (the pod template), and plans
 * the launch in kubernetes_submit.c; kubernetes_template.c merges the spec's
 * pod_template into the pod template.  Names of the objects derive from the job's
 * name; every object is labelled with the job's name (app.kubernetes.io/name,
 * the same for every launch) and the objects' (app.kubernetes.io/instance).
 *
 * Not for other adapters: they share only scheduler-adapters/adapter.h.
 */
#ifndef DT_KUBERNETES_H
#define DT_KUBERNETES_H

#include "spec/jobspec.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Where the pod sees the job spec and the token (one projected volume). */
#define DT_K8S_SPEC_DIR "/etc/dtrain"
#define DT_K8S_SPEC_PATH DT_K8S_SPEC_DIR "/job.yaml"
#define DT_K8S_TOKEN_PATH DT_K8S_SPEC_DIR "/token"
#define DT_K8S_CONTAINER "agent"
/* kubernetes.log_volume's mount: the agent's --log-dir. */
#define DT_K8S_LOG_VOLUME "dtrain-logs"
#define DT_K8S_LOG_PATH "/var/log/dtrain"
#define DT_K8S_DEFAULT_PORT 29500
#define DT_K8S_STOP_SLACK_S 15 /* past grace_period: the agent writes summary.json and leaves */
/* The Job's UID, passed to the pods through the downward API: the run id
 * every node agrees on, fresh for each Job object. */
#define DT_K8S_UID_ENV "DTRAIN_JOB_UID"
#define DT_K8S_UID_LABEL "batch.kubernetes.io/controller-uid"
/* The objects' name (the Job's, the Service's), which discover needs for the
 * coordinator's name: the spec's name when rendered, "<name>-<run id>" when
 * launched.  And the run id a launch chose, which the pods then use instead
 * of the UID's, so the run directory is named like the Job. */
#define DT_K8S_NAME_ENV "DTRAIN_K8S_NAME"
#define DT_K8S_RUN_ID_ENV "DTRAIN_K8S_RUN_ID"
#define DT_K8S_RUN_ID_LEN 12 /* hex digits, like the UID's run id */

/* The run id of a launched job's objects and pods, a label of its own. */
#define DT_K8S_RUN_LABEL "dtrain/run-id"

/* What one rendering names beside the job handed around (whose name is the
 * objects' name, dt_k8s_object_name): the app, the spec's name, the same for
 * every launch of it (label app.kubernetes.io/name: what a template's
 * affinity selects on), and the run, the pods' run id when launched (label
 * dtrain/run-id, DTRAIN_K8S_RUN_ID), NULL when rendered by hand (the pods
 * take the Job's UID's). */
struct dt_k8s_names {
    const char *app;
    const char *run_id;
};

/* The parts of a metadata mapping dt_k8s_put_metadata_maps writes beside
 * the labels of every object (dtrain's and kubernetes.labels). */
#define DT_K8S_META_NOTES 1u /* kubernetes.annotations: the Job (or JobSet) and the pod template */
#define DT_K8S_META_QUEUE 2u /* gang: kueue's label kueue.x-k8s.io/queue-name: the Job (or JobSet) */
#define DT_K8S_META_POD 4u   /* the pod template: the gang's pod-group label (coscheduling) or annotation (volcano) */

/* Which objects a rendering writes: the Job, the others (ConfigMap, Secret,
 * Service, PodGroup), or both (0). */
#define DT_K8S_PART_JOB 1u
#define DT_K8S_PART_REST 2u

/* How dt_k8s_render_with renders. */
struct dt_k8s_render_opts {
    const char *launch_id; /* objects named <name>-<launch id> (dt_k8s_object_name); NULL: the job's name */
    const char *run_id;    /* the pods' run id (launched), or NULL */
    /* The Job's uid: every other object gets an ownerReference to the Job,
     * so Kubernetes deletes it with the Job (its TTL included); NULL: none
     * (a manifest applied by hand: the Job has no uid before it exists). */
    const char *owner_uid;
    const char *token; /* the Secret's token; NULL: a fresh one */
    unsigned parts;    /* DT_K8S_PART_*; 0: all */
};

/* The rendezvous port the manifest opens and discover uses. */
int dt_k8s_port(const struct dt_job *job);

/* "<name>-0.<name>": pod 0's name under the headless Service. */
void dt_k8s_coord_host(const struct dt_job *job, char *buf, size_t size);

/* The adapter's render: every document, "---" before each, the objects
 * named after the job (a manifest applied twice is the same job). */
int dt_k8s_render(const struct dt_job *job, const char *job_path, FILE *out);
/* `dtrain render jobset`: the ConfigMap, the Secret and a JobSet
 * (jobset.x-k8s.io/v1alpha2) of one replicated Job, the Indexed Job render
 * writes, named "<name>-node-0" by the JobSet; its headless Service is the
 * JobSet controller's (network.subdomain). */
int dt_k8s_render_jobset(const struct dt_job *job, const char *job_path, FILE *out);
/* adapter.h's check: what render and launch refuse in the spec alone (the
 * Job's pod names, the kubernetes section, GPUs, dtrain's own env and volumes). */
int dt_k8s_check(const struct dt_job *job);
/* The same for a launch with `launch_id` (DT_K8S_RUN_ID_LEN hex digits): the
 * objects named by dt_k8s_object_name, so launching again never meets the
 * previous, immutable Job, and the pods' run id `run_id`: launch_id for a
 * new run, an earlier launch's for --resume (the run directory on
 * kubernetes.log_volume continues).  NULL ids render as dt_k8s_render. */
int dt_k8s_render_run(const struct dt_job *job, const char *job_path, const char *launch_id,
                      const char *run_id, FILE *out);
/* The same with every choice (dt_k8s_render_opts): `dtrain launch` applies
 * the Job, then the other objects owned by it; the dry run shows both. */
int dt_k8s_render_with(const struct dt_job *job, const char *job_path, const struct dt_k8s_render_opts *o,
                       FILE *out);
/* adapter.h's resume_check: a run can continue where something of it
 * outlives its pods: kubernetes.log_volume (the run directory) or the
 * trainer's absolute checkpoint.dir (a volume the user mounts). */
int dt_k8s_resume_check(const struct dt_job *job);
/* "<name>-<run id>", the name cut (and any '-' it then ends with dropped)
 * so that pod hostnames "<object>-<last index>" keep within a DNS label's
 * 63 characters; the job's name when run_id is NULL. */
void dt_k8s_object_name(const struct dt_job *job, const char *run_id, char *buf, size_t size);
struct dt_adapter_launch;
struct dt_adapter_plan;
/* The adapter's plan: kubectl apply, then (its finish) follow the Job to its end. */
int dt_k8s_plan(const struct dt_job *job, const struct dt_adapter_launch *opts, struct dt_adapter_plan *out);
/* adapter.h's dry_run: the Job and then the objects it owns, as the plan
 * applies them, with placeholders for what only the launch knows. */
int dt_k8s_dry_run(const struct dt_job *job, const struct dt_adapter_launch *opts, FILE *out);
#define DT_K8S_DRY_UID "<the Job's uid>"
#define DT_K8S_DRY_TOKEN "<a fresh job token>"
/* `dtrain status` and `dtrain cancel` of a launched Job (launch.json's name
 * and namespace): its conditions; kubectl delete of its objects (kubernetes_submit.c). */
struct dt_run_record;
struct dt_adapter_state;
int dt_k8s_status(const struct dt_run_record *rec, struct dt_adapter_state *out);
int dt_k8s_cancel(const struct dt_run_record *rec, double wait_s);
/* What the pod template cannot hold (the user's env or volumes colliding
 * with dtrain's own): 0 or DT_EINVAL naming the key.  Render calls it before
 * writing anything. */
int dt_k8s_check_pod(const struct dt_job *job);
/* Writes the pod template's spec at indentation `ind` (job->name is the
 * objects' name; nm->run_id, when launched, goes to the pods' environment). */
void dt_k8s_put_pod_spec(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, FILE *out);
/* The Job's pod template (its metadata and spec mappings at `ind`) with
 * kubernetes.pod_template merged in (kubernetes_template.c says how); 0, or
 * DT_EINVAL naming what the template may not change, having written nothing. */
int dt_k8s_put_template(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, FILE *out);
/* The Job's spec without its template: `head` (len bytes, rendered at
 * indentation `ind`) with kubernetes.job_spec merged in, at `ind`. */
int dt_k8s_put_job_spec(const struct dt_job *job, const char *head, size_t len, int ind, FILE *out);
/* A metadata's "labels:" (dtrain's: app.kubernetes.io/name the app,
 * instance the objects' name, managed-by dtrain, dtrain/run-id when
 * launched; then kubernetes.labels) and what `parts` (DT_K8S_META_*) adds,
 * at `ind`. */
void dt_k8s_put_metadata_maps(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, unsigned parts,
                              FILE *out);
/* "key:" then each "name: value" of e[0..n) indented 2 more; without key,
 * just the pairs at `ind`.  Nothing when n is 0. */
void dt_k8s_put_map(FILE *out, int ind, const char *key, const struct dt_env_entry *e, int n);

/* YAML output.  A scalar is written plain only when no YAML reader could
 * take it for anything but that string (not "yes", "0123", "1e3", "a: b",
 * "null", ...); otherwise double-quoted with escapes. */
void dt_k8s_str(FILE *out, const char *s);
/* `text` (len bytes) as a literal block scalar (after "key: "), its lines at
 * indentation `ind`, reading back byte for byte; quoted when it cannot be a
 * block (carriage returns, control characters).  Returns 0, or DT_EINVAL
 * having written nothing when text is not UTF-8, which YAML cannot hold. */
int dt_k8s_block(FILE *out, int ind, const char *text, size_t len);
/* A byte count as a Kubernetes quantity string: "16Gi", "512Mi", "1000". */
void dt_k8s_bytes(FILE *out, uint64_t bytes);
/* `ind` spaces. */
void dt_k8s_indent(FILE *out, int ind);

#endif
