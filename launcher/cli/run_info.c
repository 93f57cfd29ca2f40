/* run_info.c - one run as its directory and its scheduler tell it (see run_info.h).
 *
 * Not for printing it (cmd_status.c, cmd_list.c) or for following its logs
 * (cmd_logs.c).
 */
#include "launcher/cli/run_info.h"

#include "base/error.h"
#include "base/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUMMARY_MAX_BYTES (16 * 1024 * 1024)
#define METRICS_TAIL_BYTES (64 * 1024) /* the last training row is near the end */

/* --- finding a run ------------------------------------------------------- */

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* How well a run directory of log_dir matches handle: 3 its directory
 * name, its run id or the scheduler's job id; 1 the job's name; 0 not. */
static int matches(const char *log_dir, const char *entry, const char *handle, double *started)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", log_dir, entry);
    struct dt_run_record r;
    if (dt_run_record_read(dir, &r) < 0)
        return strcmp(entry, handle) == 0 ? 3 : 0;
    *started = r.started_unix;
    if (strcmp(entry, handle) == 0 || strcmp(r.run_id, handle) == 0 ||
        (r.job_id[0] && !strcmp(r.job_id, handle)))
        return 3;
    return strcmp(r.name, handle) == 0 ? 1 : 0;
}

int dt_run_info_find(const char *handle, const char *log_dir, char *dir, size_t size)
{
    if (is_dir(handle)) {
        snprintf(dir, size, "%s", handle);
        return 0;
    }
    if (!log_dir)
        log_dir = "runs";
    DIR *d = opendir(log_dir);
    if (!d)
        return dt_error_set(DT_ENOTFOUND,
                            "%s: no such run directory, and no log directory %s to look for it in", handle,
                            log_dir);
    char best[NAME_MAX + 1] = "";
    int best_score = 0;
    double best_started = -1;
    for (struct dirent *e; (e = readdir(d));) {
        double started = 0;
        int score = e->d_name[0] == '.' ? 0 : matches(log_dir, e->d_name, handle, &started);
        if (score > best_score || (score && score == best_score && started > best_started)) {
            snprintf(best, sizeof best, "%s", e->d_name);
            best_score = score;
            best_started = started;
        }
    }
    closedir(d);
    if (!best_score)
        return dt_error_set(DT_ENOTFOUND,
                            "%s: no such run directory, and no run in %s has that name, run id or job id",
                            handle, log_dir);
    snprintf(dir, size, "%s/%s", log_dir, best);
    return 0;
}

/* --- what the files say -------------------------------------------------- */

static void read_summary(struct dt_run_info *in)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/summary.json", in->dir);
    json_t *s = NULL;
    if (dt_json_load_file(path, SUMMARY_MAX_BYTES, &s) < 0)
        return;
    const char *st = json_string_value(json_object_get(s, "status"));
    double v;
    in->have_summary = st != NULL;
    snprintf(in->ended, sizeof in->ended, "%s", st ? st : "");
    if (dt_json_get_num(s, "exit_status", &v))
        in->exit_status = (int)v;
    if (dt_json_get_num(s, "world_size", &v))
        in->world_size = (int)v;
    if (dt_json_get_num(s, "nnodes", &v))
        in->nnodes = (int)v;
    json_decref(s);
}

static void read_attempt(struct dt_run_info *in)
{
    DIR *d = opendir(in->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        int k;
        char rest;
        if (sscanf(e->d_name, "attempt_%d%c", &k, &rest) == 1 && k > in->attempt)
            in->attempt = k;
    }
    if (d)
        closedir(d);
}

/* The newest row with total_steps (a training row; eval rows have none);
 * else, for a script's progress rows that never say it (docs/progress.md),
 * the newest row's step with total_steps -1. */
