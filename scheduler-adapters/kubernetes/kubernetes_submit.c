/* kubernetes_submit.c - `dtrain launch` for scheduler: kubernetes: kubectl apply, then follow the Job.
 *
 * The manifests go to `kubectl apply -f -` on its stdin (never a temp file
 * holding the token), every object named <name>-<run id> with a run id made
 * here, so a second launch never meets the first one's immutable Job.  The
 * Job goes first (the plan, adapter.h, which the launcher runs: `kubectl
 * apply -o jsonpath={.metadata.uid}` says its uid), then (the plan's finish)
 * its ConfigMap, Secret, Service and PodGroup, each with an ownerReference
 * to it, so Kubernetes deletes them with the Job (its ttlSecondsAfterFinished
 * included); the Job's pods wait for their ConfigMap and Secret meanwhile,
 * as the kubelet retries a volume it cannot mount yet.  If they cannot be
 * applied, the Job is deleted again.  Then, once a second, `kubectl get` reports the pods' phases (printed
 * when they change) and the Job's conditions; when every pod runs, `kubectl
 * logs -f --prefix -l <instance label>` streams their output here.  The
 * Job's end decides the exit status: 0 when Complete; when Failed, the first
 * non-zero exit code of an agent container (the job's status, as the agent
 * exits with it), else 1.  Without kubectl the user learns how to render and
 * apply by hand (exit 2).
 *
 * Ctrl-C (SIGINT, SIGTERM, SIGHUP) while following deletes what this launch
 * created (`kubectl delete job,service,configmap,secret -l instance=<name>`,
 * the pods going with their Job) and exits 128 + the signal, as the local
 * launcher stops its ranks and Slurm's scancels its job.  --detach instead
 * applies and returns at once, leaving the Job to the cluster.
 *
 * The launch records the Job's name and namespace in a run directory of
 * its own here (<log_dir>/<name>-<run id>/launch.json, run_record.h; the
 * ranks' logs and summary.json stay in the pods), so `dtrain status` asks
 * kubectl for the Job's conditions and `dtrain cancel` deletes what the
 * launch created, as Ctrl-C does, and stops a launcher still following it.
 *
 * --resume RUN_DIR: the new Job's objects get a fresh name as always (the
 * old Job may still exist), but its pods the old run id, so their agents
 * open the old run directory on kubernetes.log_volume and the trainer
 * finds its checkpoints; RUN_DIR/launch.json then names the new Job.
 * Without log_volume (or an absolute checkpoint.dir) nothing of the run
 * outlived its pods, and dt_k8s_resume_check refuses.
 *
 * Not for writing the manifests (kubernetes_render.c).
 */
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"
#include "base/log.h"
#include "base/fs.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "scheduler-adapters/run_record.h"
#include "spec/token.h"
#include "spec/trainer_spec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_S 1.0
#define MAX_FAILED_LOOKS 30 /* half a minute of no answer */

static volatile sig_atomic_t got_signal; /* the signal that asked to stop, or 0 */

static void on_signal(int sig)
{
    got_signal = sig;
}

/* Runs argv with `in` (len bytes) on its stdin and, when out is not NULL,
 * its stdout captured into *out (malloc'd, NUL-terminated); its stderr is
 * the user's (kubectl says there what went wrong).  Returns the exit status,
 * 128+signal, or a negative DT_E* code when it could not run. */
static int run(char *const argv[], const char *in, size_t len, char **out)
{
    struct dt_proc_run r = {.argv = argv, .in = in, .in_len = len,
                            .io = {out ? DT_PROC_CAPTURE : DT_PROC_INHERIT, DT_PROC_INHERIT}};
    int rc = dt_proc_run(&r);
    if (rc < 0)
        dt_error_prefix("kubernetes");
    if (out)
        *out = r.captured[0];
    return rc;
}

