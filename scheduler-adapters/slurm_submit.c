/* slurm_submit.c - `dtrain launch job.yaml` with scheduler: slurm.
 *
 * Renders the job's sbatch script into the log directory, makes the job
 * token, and runs `sbatch --parsable` with the token, the dtrain binary
 * (DTRAIN), the log directory (DTRAIN_LOG_DIR) and --grace-period
 * (DTRAIN_GRACE_PERIOD, which the script hands to each agent) in sbatch's environment,
 * which Slurm passes to the batch script and srun to every agent (sbatch's
 * default --export=ALL): the token is never on a command line.  The job's
 * --output/--error files go to the log directory; then slurm_follow.c
 * streams them and waits for the job's end, whose exit status is returned.
 *
 * Not for the agents' side (slurm_discover.c) or the script's text (slurm_render.c).
 */
#include "scheduler-adapters/slurm.h"

#include "base/error.h"
#include "base/log.h"
#include "base/args.h"
#include "base/run_dir.h"
#include "spec/token.h"
#include "base/fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* The log directory, absolute: the batch script runs in the submit directory, but say what we mean. */
static int log_dir_abs(const struct dt_job *job, const struct dt_adapter_launch *o, char *out, size_t size)
{
    const char *d = o->log_dir ? o->log_dir : job->log_dir;
    int rc = dt_fs_mkdir_p(d, 0755, "log directory");
    if (rc < 0)
        return rc;
    if (!realpath(d, out) || strlen(out) >= size)
        return dt_error_set_errno(DT_EIO, errno, "cannot find the absolute path of the log directory %s", d);
    return 0;
}

/* The script, kept in the log directory as <name>-submit-XXXXXX.sbatch (renamed after sbatch). */
static int write_script(const struct dt_job *job, const char *job_abs, const char *log_dir, char *path,
                        size_t size)
{
    if (snprintf(path, size, "%s/%s-submit-XXXXXX.sbatch", log_dir, job->name) >= (int)size)
        return dt_error_set(DT_EINVAL, "log directory path is too long: %s", log_dir);
    int fd = mkstemps(path, 7);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s", path);
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return dt_error_set_errno(DT_EIO, errno, "cannot write %s", path);
    }
    int rc = dt_slurm_render(job, job_abs, f);
    if (fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot write %s", path);
    return rc;
}

/* This environment with DTRAIN, DTRAIN_LOG_DIR, DTRAIN_JOB_TOKEN, DTRAIN_GRACE_PERIOD
 * and (so the agents are as quiet or talkative as the launcher) DTRAIN_LOG replaced. */
static char **sbatch_env(const char *dtrain, const char *log_dir, const char *token, double grace_s)
{
    static const char *const ours[] = {
        "DTRAIN=", "DTRAIN_LOG_DIR=", "DTRAIN_JOB_TOKEN=", "DTRAIN_LOG=", "DTRAIN_GRACE_PERIOD=", NULL};
    static const char *const levels[] = {"debug", "info", "warn", "error", "error"};
    static char v[5][PATH_MAX + 32];
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 6, sizeof *env);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        bool mine = false;
        for (int j = 0; ours[j]; j++)
            mine |= strncmp(environ[i], ours[j], strlen(ours[j])) == 0;
        if (!mine)
            env[k++] = environ[i];
    }
    snprintf(v[0], sizeof v[0], "DTRAIN=%s", dtrain);
    snprintf(v[1], sizeof v[1], "DTRAIN_LOG_DIR=%s", log_dir);
    snprintf(v[2], sizeof v[2], "DTRAIN_LOG=%s", levels[dt_log_get_level()]);
    env[k++] = v[0];
    env[k++] = v[1];
    env[k++] = v[2];
    if (token) {
        snprintf(v[3], sizeof v[3], "DTRAIN_JOB_TOKEN=%s", token);
        env[k++] = v[3];
    }
    if (grace_s > 0) {
        snprintf(v[4], sizeof v[4], "DTRAIN_GRACE_PERIOD=%g", grace_s);
        env[k++] = v[4];
    }
    return env;
}

