/* report_progress.c - the live progress line (see report_progress.h).
 *
 * The file is read from where the last call stopped into a fixed buffer; a
 * line without its newline yet stays in the buffer for the next call.  A line
 * longer than the buffer is dropped whole.  A file truncated below where
 * reading stopped, or another file put under the name, is read again from its
 * start.  ETA uses the launcher's own clock between the first and the latest
 * row seen, so evaluation and checkpoint time are part of the rate.
 *
 * The launcher calls in from the loop that supervises the ranks, so a call
 * reads about READ_MAX at most, and more than READ_MAX unread (a big file
 * opened, a writer ahead of the reader) is skipped to its last READ_MAX.
 * Skipping, not catching up over later calls: rows read late would be timed
 * at the later call, a rate of how fast the reader caught up; skipped rows
 * cost the rate nothing, as steps are counted, not rows.  The line shows
 * the latest rows anyway; an evaluation row skipped over leaves "test acc"
 * out until the next one.
 *
 * The file is written by the ranks, so it holds whatever they wrote: a step
 * must be a count (0 to 2^53, where doubles stop holding every whole number),
 * a row with a figure beyond a double (1e999) does not parse (base/json.h)
 * and is skipped, and a line that would say "inf", "nan" or hundreds of
 * digits leaves the field out or writes it in three significant digits.
 */
#include "launcher/report/report_progress.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"

#define BUF 65536
#define READ_MAX (1 << 20) /* bytes a call reads: thousands of rows, milliseconds to parse */
#define REDRAW_S 0.25
#define COUNT_MAX 0x1p53 /* beyond it, doubles skip whole numbers */
#define FIXED_MAX 1e9    /* figures at or above it print in 3 significant digits */
#define ETA_MAX_S 1e9    /* 31 years: an ETA beyond it says nothing */

struct dt_progress {
    char path[4200];
    int in_fd, out_fd;
    bool tty, shown, news;
    bool skipping; /* inside a line longer than buf: dropped up to its newline */
    bool refused;  /* the console was told that the name is no regular file */
    double interval_s, last_draw;
    double first_now, first_step; /* for the rate: when the first row was seen */
    double last_step;             /* the latest training row's, to see a restart go back */
    struct dt_progress_state st;
    size_t len;                   /* bytes of an incomplete line kept in buf */
    char buf[BUF];
};

int dt_progress_open(const char *run_dir, int fd, bool tty, double interval_s, struct dt_progress **out)
{
    struct dt_progress *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    snprintf(p->path, sizeof p->path, "%s/metrics.jsonl", run_dir);
    p->in_fd = -1;
    p->out_fd = fd;
    p->tty = tty;
    p->interval_s = interval_s > 0 ? interval_s : 10;
    p->last_draw = -1e30;
    p->first_now = NAN;
    p->st = (struct dt_progress_state){.epoch = NAN, .loss = NAN, .lr = NAN, .samples_per_s = NAN,
                                       .test_accuracy = NAN, .eta_s = NAN, .tokens_per_s = NAN, .mfu = NAN};
    *out = p;
    return 0;
}

/* "gpu_util_pct": [..], "gpu_mem_mib": [..] (one entry per rank, null when
 * NVML had no answer): mean utilisation, largest memory.  A GPU run writes
 * both in every training row (the trainer samples NVML for each row it
 * logs), so a training row without them is from a run with no GPU (a CPU
 * job, a restart on other hardware): the last GPU figures are not its own. */
static void take_gpu(struct dt_progress_state *st, const json_t *row)
{
    json_t *u = json_object_get(row, "gpu_util_pct"), *m = json_object_get(row, "gpu_mem_mib"), *e;
    size_t i;
    if (!json_is_array(u) || !json_is_array(m)) {
        st->gpu_ranks = 0;
        st->gpu_util_pct = st->gpu_mem_mib = NAN;
        return;
    }
    double sum = 0, most = NAN;
    int n = 0;
    json_array_foreach (u, i, e)
        if (json_is_number(e))
            sum += json_number_value(e), n++;
    json_array_foreach (m, i, e)
        if (json_is_number(e) && !(json_number_value(e) <= most))
            most = json_number_value(e);
    st->gpu_ranks = (int)json_array_size(u);
    st->gpu_util_pct = n && isfinite(sum) ? sum / n : NAN;
    st->gpu_mem_mib = most;
}

/* The count in member key, if it is one (0 to COUNT_MAX; the worker writes
 * whole numbers with %lld). */
static bool get_count(const json_t *row, const char *key, int64_t *out)
{
    double v;
    if (!dt_json_get_num(row, key, &v) || !(v >= 0 && v <= COUNT_MAX))
        return false;
    *out = (int64_t)v;
    return true;
}

/* The rate is taken from the first row read to the latest.  Rows read at
 * the same moment say nothing about time, so the latest of them is the
 * start; so is a row whose step went back from the row before (a restart
 * from a checkpoint, which is usually past the first row).  A new start has
 * no rate yet: the ETA is unknown until a row read later. */