/* `kubectl get <what> -n NS [-l instance=NAME] -o jsonpath=<path>`: its output, or NULL. */
static char *get(const struct dt_job *job, const char *what, int by_label, const char *jsonpath)
{
    char sel[160], jp[512];
    snprintf(sel, sizeof sel, "app.kubernetes.io/instance=%s", job->name);
    snprintf(jp, sizeof jp, "jsonpath=%s", jsonpath);
    char *argv[12];
    int n = 0;
    argv[n++] = "kubectl";
    argv[n++] = "get";
    argv[n++] = (char *)what;
    argv[n++] = "-n";
    argv[n++] = job->kubernetes->namespace_name;
    if (by_label) {
        argv[n++] = "-l";
        argv[n++] = sel;
    }
    argv[n++] = "-o";
    argv[n++] = jp;
    argv[n] = NULL;
    char *out = NULL;
    if (run(argv, NULL, 0, &out) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static pid_t start_logs(const struct dt_job *job)
{
    char sel[160], maxreq[32];
    snprintf(sel, sizeof sel, "app.kubernetes.io/instance=%s", job->name);
    snprintf(maxreq, sizeof maxreq, "--max-log-requests=%d", job->nodes + 1);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("kubectl", "kubectl", "logs", "-f", "--prefix", "-n", job->kubernetes->namespace_name, "-l", sel,
               maxreq, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The first non-zero exit code among the agent containers, or 1. */
static int failed_status(const struct dt_job *job)
{
    char *codes = get(job, "pods", 1,
                      "{range .items[*]}{.status.containerStatuses[0].state.terminated.exitCode} {end}");
    int status = 1;
    for (char *p = codes, *end; p && *p; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v > 0 && v < 256) {
            status = (int)v;
            break;
        }
    }
    free(codes);
    return status;
}

/* One look at the Job: its exit status once it ended, -1 while it runs, -2
 * when kubectl could not say (API server unreachable, Job deleted). */
static int look(const struct dt_job *job)
{
    char name[160];
    snprintf(name, sizeof name, "job/%s", job->name);
    char *cond = get(job, name, 0, "{.status.conditions[?(@.status==\"True\")].type}");
    int status = !cond                      ? -2
                 : strstr(cond, "Complete") ? 0
                 : strstr(cond, "Failed")   ? failed_status(job)
                                            : -1;
    free(cond);
    return status;
}

/* Prints the pods' phases when they change; starts the log stream once the
 * pods the job starts with run (nodes; an elastic job's MIN). */
static void watch_pods(const struct dt_job *job, char **last, pid_t *logs)
{
    char *pods = get(job, "pods", 1, "{range .items[*]}{.metadata.name}={.status.phase} {end}");
    if (!pods)
        return;
    if (!*last || strcmp(pods, *last) != 0)
        dt_log_info("kubernetes: pods: %s", *pods ? pods : "(none yet)");
    free(*last);
    *last = pods;
    int running = 0;
    for (const char *p = pods; (p = strstr(p, "=Running")); p++)
        running++;
    if (*logs < 0 && running >= job->nodes_min) /* an elastic job starts with MIN */
        *logs = start_logs(job);
}

/* Ctrl-C: every object of this launch, the Job's pods with it (kubectl's
 * default cascade).  128 + the signal, as a stopped local job. */
static int delete_all(const struct dt_job *job, int sig)
{
    char sel[160];
    snprintf(sel, sizeof sel, "app.kubernetes.io/instance=%s", job->name);
    dt_log_info("kubernetes: stopping: deleting Job %s and its Service, ConfigMap and Secret (--detach "
                "leaves a Job running)", job->name);
    char *argv[] = {"kubectl", "delete", "job,service,configmap,secret", "-n", job->kubernetes->namespace_name,
                    "-l", sel, "--wait=false", NULL};
    int st = run(argv, NULL, 0, NULL);
    if (st != 0)
        dt_log_error("kubernetes: `kubectl delete` failed (exit %d; its message is above): delete the Job "
                     "yourself: kubectl delete job %s -n %s", st, job->name, job->kubernetes->namespace_name);
    return 128 + sig;
}

/* Polls until the Job is Complete (0) or Failed (its status); 2 when
 * kubectl cannot tell for MAX_FAILED_LOOKS polls in a row; 128 + signal
 * when stopped, the Job deleted. */
static int follow(const struct dt_job *job)
{
    char *last = NULL;
    pid_t logs = -1;
    int status = -1, lost = 0;
    dt_log_info("kubernetes: following Job %s in namespace %s (Ctrl-C deletes it)", job->name,
                job->kubernetes->namespace_name);
    for (int failed_looks = 0;;) {
        watch_pods(job, &last, &logs);
        status = got_signal ? -1 : look(job);
        if (got_signal) {
            status = delete_all(job, got_signal);
            lost = 1;
            break;
        }
        if (status >= 0)
            break;
        failed_looks = status == -2 ? failed_looks + 1 : 0;
        if (failed_looks >= MAX_FAILED_LOOKS) {
            dt_error_set(DT_ECONN, "kubernetes: `kubectl get job/%s -n %s` failed %d times in a row (its "
                                   "message is above); the Job may still run: kubectl get job %s -n %s",
                         job->name, job->kubernetes->namespace_name, MAX_FAILED_LOOKS, job->name,
                         job->kubernetes->namespace_name);
            status = 2;
            lost = 1;
            break;
        }
        struct timespec ts = {(time_t)POLL_S, (long)((POLL_S - (time_t)POLL_S) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (logs > 0) {
        sleep(1); /* the last lines still in flight */
        kill(logs, SIGTERM);
        waitpid(logs, NULL, 0);
    }
    free(last);
    if (!lost)
        dt_log_info("kubernetes: Job %s %s", job->name, status == 0 ? "completed" : "failed");
    return status;
}

/* --detach: applied; say how to follow and stop it. */
static int detached(const struct dt_job *job)
{
    const char *ns = job->kubernetes->namespace_name;
    printf("Job %s applied in namespace %s.\n  follow: kubectl logs -f --prefix -n %s -l "
           "app.kubernetes.io/instance=%s\n  stop:   kubectl delete job,service,configmap,secret -n %s -l "
           "app.kubernetes.io/instance=%s\n",
           job->name, ns, ns, job->name, ns, job->name);
    return 0;
}

/* follow() with SIGINT, SIGTERM and SIGHUP caught, so that stopping dtrain
 * deletes the Job rather than leaving it behind. */
static int follow_signals(const struct dt_job *job)
{
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa = {.sa_handler = on_signal}, old[3];
    got_signal = 0;
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &sa, &old[i]);
    int status = follow(job);
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &old[i], NULL);
    return status;
}

/* --- dtrain status and cancel -------------------------------------------- */

/* launch.json in a run directory here: the Job's name and namespace.  Never
 * fails the launch: the job runs without it, with a warning. */
static void record(const struct dt_job *job, const char *log_dir, const char *run_id, const char *name)
{
    struct dt_run_record r;
    char dir[PATH_MAX];
    int rc = dt_run_dir_open(log_dir, job->name, run_id, dir, sizeof dir);
    if (rc == 0) {
        dt_run_record_init(&r, job, dir, run_id);
        snprintf(r.job_id, sizeof r.job_id, "%s", name);
        snprintf(r.namespace_name, sizeof r.namespace_name, "%s", job->kubernetes->namespace_name);
        rc = dt_run_record_write(&r, job);
    }
    if (rc < 0)
        dt_log_warn("kubernetes: no launch record for Job %s (dtrain status cannot name it): %s", name,
                    dt_error_last());
}

/* The few fields of a job that get(), look() and delete_all() read, from a record. */
struct recorded {
    struct dt_kubernetes_spec k;
    struct dt_job job;
};

static void from_record(const struct dt_run_record *rec, struct recorded *out)
{
    memset(out, 0, sizeof *out);
    out->k.namespace_name = (char *)rec->namespace_name;
    out->job.name = (char *)rec->job_id;
    out->job.nodes = out->job.nodes_min = rec->nodes;
    out->job.kubernetes = &out->k;
}

int dt_k8s_status(const struct dt_run_record *rec, struct dt_adapter_state *out)
{
    memset(out, 0, sizeof *out);
    if (!dt_run_record_k8s_name_ok(rec->job_id) || !dt_run_record_k8s_name_ok(rec->namespace_name))
        return dt_error_set(DT_EINVAL, "kubernetes: '%s' in namespace '%s' is no Job name kubectl is given",
                            rec->job_id, rec->namespace_name);
    struct recorded r;
    from_record(rec, &r);
    int st = look(&r.job);
    if (st == -2)
        return dt_error_set(DT_ECONN, "kubernetes: kubectl cannot say how Job %s in namespace %s stands",
                            rec->job_id, rec->namespace_name);
    out->known = true;
    out->active = st == -1;
    snprintf(out->state, sizeof out->state, "%s", st == -1 ? "Running" : st == 0 ? "Complete" : "Failed");
    snprintf(out->where, sizeof out->where, "Kubernetes Job %s in namespace %s", rec->job_id,
             rec->namespace_name);
    return 0;
}

int dt_k8s_cancel(const struct dt_run_record *rec, double wait_s)
{
    if (!dt_run_record_k8s_name_ok(rec->job_id) || !dt_run_record_k8s_name_ok(rec->namespace_name))
        return dt_error_set(DT_EINVAL, "kubernetes: '%s' in namespace '%s' is no Job name kubectl is given",
                            rec->job_id, rec->namespace_name);
    struct recorded r;
    from_record(rec, &r);
    char sel[160];
    snprintf(sel, sizeof sel, "app.kubernetes.io/instance=%s", rec->job_id);
    char *argv[] = {"kubectl", "delete", "job,service,configmap,secret", "-n", (char *)rec->namespace_name,
                    "-l", sel, "--wait=false", NULL};
    int st = run(argv, NULL, 0, NULL);
    /* Only kubectl is asked: a launcher still following the Job sees it gone
     * and ends; no pid from the record is signalled. */
    (void)wait_s;
    if (st != 0)
        return st < 0 ? st
                      : dt_error_set(DT_EIO, "kubernetes: `kubectl delete` of Job %s failed (exit %d; its message "
                                             "is above)", rec->job_id, st);
    return 0;
}

int dt_k8s_resume_check(const struct dt_job *job)
{
    const char *ckpt = job->trainer ? job->trainer->checkpoint.dir : NULL;
    if ((job->kubernetes && job->kubernetes->log_volume) || (ckpt && ckpt[0] == '/'))
        return 0;
    return dt_error_set(DT_EUNSUPPORTED,
                        "scheduler: kubernetes keeps a run's directory in its pods, which end with the Job, "
                        "so nothing of the run is left to continue: set kubernetes.log_volume (a PVC or "
                        "host path the run directories outlive the pods on), or give the trainer an absolute "
                        "checkpoint.dir on a volume the pods mount (kubernetes.volumes)");
}

/* What the pods' discover takes for DTRAIN_K8S_RUN_ID (kubernetes.c). */
static bool is_run_id(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= DT_K8S_RUN_ID_LEN && s[strspn(s, "0123456789abcdef")] == 0;
}

/* What the plan keeps: the manifests kubectl apply reads, and the Job's names. */
struct applied {
    const struct dt_job *job;
    struct dt_job named; /* shallow: the objects' name, to follow them */
    bool detach;
    const char *job_path;
    char *argv[8];
    char *text; /* the Job's manifest, applied first */
    size_t len;
    char log_dir[PATH_MAX], launch_id[DT_K8S_RUN_ID_LEN + 1], run_id[DT_K8S_RUN_ID_LEN + 1], name[96];
};

/* `kubectl apply -o jsonpath={.metadata.uid}` said the Job's uid. */
static int job_uid(const char *out, char *uid, size_t size)
{
    size_t n = out ? strcspn(out, "\n") : 0;
    if (n == 0 || n >= size || strspn(out, "0123456789abcdef-") < n)
        return dt_error_set(DT_EPROTO, "kubernetes: `kubectl apply` printed '%.80s', not the Job's uid",
                            out ? out : "");
    memcpy(uid, out, n);
    uid[n] = 0;
    return 0;
}

/* The Job's ConfigMap, Secret (a fresh token: only ever on kubectl's stdin),
 * Service and PodGroup, owned by the Job: Kubernetes deletes them with it
 * (kubectl delete job, its ttlSecondsAfterFinished). */
static int apply_owned(struct applied *a, const char *uid)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "kubernetes: out of memory");
    struct dt_k8s_render_opts o = {
        .launch_id = a->launch_id, .run_id = a->run_id, .owner_uid = uid, .parts = DT_K8S_PART_REST};
    int rc = dt_k8s_render_with(a->job, a->job_path, &o, m);
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "kubernetes: out of memory");
    char *argv[] = {"kubectl", "apply", "-f", "-", NULL};
    int st = rc ? rc : run(argv, text, len, NULL);
    if (text)
        memset(text, 0, len);
    free(text);
    if (st > 0)
        return dt_error_set(DT_EIO, "kubernetes: `kubectl apply -f -` of the Job's ConfigMap, Secret and Service "
                                    "failed (exit %d; its message is above)", st);
    return st;
}

/* The Job is applied but its objects are not: it must not wait for them. */
static void delete_job(const struct applied *a)
{
    char *argv[] = {"kubectl", "delete", "job", (char *)a->name, "-n", a->job->kubernetes->namespace_name,
                    "--wait=false", NULL};
    if (run(argv, NULL, 0, NULL) != 0)
        dt_log_error("kubernetes: `kubectl delete job %s -n %s` failed: delete it yourself", a->name,
                     a->job->kubernetes->namespace_name);
}

/* After `kubectl apply` of the Job: its objects owned by its uid, the
 * launch's record, then the Job followed to its end (or left, --detach). */
static int after_apply(void *ctx, const struct dt_adapter_ran *ran)
{
    struct applied *a = ctx;
    char uid[64];
    int rc = 0;
    if (ran->status < 0)
        rc = dt_error_prefix("kubernetes");
    else if (ran->status != 0)
        rc = dt_error_set(DT_EIO, "kubernetes: `kubectl apply -f -` of the Job failed (exit %d; its message is "
                                  "above)", ran->status);
    else if ((rc = job_uid(ran->out, uid, sizeof uid)) == 0 && (rc = apply_owned(a, uid)) != 0)
        delete_job(a);
    if (rc) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 2;
    }
    record(a->job, a->log_dir, a->run_id, a->name);
    return a->detach ? detached(&a->named) : follow_signals(&a->named);
}

