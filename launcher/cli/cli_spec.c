/* cli_spec.c - the job spec on the command line: --set, every problem said, the adapter's check.
 *
 * validate, launch, render and run read a spec the same way, so they agree
 * on what is wrong with it: dt_job_load_with (${VAR}, overrides, every
 * problem in file order), then the check of the scheduler adapter that would
 * render or submit it (adapter.h), which holds what the spec alone makes
 * render or submit refuse.  A spec that is not the file as written is handed
 * on as a printed copy: render's beside the script it writes, launch's in a
 * private directory of its own, read once at submission.
 *
 * Not for the rules themselves (spec/ and the adapters' check).
 */
#include "launcher/cli/cli.h"

#include "base/error.h"
#include "base/fs.h"
#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const struct option dt_cli_spec_options[] = {{"set", required_argument, NULL, DT_CLI_OPT_SET}, {0}};

int dt_cli_spec_opt(struct dt_cli_spec *s, int id, const char *v)
{
    if (id != DT_CLI_OPT_SET)
        return 0;
    if (!strchr(v, '=') || v[0] == '=')
        return dt_cli_usage_error(s->cmd, "--set '%s': expected KEY.PATH=VALUE, like --set trainer.steps=100", v);
    if (s->n_set == DT_CLI_MAX_SET)
        return dt_cli_usage_error(s->cmd, "more than %d --set options", DT_CLI_MAX_SET);
    s->set[s->n_set++] = (char *)v;
    return 1;
}

/* The option a problem's line came from (dt_cli_spec.line_origin): the
 * length of its "PATH:LINE:COL: " prefix, and the option; 0 for none. */
static size_t origin_of(const struct dt_cli_spec *s, const char *path, const char *line, const char **opt)
{
    size_t plen = path ? strlen(path) : 0;
    if (!s->line_origin || !plen || strncmp(line, path, plen) != 0 || line[plen] != ':')
        return 0;
    char *end;
    long n = strtol(line + plen + 1, &end, 10);
    if (end == line + plen + 1 || n < 1 || n >= s->n_line_origin || !s->line_origin[n])
        return 0;
    while (*end == ':' || (*end >= '0' && *end <= '9'))
        end++;
    *opt = s->line_origin[n];
    return (size_t)(end - line) + (*end == ' ');
}

/* validate's lines are the messages themselves (file:line:col first, as compilers
 * write them); the other commands say who is speaking. */
static void say(const struct dt_cli_spec *s, const char *path, const char *lines)
{
    const char *who = strcmp(s->cmd, "validate") == 0 ? "" : s->cmd;
    for (const char *p = lines; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *opt = NULL;
        size_t skip = origin_of(s, path, p, &opt);
        if (skip && skip <= n)
            fprintf(stderr, "dtrain %s: %s: %.*s\n", who, opt, (int)(n - skip), p + skip);
        else if (*who)
            fprintf(stderr, "dtrain %s: %.*s\n", who, (int)n, p);
        else
            fprintf(stderr, "%.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}

int dt_cli_spec_load(const struct dt_cli_spec *s, const char *path, const char *text,
                     const struct dt_adapter *ad, struct dt_job **job)
{
    char *problems = NULL;
    struct dt_job_load_opts o = {.set = s->set, .n_set = s->n_set, .problems = &problems};
    int rc = text ? dt_job_load_string_with(text, strlen(text), path, &o, job) : dt_job_load_with(path, &o, job);
    if (rc < 0) {
        say(s, path, problems ? problems : dt_error_last());
        free(problems);
        return DT_EXIT_REFUSED;
    }
    if (s->one_node_of_several)
        return 0;
    if (!ad)
        ad = dt_adapter_for((*job)->scheduler);
    if (!ad)
        rc = dt_error_set(DT_EUNSUPPORTED, "%s: scheduler: %s is not built into this version of dtrain (%s)",
                          (*job)->path, dt_scheduler_name((*job)->scheduler), dt_version);
    else if (ad->check)
        rc = ad->check(*job);
    if (rc < 0) {
        say(s, NULL, dt_error_last());
        dt_job_free(*job);
        *job = NULL;
        return DT_EXIT_REFUSED;
    }
    return 0;
}

static int print_job(void *ctx, FILE *f)
{
    dt_job_print(ctx, f);
    return 0;
}

int dt_cli_spec_hand_on(struct dt_job *job, const char *log_dir, char *written, size_t size)
{
    written[0] = '\0';
    if (!job->derived)
        return 0;
    const char *dir = log_dir ? log_dir : job->log_dir;
    int rc = dt_fs_mkdir_p(dir, 0755, "the log directory");
    char path[4096];
    if (rc == 0 && (size_t)snprintf(path, sizeof path, "%s/.dtrain-%s-%ld.yaml", dir, job->name, (long)getpid()) >=
                       sizeof path)
        rc = dt_error_set(DT_EINVAL, "log directory path is too long: %s", dir);
    /* The copy may hold what ${VAR} read from the environment: only its owner reads it. */
    mode_t old = umask(077);
    if (rc == 0)
        rc = dt_fs_write_atomic(path, false, print_job, job);
    umask(old);
    if (rc < 0)
        return dt_error_prefix("%s: writing the job as given (${VAR}, --set) for the nodes and ranks", job->path);
    char *copy = strdup(path);
    if (!copy)
        return dt_error_set(DT_ENOMEM, "out of memory");
    free(job->path);
    job->path = copy;
    snprintf(written, size, "%s", path);
    return 0;
}

int dt_cli_spec_hand_on_private(struct dt_job *job, char *written, size_t size)
{
    written[0] = '\0';
    if (!job->derived)
        return 0;
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4096 + 160];
    if ((size_t)snprintf(dir, sizeof dir, "%s/dtrain-spec-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= sizeof dir)
        return dt_error_set(DT_EINVAL, "TMPDIR is too long: %s", tmp);
    if (!mkdtemp(dir)) /* 0700, and a name no one could have taken before */
        return dt_error_set_errno(DT_EIO, errno,
                                  "%s: cannot make a private directory for the job as given "
                                  "(${VAR}, --set): %s",
                                  job->path, dir);
    snprintf(path, sizeof path, "%s/%.128s.yaml", dir, job->name);
    mode_t old = umask(077);
    int rc = dt_fs_write_atomic(path, false, print_job, job);
    umask(old);
    char *copy = rc == 0 ? strdup(path) : NULL;
    if (!copy) {
        unlink(path);
        rmdir(dir);
        return rc < 0 ? dt_error_prefix("%s: writing the job as given (${VAR}, --set)", job->path)
                      : dt_error_set(DT_ENOMEM, "out of memory");
    }
    free(job->path);
    job->path = copy;
    snprintf(written, size, "%s", path);
    return 0;
}

void dt_cli_spec_hand_on_done(const char *written)
{
    if (!written[0])
        return;
    unlink(written);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", written);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        rmdir(dir);
    }
}