static void take_rate(struct dt_progress *p, double now)
{
    double step = (double)p->st.step, last = p->last_step;
    p->last_step = step;
    if (isnan(p->first_now) || step < last || now <= p->first_now) {
        p->first_now = now;
        p->first_step = step;
        p->st.eta_s = NAN;
    } else if (step > p->first_step && p->st.total_steps > 0) {
        double rate = (step - p->first_step) / (now - p->first_now);
        p->st.eta_s = (double)(p->st.total_steps - p->st.step) / rate;
    }
}

/* True if the row had a step (it is news).  A figure absent or null leaves
 * the one shown before; numbers from base/json.h are finite. */
static bool take(struct dt_progress *p, const json_t *row, double now)
{
    if (!get_count(row, "step", &p->st.step))
        return false;
    get_count(row, "total_steps", &p->st.total_steps);
    if (json_object_get(row, "test_accuracy")) {
        dt_json_get_num(row, "test_accuracy", &p->st.test_accuracy);
        return true; /* an evaluation row (whole epochs): the training figures stay */
    }
    if (json_object_get(row, "val_accuracy")) /* a token run's evaluation row: the same */
        return true;
    dt_json_get_num(row, "epoch", &p->st.epoch);
    dt_json_get_num(row, "loss", &p->st.loss);
    dt_json_get_num(row, "lr", &p->st.lr);
    dt_json_get_num(row, "samples_per_s", &p->st.samples_per_s);
    p->st.tokens_per_s = p->st.mfu = NAN; /* each row has them or not */
    dt_json_get_num(row, "tokens_per_s", &p->st.tokens_per_s);
    dt_json_get_num(row, "mfu", &p->st.mfu);
    take_gpu(&p->st, row);
    take_rate(p, now);
    return true;
}

static void put(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the console went away: the agent notices on its own writes */
        s += w;
        n -= (size_t)w;
    }
}

/* Opens the file if it is not open yet; false while there is none to read.
 * The run file's checked open (base/fs.h): a FIFO would wait for a writer,
 * and the launcher supervises the ranks from the same loop; a link planted
 * under the name is not followed. */
static bool open_file(struct dt_progress *p)
{
    if (p->in_fd >= 0)
        return true;
    int fd = dt_fs_open_read(AT_FDCWD, p->path, DT_FS_NOFOLLOW, NULL);
    if (fd >= 0)
        return (p->in_fd = fd), true;
    if (fd != DT_ENOTFOUND && !p->refused) {
        char note[4400];
        int n = snprintf(note, sizeof note, "[dtrain] no progress line: %s\n", dt_error_last());
        dt_progress_hide(p);
        put(p->out_fd, note, n > 0 && (size_t)n < sizeof note ? (size_t)n : 0);
        p->refused = true;
    }
    dt_error_clear();
    return false;
}

/* True if the name no longer holds what in_fd reads: another file, or this
 * one truncated below where reading stopped.  A removed file stays read. */
static bool file_changed(const struct dt_progress *p)
{
    struct stat named, open_st;
    off_t pos = lseek(p->in_fd, 0, SEEK_CUR);
    if (fstat(p->in_fd, &open_st) || lstat(p->path, &named))
        return false;
    return named.st_ino != open_st.st_ino || named.st_dev != open_st.st_dev || open_st.st_size < pos;
}

static void close_file(struct dt_progress *p)
{
    close(p->in_fd);
    p->in_fd = -1;
    p->len = 0;
    p->skipping = false;
}

/* Moves past all but the last READ_MAX unread bytes, if there are more.
 * Reading then starts at any byte: the line there is dropped up to its newline,
 * and so is what buf kept of the line before the skip. */
static void skip_backlog(struct dt_progress *p)
{
    struct stat st;
    off_t pos = lseek(p->in_fd, 0, SEEK_CUR);
    if (pos < 0 || fstat(p->in_fd, &st) || st.st_size - pos <= READ_MAX)
        return;
    if (lseek(p->in_fd, st.st_size - READ_MAX, SEEK_SET) < 0)
        return;
    p->len = 0;
    p->skipping = true;
}

/* Takes the complete lines in buf and keeps the rest; true if a row was taken. */
static bool take_lines(struct dt_progress *p, double now)
{
    bool any = false;
    char *start = p->buf, *end = p->buf + p->len, *nl;
    while ((nl = memchr(start, '\n', (size_t)(end - start)))) {
        json_error_t err;
        json_t *row = p->skipping ? NULL : dt_json_loadb(start, (size_t)(nl - start), &err);
        if (row)
            any |= take(p, row, now);
        json_decref(row);
        p->skipping = false;
        start = nl + 1;
    }
    p->len = (size_t)(end - start);
    memmove(p->buf, start, p->len);
    if (p->len == BUF) { /* a line longer than the buffer: not ours to show */
        p->len = 0;
        p->skipping = true;
    }
    return any;
}

/* Reads what the file gained, READ_MAX or so at most; true if at least one
 * row was taken. */
