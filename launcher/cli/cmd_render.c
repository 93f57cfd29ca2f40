/* cmd_render.c - `dtrain render <scheduler> job.yaml`: what to submit by hand.
 *
 * Hands the loaded job to the scheduler adapter's render (an sbatch script,
 * Kubernetes manifests, an mpirun line) and writes it to stdout or -o FILE,
 * so a user can read, keep or edit exactly what `dtrain launch` would
 * submit.  FILE is private to the user (0600): Kubernetes manifests carry
 * the job token.  The scheduler is the one named on the command line: a
 * spec written for another one is read as if it said `--set
 * scheduler=<that>` (so the slurm: and kubernetes: sections of one spec
 * serve render), and checked as validate and launch check it
 * (cli_spec.c).  A scheduler with no adapter built in, or one with nothing
 * to render (local), is a clear error with exit status 2.
 *
 * What is rendered never depends on a file render leaves behind: a spec
 * that is not the file as written (${VAR}, --set, another scheduler) travels
 * inside the output (the sbatch script's heredoc, the ConfigMap, the lines
 * before the mpirun command), which the adapters write from dt_job_print.
 *
 * Not for submitting (dtrain launch) or for what goes into the output (the adapters).
 */
#include "launcher/cli/cli.h"
#include "spec/jobspec.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"

#include <errno.h>
#include <stdbool.h>
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
            "with a JobSet around the Job) to stdout or FILE, without submitting anything.  A spec\n"
            "written for another scheduler is rendered for SCHEDULER (as with --set scheduler=...),\n"
            "using its section for SCHEDULER; it is checked as `dtrain validate` and `dtrain launch`\n"
            "check it.  A spec with ${VAR} values or --set, or for another scheduler, travels inside\n"
            "the output as it was resolved (the sbatch script's heredoc, the ConfigMap), so the\n"
            "output reads no file but the ones it names.\n\n"
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

/* The spec as `ad` renders it: as written when it says that scheduler, else
 * read with one more override, scheduler=<ad's>, after the user's (the
 * named scheduler wins), so the spec's checks (the join timeout, setup:,
 * nodes: MIN:MAX) are that scheduler's.  Problems are printed by the load. */
static int load_for(struct dt_cli_spec *s, const char *path, const struct dt_adapter *ad, struct dt_job **job)
{
    struct dt_job_load_opts quiet = {.set = s->set, .n_set = s->n_set};
    struct dt_job *peek = NULL;
    bool same = dt_job_load_with(path, &quiet, &peek) == 0 && peek->scheduler == ad->scheduler;
    dt_job_free(peek);
    static char assign[64];
    if (!same) {
        if (s->n_set == DT_CLI_MAX_SET)
            return dt_cli_usage_error(s->cmd, "more than %d --set options", DT_CLI_MAX_SET - 1);
        snprintf(assign, sizeof assign, "scheduler=%s", ad->name);
        s->set[s->n_set++] = assign;
    }
    return dt_cli_spec_load(s, path, NULL, ad, job);
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
    int rc = load_for(&s, path, ad, &job);
    if (rc)
        return rc;
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
