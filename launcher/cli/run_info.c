/* run_info.c - one run as its directory and its scheduler tell it (see run_info.h).
 *
 * Not for printing it (cmd_status.c, cmd_list.c) or for following its logs
 * (cmd_logs.c).
 */
#include "launcher/cli/run_info.h"

#include "base/error.h"
#include "base/fs.h"
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

/* A run directory found in log_dir, as a lookup weighs it. */
struct candidate {
    int score;      /* 3: its directory name, run id or scheduler job id is the handle; 1: its job's name */
    bool trusted;   /* its record (or, without one, its directory) is the caller's alone */
    double started; /* the record's started_unix */
};

/* A directory without launch.json: the caller's own, writable by no one else? */
static bool own_dir(const char *dir)
{
    struct stat st;
    return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 022);
}

static struct candidate weigh(const char *log_dir, const char *entry, const char *handle)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", log_dir, entry);
    struct candidate c = {0};
    struct dt_run_record r;
    if (dt_run_record_read(dir, &r) < 0) {
        c.score = strcmp(entry, handle) == 0 ? 3 : 0;
        c.trusted = c.score && own_dir(dir);
        dt_error_clear();
        return c;
    }
    c.started = r.started_unix;
    c.trusted = r.trusted;
    if (strcmp(entry, handle) == 0 || strcmp(r.run_id, handle) == 0 ||
        (r.job_id[0] && !strcmp(r.job_id, handle)))
        c.score = 3;
    else
        c.score = strcmp(r.name, handle) == 0 ? 1 : 0;
    return c;
}

/* A record the caller alone could have written beats any other, whatever
 * it claims (a planted record's started_unix can be any time); then the
 * better match; then the newer run. */
static bool better(const struct candidate *a, const struct candidate *b)
{
    if (a->trusted != b->trusted)
        return a->trusted;
    if (a->score != b->score)
        return a->score > b->score;
    return a->started > b->started;
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
    struct candidate top = {0};
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        struct candidate c = weigh(log_dir, e->d_name, handle);
        if (c.score && (!top.score || better(&c, &top))) {
            snprintf(best, sizeof best, "%s", e->d_name);
            top = c;
        }
    }
    closedir(d);
    if (!top.score)
        return dt_error_set(DT_ENOTFOUND,
                            "%s: no such run directory, and no run in %s has that name, run id or job id",
                            handle, log_dir);
    snprintf(dir, size, "%s/%s", log_dir, best);
    return 0;
}

/* --- what the files say -------------------------------------------------- */

/* An integer member of summary.json within [lo, hi], else keep. */
static int int_in(const json_t *o, const char *key, int lo, int hi, int keep)
{
    double v;
    return dt_json_get_num(o, key, &v) && v >= lo && v <= hi ? (int)v : keep;
}

static void read_summary(struct dt_run_info *in)
{
    char *text = NULL;
    size_t len = 0;
    json_t *s = NULL;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/summary.json", in->dir);
    if (dt_fs_read_whole(AT_FDCWD, NULL, path, DT_FS_NOFOLLOW, SUMMARY_MAX_BYTES, &text, &len) < 0)
        return;
    int rc = dt_json_parse(text, len, path, 1, &s);
    free(text);
    if (rc < 0)
        return;
    const char *st = json_string_value(json_object_get(s, "status"));
    in->have_summary = st != NULL;
    snprintf(in->ended, sizeof in->ended, "%s", st ? st : "");
    in->exit_status = int_in(s, "exit_status", -1, 255, in->exit_status);
    in->world_size = int_in(s, "world_size", 0, INT_MAX, in->world_size);
    in->nnodes = int_in(s, "nnodes", 0, INT_MAX, in->nnodes);
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
    struct stat st;
    int fd = dt_fs_open_read(AT_FDCWD, path, DT_FS_NOFOLLOW, &st);
    if (fd < 0) {
        dt_error_clear();
        return;
    }
    char *buf = malloc(METRICS_TAIL_BYTES + 1);
    off_t from = st.st_size > METRICS_TAIL_BYTES ? st.st_size - METRICS_TAIL_BYTES : 0;
    ssize_t n = buf ? pread(fd, buf, METRICS_TAIL_BYTES, from) : -1;
    close(fd);
    for (ssize_t end = n; end > 0;) {
        buf[end] = 0;
        char *line = strrchr(buf, '\n');
        line = line ? line + 1 : buf;
        json_t *row = NULL;
        double step, total;
        bool stepped = *line && dt_json_parse(line, strlen(line), path, 1, &row) == 0 &&
                       dt_json_get_num(row, "step", &step) && step >= 0 && step < 9e18;
        if (stepped && dt_json_get_num(row, "total_steps", &total) && total >= 0 && total < 9e18) {
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

/* Bytes of the UTF-8 character at p that a terminal shows as text: its
 * length, or 0 for a control character or a byte that starts none. */
static size_t printable_len(const unsigned char *p)
{
    if (*p < 0x20 || *p == 0x7f)
        return 0;
    if (*p < 0x80)
        return 1;
    size_t n = *p >= 0xf0 && *p <= 0xf4 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc2 && *p < 0xe0 ? 2 : 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
        return 0; /* U+0080..U+009F: C1 controls (0x9b is a CSI) */
    return n;
}

const char *dt_run_info_shown(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < size;) {
        size_t n = printable_len(p);
        if (n) {
            memcpy(buf + o, p, n);
            o += n;
            p += n;
        } else {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *p++);
        }
    }
    buf[o] = 0;
    return buf;
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
    /* The record's shape is bounded (run_record.c), their product not: in 64 bits, then only if it fits. */
    long long world = (long long)out->rec.nodes * out->rec.nproc_per_node;
    if (out->have_record && !out->world_size && world > 0 && world <= INT_MAX) {
        out->nnodes = out->rec.nodes;
        out->world_size = (int)world;
    }
    const struct dt_adapter *ad = out->have_record ? dt_adapter_by_name(out->rec.scheduler) : NULL;
    if (ask && ad && ad->status)
        out->asked = ad->status(&out->rec, &out->sched) == 0 || out->sched.known;
    dt_error_clear();
    snprintf(out->state, sizeof out->state, "%s", state_of(out));
    return 0;
}