static bool read_rows(struct dt_progress *p, double now)
{
    bool any = false, reopened = false;
    size_t got = 0;
    while (got < READ_MAX && open_file(p)) {
        skip_backlog(p);
        ssize_t n = read(p->in_fd, p->buf + p->len, BUF - p->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 && !reopened && file_changed(p)) {
            close_file(p); /* once a call: a file replaced over and over must not hold the launcher */
            reopened = true;
            continue;
        }
        if (n <= 0)
            break;
        got += (size_t)n;
        p->len += (size_t)n;
        any |= take_lines(p, now);
    }
    return any;
}

static size_t add(char *buf, size_t size, size_t used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t add(char *buf, size_t size, size_t used, const char *fmt, ...)
{
    if (used >= size)
        return used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    used += n > 0 ? (size_t)n : 0;
    return used < size ? used : size - 1;
}

/* x with prec decimals, or in 3 significant digits from FIXED_MAX on, where
 * fixed notation runs to hundreds of digits. */
static const char *fig(char out[32], double x, int prec)
{
    bool fixed = fabs(x) < FIXED_MAX;
    snprintf(out, 32, fixed ? "%.*f" : "%.*g", fixed ? prec : 3, x);
    return out;
}

size_t dt_progress_format(const struct dt_progress_state *s, char *buf, size_t size)
{
    size_t n = 0;
    char f[32];
    buf[0] = 0;
    if (isfinite(s->epoch))
        n = add(buf, size, n, "epoch %s | ", fig(f, s->epoch, 2));
    n = s->total_steps > 0 ? add(buf, size, n, "step %lld/%lld", (long long)s->step, (long long)s->total_steps)
                           : add(buf, size, n, "step %lld", (long long)s->step);
    if (isfinite(s->loss))
        n = add(buf, size, n, " | loss %s", fig(f, s->loss, 4));
    if (isfinite(s->lr))
        n = add(buf, size, n, " | lr %.2e", s->lr);
    if (isfinite(s->tokens_per_s) && s->tokens_per_s > 0)
        n = add(buf, size, n, " | %s tokens/s", fig(f, s->tokens_per_s, 0));
    else if (isfinite(s->samples_per_s))
        n = add(buf, size, n, " | %s samples/s", fig(f, s->samples_per_s, 0));
    if (isfinite(s->mfu) && s->mfu > 0)
        n = add(buf, size, n, " | MFU %s%%", fig(f, 100 * s->mfu, 1));
    bool util = isfinite(s->gpu_util_pct), mem = isfinite(s->gpu_mem_mib);
    if (s->gpu_ranks > 0 && (util || mem))
        n = add(buf, size, n, " | gpu");
    if (s->gpu_ranks > 0 && util)
        n = add(buf, size, n, " %s%%", fig(f, s->gpu_util_pct, 0));
    if (s->gpu_ranks > 0 && mem)
        n = add(buf, size, n, s->gpu_mem_mib >= 1024 ? " %s GiB" : " %s MiB",
                s->gpu_mem_mib >= 1024 ? fig(f, s->gpu_mem_mib / 1024, 1) : fig(f, s->gpu_mem_mib, 0));
    if (isfinite(s->test_accuracy))
        n = add(buf, size, n, " | test acc %s", fig(f, s->test_accuracy, 4));
    if (s->total_steps > 0 && s->eta_s >= 0 && s->eta_s < ETA_MAX_S) {
        long e = lround(s->eta_s);
        n = e >= 3600 ? add(buf, size, n, " | ETA %ldh%02ldm", e / 3600, e / 60 % 60)
                      : add(buf, size, n, " | ETA %ldm%02lds", e / 60, e % 60);
    }
    return add(buf, size, n, " | restarts %d", s->restarts);
}

void dt_progress_update(struct dt_progress *p, double now, int restarts)
{
    if (!p)
        return;
    p->news |= read_rows(p, now) || restarts != p->st.restarts;
    p->st.restarts = restarts;
    bool due = p->tty ? (p->news || !p->shown) && now - p->last_draw >= REDRAW_S
                      : p->news && now - p->last_draw >= p->interval_s;
    if (!due || isnan(p->first_now))
        return;
    /* on a terminal: \r and erase-to-end-of-line, then the line without a newline */
    char line[512];
    size_t head = (size_t)snprintf(line, sizeof line, "%s[dtrain] ", p->tty ? "\r\033[K" : "");
    size_t n = head + dt_progress_format(&p->st, line + head, sizeof line - head - 1);
    if (!p->tty)
        line[n++] = '\n';
    put(p->out_fd, line, n);
    p->shown = p->tty;
    p->news = false;
    p->last_draw = now;
}

void dt_progress_hide(struct dt_progress *p)
{
    if (!p || !p->shown)
        return;
    put(p->out_fd, "\r\033[K", 4);
    p->shown = false;
}

bool dt_progress_drawing(const struct dt_progress *p)
{
    return p && p->tty && !isnan(p->first_now);
}

const struct dt_progress_state *dt_progress_state(const struct dt_progress *p)
{
    return &p->st;
}

void dt_progress_close(struct dt_progress *p)
{
    if (!p)
        return;
    dt_progress_hide(p);
    if (p->in_fd >= 0)
        close(p->in_fd);
    free(p);
}
