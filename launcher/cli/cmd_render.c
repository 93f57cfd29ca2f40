/* cmd_render.c - `dtrain render <scheduler> job.yaml`: what to submit by hand.
 *
 * Hands the loaded job to the scheduler adapter's render (an sbatch script,
 * Kubernetes manifests, an mpirun line) and writes it to stdout or -o FILE,
 * so a user can read, keep or edit exactly what `dtrain launch` would
 * submit.  FILE is private to the user (0600): Kubernetes manifests carry
 * the job token.  A scheduler with no adapter built in, one with nothing to
 * render (local), or a spec for another scheduler is a clear error with exit
 * status 2; the spec is read and checked as validate and launch read it
 * (cli_spec.c).
 *
 * Not for submitting (dtrain launch) or for what goes into the output (the adapters).
 */
#include "launcher/cli/cli.h"
#include "spec/jobspec.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain render SCHEDULER JOB.yaml [-o FILE] [--set KEY.PATH=VALUE ...]\n\n"
            "Writes what would be submitted for JOB.yaml under SCHEDULER (slurm: an sbatch script,\n"
            "kubernetes or k8s: manifests, mpirun: the command line; jobset: the Kubernetes manifests\n"
            "with a JobSet around the Job) to stdout or FILE, without submitting anything.  The spec\n"
            "must say scheduler: SCHEDULER (kubernetes for jobset; or add --set scheduler=...); it is\n"
            "checked as `dtrain validate` and `dtrain launch` check it.\n"
            "A spec with ${VAR} values or --set is rendered to read a copy of the job as given,\n"
            "<log_dir>/.dtrain-<name>-<pid>.yaml (named on stderr).\n\n"
            "  -o, --output FILE   write to FILE instead of stdout\n"
            "  --set KEY.PATH=VALUE  override a key as if the file said it (repeatable)\n");
}

/* -o FILE is written 0600 (made so when it was there with another mode):
 * Kubernetes manifests hold the job's token in their Secret, and anyone who
 * reads it can use the job's coordinator.  Never through a symbolic link. */
static FILE *open_private(const char *out)
{
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
        dt_error_set_errno(DT_EIO, errno, "cannot write %s", out);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        dt_error_set_errno(DT_EIO, errno, "cannot write %s", out);
        close(fd);
    }
    return f;
}

/* Render targets that are a form of an adapter's output, not a scheduler of their own. */
static const struct {
    const char *name;
    int (*render)(const struct dt_job *job, const char *job_path, FILE *out);
} forms[] = {{"jobset", dt_k8s_render_jobset}};

static int render_to(const struct dt_adapter *ad, const char *sched, const struct dt_job *job, const char *path,
                     const char *out)
{
    FILE *f = out ? open_private(out) : stdout;
    if (!f)
        return -1;
    int (*render)(const struct dt_job *, const char *, FILE *) = ad->render;
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        if (strcmp(sched, forms[i].name) == 0)
            render = forms[i].render;
    int rc = render(job, path, f);
    if (out && fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "writing %s", out);
    else if (!out && fflush(stdout) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "writing the rendered job to stdout");
    return rc;
}

static int parse_args(int argc, char **argv, struct dt_cli_spec *s, const char **sched, const char **path,
                      const char **out)
{
    static const struct option own[] = {{"output", required_argument, NULL, 'o'}, {0}};
    static const struct option *const tables[] = {own, dt_cli_spec_options, NULL};
    struct dt_cli_opts o;
    dt_cli_opts_init(&o, "render", "o:", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&o, argc, argv, &v)) != -1;) {
        int taken = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : dt_cli_spec_opt(s, ch, v);
        if (taken == DT_EXIT_REFUSED)
            return taken;
        if (taken)
            continue;
        if (ch == 'o')
            *out = v;
        else if (!*sched)
            *sched = v;
        else if (!*path)
            *path = v;
        else
            return dt_cli_usage_error("render", "unexpected argument '%s'", v);
    }
    return 0;
}

static int run(int argc, char **argv)
{
    const char *sched = NULL, *path = NULL, *out = NULL;
    struct dt_cli_spec s = {.cmd = "render"};
    int prc = parse_args(argc, argv, &s, &sched, &path, &out);
    if (prc)
        return prc;
    if (!sched || !path)
        return dt_cli_usage_error("render", "expected a scheduler and a job spec, e.g. `dtrain render slurm job.yaml`");
    const struct dt_adapter *ad = dt_adapter_by_name(strcmp(sched, "jobset") ? sched : "kubernetes");
    if (!ad) {
        fprintf(stderr, "dtrain render: no scheduler adapter named '%s' is built into this dtrain (%s)\n", sched,
                dt_version);
        return 2;
    }
    if (!ad->render) {
        fprintf(stderr, "dtrain render: scheduler %s has nothing to render: `dtrain launch` runs such a job "
                        "directly\n", ad->name);
        return 2;
    }
    struct dt_job *job = NULL;
    int rc = dt_cli_spec_load(&s, path, NULL, ad, &job);
    if (rc)
        return rc;
    if (job->scheduler != ad->scheduler) {
        fprintf(stderr,
                "dtrain render: %s: scheduler: %s, but `dtrain render %s` writes what a scheduler: %s job "
                "submits: set scheduler: %s in the spec, or add --set scheduler=%s\n",
                path, dt_scheduler_name(job->scheduler), sched, ad->name, ad->name, ad->name);
        dt_job_free(job);
        return DT_EXIT_REFUSED;
    }
    char copy[4096];
    rc = dt_cli_spec_hand_on(job, NULL, copy, sizeof copy);
    if (rc == 0 && copy[0])
        fprintf(stderr, "dtrain render: the job as given (${VAR}, --set) is in %s, which the output reads\n", copy);
    if (rc == 0)
        rc = render_to(ad, sched, job, job->path, out);
    dt_job_free(job);
    if (rc < 0) {
        fprintf(stderr, "dtrain render: %s\n", dt_error_last());
        return rc == DT_EINVAL || rc == DT_EUNSUPPORTED ? DT_EXIT_REFUSED : DT_EXIT_FAILED;
    }
    return DT_EXIT_OK;
}

const struct dt_cli_command dt_cli_render = {
    .name = "render",
    .summary = "write what would be submitted for a scheduler (sbatch script, manifests, mpirun line)",
    .run = run,
    .usage = usage,
};