/* sbatch --parsable: "<id>" or "<id>;<cluster>". */
static int sbatch(char **env, const char *script, const char *out_pat, const char *err_pat, char *id,
                  size_t size)
{
    char out[512], err[2048], o_arg[PATH_MAX + 16], e_arg[PATH_MAX + 16];
    snprintf(o_arg, sizeof o_arg, "--output=%s", out_pat);
    snprintf(e_arg, sizeof e_arg, "--error=%s", err_pat);
    char *argv[] = {"sbatch", "--parsable", o_arg, e_arg, (char *)script, NULL};
    int rc = dt_slurm_cmd(argv, env, 60, out, sizeof out, err, sizeof err);
    if (rc < 0)
        return rc;
    err[strcspn(err, "\n")] = 0;
    if (rc != 0)
        return dt_error_set(DT_EIO, "sbatch refused the job (exit status %d): %s", rc,
                            err[0] ? err : "(no message)");
    out[strcspn(out, ";\n")] = 0;
    if (!out[0] || strspn(out, "0123456789_") != strlen(out) || strlen(out) >= size)
        return dt_error_set(DT_EPROTO, "sbatch --parsable printed '%s', not a job id", out);
    snprintf(id, size, "%s", out);
    return 0;
}

struct submit_paths {
    char log_dir[PATH_MAX], job[PATH_MAX], script[PATH_MAX], out_pat[PATH_MAX], err_pat[PATH_MAX];
};

static int prepare(const struct dt_job *job, const struct dt_adapter_launch *o, struct submit_paths *p,
                   unsigned char **show, int *world)
{
    if (!realpath(job->path, p->job))
        return dt_error_set_errno(DT_EIO, errno, "cannot find the absolute path of %s", job->path);
    int rc = log_dir_abs(job, o, p->log_dir, sizeof p->log_dir);
    if (rc < 0)
        return rc;
    *world = job->nodes * (job->nproc_per_node > 0 ? job->nproc_per_node : 64);
    if (o->ranks) {
        if (!(*show = malloc((size_t)*world)))
            return dt_error_set(DT_ENOMEM, "out of memory");
        if ((rc = dt_args_ranks(o->ranks, *world, *show)) < 0)
            return rc;
    }
    snprintf(p->out_pat, sizeof p->out_pat, "%s/%s-%%j.out", p->log_dir, job->name);
    snprintf(p->err_pat, sizeof p->err_pat, "%s/%s-%%j.err", p->log_dir, job->name);
    return write_script(job, p->job, p->log_dir, p->script, sizeof p->script);
}

int dt_slurm_submit(const struct dt_job *job, const struct dt_adapter_launch *o)
{
    struct submit_paths p;
    unsigned char *show = NULL;
    int world = 0;
    if (prepare(job, o, &p, &show, &world) < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        free(show);
        return 2;
    }
    char self[PATH_MAX], token[65] = "", id[64];
    dt_fs_self_path(self, sizeof self);
    int rc = job->rendezvous.auth == DT_AUTH_NONE ? 0 : dt_token_make(token);
    char **env = rc == 0 ? sbatch_env(o->dtrain_path ? o->dtrain_path : self, p.log_dir,
                                      token[0] ? token : NULL, o->grace_s)
                         : NULL;
    if (rc == 0 && !env)
        rc = dt_error_set(DT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = sbatch(env, p.script, p.out_pat, p.err_pat, id, sizeof id);
    free(env);
    if (rc < 0) {
        fprintf(stderr, "dtrain launch: %s (script: %s)\n", dt_error_last(), p.script);
        free(show);
        return rc == DT_ENOTFOUND ? 2 : 1;
    }
    char script[PATH_MAX + 32], out[PATH_MAX + 32], err[PATH_MAX + 32], run_dir[PATH_MAX + 128];
    snprintf(script, sizeof script, "%s/%s-%s.sbatch", p.log_dir, job->name, id);
    if (rename(p.script, script) != 0)
        snprintf(script, sizeof script, "%s", p.script);
    snprintf(out, sizeof out, "%s/%s-%s.out", p.log_dir, job->name, id);
    snprintf(err, sizeof err, "%s/%s-%s.err", p.log_dir, job->name, id);
    if (dt_run_dir_path(p.log_dir, job->name, id, run_dir, sizeof run_dir) < 0)
        snprintf(run_dir, sizeof run_dir, "%s", p.log_dir);
    dt_log_info("job %s submitted as Slurm job %s (%d node%s; script %s); Ctrl-C cancels it", job->name, id,
                job->nodes, job->nodes == 1 ? "" : "s", script);
    struct dt_slurm_follow f = {.job_id = id,
                                .name = job->name,
                                .out_path = out,
                                .err_path = err,
                                .run_dir = run_dir,
                                .show = show,
                                .world = world,
                                .start_mono = o->start_mono};
    int status = dt_slurm_follow(&f);
    free(show);
    return status;
}