static void applied_free(void *ctx)
{
    struct applied *a = ctx;
    if (a->text)
        memset(a->text, 0, a->len);
    free(a->text);
    free(a);
}

/* A fresh run id names this launch's objects: the previous launch's Job,
 * immutable, may still exist under the job's own name or its. */
static int name_launch(struct applied *a, const char *resume_id)
{
    char token[DT_TOKEN_LEN + 1] = "";
    if (dt_token_make(token))
        return dt_error_prefix("kubernetes: making the run id");
    snprintf(a->launch_id, sizeof a->launch_id, "%.*s", DT_K8S_RUN_ID_LEN, token);
    memset(token, 0, sizeof token);
    const char *run_id = resume_id ? resume_id : a->launch_id;
    if (!is_run_id(run_id))
        return dt_error_set(DT_EINVAL,
                            "--resume: run id '%s' is not one a Kubernetes launch makes (at most %d hex "
                            "digits), so the pods cannot be given it",
                            run_id, DT_K8S_RUN_ID_LEN);
    snprintf(a->run_id, sizeof a->run_id, "%s", run_id);
    dt_k8s_object_name(a->job, a->launch_id, a->name, sizeof a->name);
    a->named = *a->job;
    a->named.name = a->name;
    return 0;
}

int dt_k8s_plan(const struct dt_job *job, const struct dt_adapter_launch *opts, struct dt_adapter_plan *out)
{
    if (!dt_fs_on_path("kubectl"))
        return dt_error_set(
            DT_EUNSUPPORTED,
            "kubectl is not on PATH, so dtrain cannot submit the job. Render the manifests "
            "and apply them where kubectl works:\n  dtrain render kubernetes %s > job.k8s.yaml\n"
            "  kubectl apply -f job.k8s.yaml",
            job->path);
    struct applied *a = calloc(1, sizeof *a);
    if (!a)
        return dt_error_set(DT_ENOMEM, "kubernetes: out of memory");
    *a = (struct applied){.job = job, .detach = opts->detach, .job_path = job->path};
    out->ctx = a;
    out->release = applied_free;
    snprintf(a->log_dir, sizeof a->log_dir, "%s", opts->log_dir ? opts->log_dir : job->log_dir);
    int rc = name_launch(a, opts->run_id);
    if (rc)
        return rc;
    /* Everything is rendered (and so checked) before anything is applied. */
    struct dt_k8s_render_opts all = {.launch_id = a->launch_id, .run_id = a->run_id, .token = DT_K8S_DRY_TOKEN},
                              job_only = {.launch_id = a->launch_id, .run_id = a->run_id, .parts = DT_K8S_PART_JOB};
    FILE *null = fopen("/dev/null", "w");
    rc = null ? dt_k8s_render_with(job, job->path, &all, null) : 0;
    if (null)
        fclose(null);
    FILE *m = rc ? NULL : open_memstream(&a->text, &a->len);
    if (!rc && !m)
        return dt_error_set(DT_ENOMEM, "kubernetes: out of memory");
    if (!rc)
        rc = dt_k8s_render_with(job, job->path, &job_only, m);
    if (m && fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "kubernetes: out of memory");
    if (rc)
        return rc;
    /* The Job first: its uid makes it the owner of the objects applied after it (after_apply). */
    char *argv[] = {"kubectl", "apply", "-f", "-", "-o", "jsonpath={.metadata.uid}", NULL};
    memcpy(a->argv, argv, sizeof argv);
    out->argv = a->argv;
    out->in = a->text;
    out->in_len = a->len;
    out->io[0] = DT_PLAN_CAPTURE;
    out->finish = after_apply;
    return 0;
}

