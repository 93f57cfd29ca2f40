/* run_record.c - launch.json and job.yaml in a run directory (see run_record.h).
 *
 * Not for reading what the ranks wrote (launcher/cli/run_info.c).
 */
#include "scheduler-adapters/run_record.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/run_dir.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECORD_MAX_BYTES (64 * 1024)

long long dt_run_record_pid_start(int pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    /* The command name may hold spaces and ')': fields count from the last ')'. */
    char *p = strrchr(line, ')');
    if (!p)
        return -1;
    p++;
    for (int field = 2; field < 21 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoll(p + 1, NULL, 10) : -1;
}

void dt_run_record_init(struct dt_run_record *r, const struct dt_job *job, const char *run_dir,
                        const char *run_id)
{
    memset(r, 0, sizeof *r);
    snprintf(r->scheduler, sizeof r->scheduler, "%s", dt_scheduler_name(job->scheduler));
    snprintf(r->name, sizeof r->name, "%s", job->name);
    snprintf(r->run_id, sizeof r->run_id, "%s", run_id);
    snprintf(r->run_dir, sizeof r->run_dir, "%s", run_dir);
    if (!realpath(job->path, r->spec))
        snprintf(r->spec, sizeof r->spec, "%s", job->path);
    gethostname(r->host, sizeof r->host - 1);
    r->pid = (int)getpid();
    r->pid_start = dt_run_record_pid_start(r->pid);
    r->nodes = job->nodes;
    r->nproc_per_node = job->nproc_per_node;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->started_unix = (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- writing ------------------------------------------------------------- */

static int put_spec(void *ctx, FILE *f)
{
    const struct dt_job *job = ctx;
    fputs("# The spec as `dtrain launch` ran it (", f);
    dt_adapter_put_comment(f, job->path); /* a path's newline must not end the comment */
    fputs("), every default filled in.\n", f);
    dt_job_print(job, f);
    return ferror(f) ? dt_error_set(DT_EIO, "cannot write the spec snapshot") : 0;
}

/* launch.json, one member a line (readers such as tests and scripts grep it); started_unix to
 * the millisecond: 13 significant digits hold seconds since 1970 to 2286 with three decimals. */
static int put_record(void *ctx, FILE *f)
{
    const struct dt_run_record *r = ctx;
    const char *const keys[] = {"scheduler", "name", "run_id", "run_dir",
                                "spec",      "host", "job_id", "namespace"};
    const char *const values[] = {r->scheduler, r->name, r->run_id, r->run_dir,
                                  r->spec,      r->host, r->job_id, r->namespace_name};
    json_t *o = json_object();
    int bad = !o;
    for (size_t i = 0; !bad && i < sizeof keys / sizeof *keys; i++)
        bad = json_object_set_new(o, keys[i], dt_json_str(values[i]));
    if (!bad)
        bad = json_object_set_new(o, "pid", json_integer(r->pid)) ||
              json_object_set_new(o, "pid_start", json_integer(r->pid_start)) ||
              json_object_set_new(o, "nodes", json_integer(r->nodes)) ||
              json_object_set_new(o, "nproc_per_node", json_integer(r->nproc_per_node)) ||
              json_object_set_new(o, "started_unix", json_real(round(r->started_unix * 1e3) / 1e3)) ||
              json_object_set_new(o, "version", json_integer(1));
    if (!bad)
        bad = json_dumpf(o, f, JSON_INDENT(2) | JSON_REAL_PRECISION(13)) != 0 || fputc('\n', f) == EOF;
    json_decref(o);
    return bad || ferror(f) ? dt_error_set(DT_EIO, "cannot write the launch record") : 0;
}

static int write_private(const char *dir, const char *file, dt_fs_write_fn fn, void *ctx)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    mode_t old = umask(0077); /* DT_RUN_DIR_FILE_MODE: what a run directory holds is its user's */
    int rc = dt_fs_write_atomic(path, false, fn, ctx);
    umask(old);
    return rc < 0 ? dt_error_prefix("%s", path) : 0;
}

int dt_run_record_write(const struct dt_run_record *r, const struct dt_job *job)
{
    int rc = write_private(r->run_dir, DT_RUN_RECORD_SPEC, put_spec, (void *)job);
    return rc ? rc : write_private(r->run_dir, DT_RUN_RECORD_FILE, put_record, (void *)r);
}

int dt_run_record_begin(const struct dt_job *job, const char *log_dir, const char *run_id, const char *job_id,
                        struct dt_run_record *r)
{
    char dir[PATH_MAX];
    int rc = dt_run_dir_open(log_dir, job->name, run_id, dir, sizeof dir);
    if (rc < 0)
        return rc;
    dt_run_record_init(r, job, dir, run_id);
    snprintf(r->job_id, sizeof r->job_id, "%s", job_id ? job_id : "");
    return dt_run_record_write(r, job);
}

/* --- reading ------------------------------------------------------------- */

static void get_str(const json_t *o, const char *key, char *out, size_t size)
{
    const char *s = json_string_value(json_object_get(o, key));
    snprintf(out, size, "%s", s ? s : "");
}

static int get_int(const json_t *o, const char *key)
{
    double v;
    return dt_json_get_num(o, key, &v) ? (int)v : 0;
}

int dt_run_record_read(const char *run_dir, struct dt_run_record *r)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", run_dir, DT_RUN_RECORD_FILE);
    json_t *o = NULL;
    int rc = dt_json_load_file(path, RECORD_MAX_BYTES, &o);
    if (rc < 0)
        return rc;
    memset(r, 0, sizeof *r);
    get_str(o, "scheduler", r->scheduler, sizeof r->scheduler);
    get_str(o, "name", r->name, sizeof r->name);
    get_str(o, "run_id", r->run_id, sizeof r->run_id);
    get_str(o, "run_dir", r->run_dir, sizeof r->run_dir);
    get_str(o, "spec", r->spec, sizeof r->spec);
    get_str(o, "host", r->host, sizeof r->host);
    get_str(o, "job_id", r->job_id, sizeof r->job_id);
    get_str(o, "namespace", r->namespace_name, sizeof r->namespace_name);
    r->pid = get_int(o, "pid");
    r->nodes = get_int(o, "nodes");
    r->nproc_per_node = get_int(o, "nproc_per_node");
    json_t *ps = json_object_get(o, "pid_start");
    r->pid_start = json_is_integer(ps) ? json_integer_value(ps) : -1;
    dt_json_get_num(o, "started_unix", &r->started_unix);
    json_decref(o);
    if (!r->scheduler[0] || !r->run_dir[0])
        return dt_error_set(DT_EPROTO, "%s: no scheduler or run_dir in it", path);
    return 0;
}

bool dt_run_record_launcher_alive(const struct dt_run_record *r)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (r->pid <= 0 || strcmp(host, r->host) != 0)
        return false;
    if (kill(r->pid, 0) != 0 && errno != EPERM)
        return false;
    return r->pid_start < 0 || dt_run_record_pid_start(r->pid) == r->pid_start;
}