static void read_step(struct dt_run_info *in)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/metrics.jsonl", in->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat st;
    char *buf = malloc(METRICS_TAIL_BYTES + 1);
    off_t from = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > METRICS_TAIL_BYTES
                     ? st.st_size - METRICS_TAIL_BYTES
                     : 0;
    ssize_t n = buf && S_ISREG(st.st_mode) ? pread(fd, buf, METRICS_TAIL_BYTES, from) : -1;
    close(fd);
    for (ssize_t end = n; end > 0;) {
        buf[end] = 0;
        char *line = strrchr(buf, '\n');
        line = line ? line + 1 : buf;
        json_t *row = NULL;
        double step, total;
        bool stepped = *line && dt_json_parse(line, strlen(line), path, 1, &row) == 0 &&
                       dt_json_get_num(row, "step", &step);
        if (stepped && dt_json_get_num(row, "total_steps", &total)) {
            if (in->step < 0) /* else a newer row without it said the step */
                in->step = (long long)step;
            in->total_steps = (long long)total;
            json_decref(row);
            break;
        }
        if (stepped && in->step < 0)
            in->step = (long long)step;
        json_decref(row);
        end = line == buf ? 0 : line - 1 - buf;
    }
    dt_error_clear(); /* a row being written is not the status's error */
    free(buf);
}

/* --- the state ----------------------------------------------------------- */

const struct dt_adapter *dt_run_info_adapter(const struct dt_run_info *in)
{
    if (!in->have_record) {
        dt_error_set(DT_EUNSUPPORTED,
                     "%s has no launch.json: it was not started by `dtrain launch` of this version, so "
                     "dtrain does not know which process or scheduler job runs it",
                     in->dir);
        return NULL;
    }
    const struct dt_adapter *ad = dt_adapter_by_name(in->rec.scheduler);
    if (!ad)
        dt_error_set(DT_EUNSUPPORTED, "%s: scheduler %s is not built into this dtrain", in->dir,
                     in->rec.scheduler);
    return ad;
}

/* A scheduler's word for a job that has ended, in the status's words. */
static const char *final_word(const char *s)
{
    static const char *const ok[] = {"COMPLETED", "Complete", NULL};
    static const char *const cancelled[] = {"CANCELLED", "Deleted", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(s, ok[i]) == 0)
            return "succeeded";
    for (int i = 0; cancelled[i]; i++)
        if (strcmp(s, cancelled[i]) == 0)
            return "cancelled";
    return strcmp(s, "ended") == 0 ? "lost" : "failed";
}

static const char *state_of(const struct dt_run_info *in)
{
    if (in->asked && in->sched.active)
        return strcmp(in->sched.state, "PENDING") == 0 || strcmp(in->sched.state, "Pending") == 0 ? "pending"
                                                                                                  : "running";
    /* A scheduler job cancelled (scancel, kubectl delete) is "cancelled" even
     * where summary.json says "failed": scancel signals every task of the step
     * at once, so a rank may die before its agent reads the SIGTERM as a stop. */
    bool cancelled = in->asked && in->sched.known && strcmp(final_word(in->sched.state), "cancelled") == 0;
    if (in->have_summary && !cancelled)
        return in->ended;
    if (in->asked && in->sched.known)
        return final_word(in->sched.state); /* ended without summary.json: "lost" for a launcher gone */
    return "unknown";
}

bool dt_run_info_active(const struct dt_run_info *in)
{
    return !strcmp(in->state, "running") || !strcmp(in->state, "pending");
}

int dt_run_info_load(const char *dir, bool ask, struct dt_run_info *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->dir, sizeof out->dir, "%s", dir);
    out->exit_status = out->attempt = -1;
    out->step = out->total_steps = -1;
    if (!is_dir(dir))
        return dt_error_set(DT_ENOTFOUND, "%s: no such run directory", dir);
    int rc = dt_run_record_read(dir, &out->rec);
    out->have_record = rc == 0;
    if (rc < 0 && rc != DT_ENOTFOUND)
        return rc;
    read_summary(out);
    read_attempt(out);
    read_step(out);
    if (out->have_record && !out->world_size && out->rec.nproc_per_node > 0) {
        out->nnodes = out->rec.nodes;
        out->world_size = out->rec.nodes * out->rec.nproc_per_node;
    }
    const struct dt_adapter *ad = out->have_record ? dt_adapter_by_name(out->rec.scheduler) : NULL;
    if (ask && ad && ad->status)
        out->asked = ad->status(&out->rec, &out->sched) == 0 || out->sched.known;
    dt_error_clear();
    snprintf(out->state, sizeof out->state, "%s", state_of(out));
    return 0;
}