/* --dry-run: what the launch applies, in its order, with what only it
 * knows shown as placeholders (the Job's uid, the token). */
int dt_k8s_dry_run(const struct dt_job *job, const struct dt_adapter_launch *opts, FILE *out)
{
    struct applied a = {.job = job};
    int rc = name_launch(&a, opts->run_id);
    if (rc)
        return rc;
    struct dt_k8s_render_opts first = {.launch_id = a.launch_id, .run_id = a.run_id, .parts = DT_K8S_PART_JOB},
                              then = {.launch_id = a.launch_id,
                                      .run_id = a.run_id,
                                      .owner_uid = DT_K8S_DRY_UID,
                                      .token = DT_K8S_DRY_TOKEN,
                                      .parts = DT_K8S_PART_REST};
    fprintf(out, "# `kubectl apply -f - -o jsonpath={.metadata.uid}` of the Job (the run id %s is made anew by\n"
                 "# each launch):\n", a.launch_id);
    rc = dt_k8s_render_with(job, job->path, &first, out);
    if (rc == 0) {
        fprintf(out, "# then `kubectl apply -f -` of the objects the Job owns (its uid, known once it is applied;\n"
                     "# a fresh job token in the Secret):\n");
        rc = dt_k8s_render_with(job, job->path, &then, out);
    }
    return rc;
}