/* --- a launcher that hosts its job --------------------------------------- */

void dt_run_record_launcher_state(const struct dt_run_record *r, struct dt_adapter_state *out)
{
    memset(out, 0, sizeof *out);
    out->known = true;
    out->active = dt_run_record_launcher_alive(r);
    snprintf(out->state, sizeof out->state, "%s", out->active ? "running" : "ended");
    snprintf(out->where, sizeof out->where, "dtrain launch pid %d on %s", r->pid, r->host);
}

static bool gone_within(const struct dt_run_record *r, double wait_s)
{
    struct timespec tick = {0, 50 * 1000 * 1000};
    for (double t = 0; t < wait_s; t += 0.05) {
        if (!dt_run_record_launcher_alive(r))
            return true;
        nanosleep(&tick, NULL);
    }
    return !dt_run_record_launcher_alive(r);
}

int dt_run_record_stop_launcher(const struct dt_run_record *r, double wait_s)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (strcmp(host, r->host) != 0)
        return dt_error_set(DT_EUNSUPPORTED, "%s was launched on %s (pid %d), not here (%s): cancel it there",
                            r->run_dir, r->host, r->pid, host);
    if (!dt_run_record_launcher_alive(r))
        return 0;
    if (kill(r->pid, SIGTERM) != 0 && errno != ESRCH)
        return dt_error_set_errno(DT_EIO, errno, "cannot signal dtrain launch (pid %d) of %s", r->pid,
                                  r->run_dir);
    if (gone_within(r, wait_s))
        return 0;
    kill(r->pid, SIGTERM); /* a second signal: the launcher kills what is left at once */
    if (gone_within(r, 5))
        return 0;
    return dt_error_set(DT_ETIMEDOUT, "dtrain launch (pid %d) of %s still runs %g s after SIGTERM", r->pid,
                        r->run_dir, wait_s + 5);
}
