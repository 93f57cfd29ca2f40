/* agent_progress.c - the progress rows of a command: job's ranks (a user's
 * script, e.g. PyTorch), read by the agent: docs/progress.md is the protocol.
 *
 * A rank appends one JSON object per line to the file its DTRAIN_METRICS_FILE
 * names (attempt_<k>/rank_<n>.metrics.jsonl; python/dtrain_progress.py does
 * it).  A row {"step": N, "loss": ..., ...} says the rank is alive at step N;
 * {"pause": "why"} says it will write none for a while (a checkpoint, the
 * end).  The agent reads every rank's file a few times a second:
 *  - each row is the rank's heartbeat for the watchdog (agent_watchdog.c):
 *    a rank that wrote one and then nothing for heartbeat_timeout is hung;
 *  - global rank 0's rows are appended to <run dir>/metrics.jsonl, as the
 *    bundled trainer writes it, so the live line, `dtrain status` and
 *    `dtrain report` read them, and their figures go to a TensorBoard event
 *    file (worker/tbevents.h) tagged as the trainer tags its own.
 * A line that is not such a row gets a warning naming the rank, the file and
 * the line, and is skipped: a progress report must never end a job.
 *
 * Files, not pipes: a rank appending to a file never blocks on the agent,
 * whatever the agent is doing, and the rows stay in the attempt's directory.
 *
 * Not for the bundled trainer (it writes metrics.jsonl and its heartbeats
 * itself), nor for a group's ranks (adapter.h: not this agent's to read).
 */
#include "launcher/agent/agent_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "spec/jobspec.h"
#include "worker/tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536
#define READ_PERIOD_S 0.1
#define WARN_MAX 10      /* malformed lines reported per rank and attempt */
#define NAME_MAX_BYTES 64
#define COUNT_MAX 0x1p53 /* beyond it, doubles skip whole numbers */
/* Bytes of one rank read per look: a rank writing rows without pause must not
 * hold the agent's loop; what is left is read at the next look. */
#define READ_MAX (1 << 20)

struct rank_rows {
    int rank;
    int fd;       /* -1 until the rank has created the file */
    bool refused; /* the name is no regular file: said once, never read */
    off_t skip;   /* bytes there before the attempt (a rerun in the same run directory) */
    char path[4200];
    char *buf;
    size_t len;
    bool overlong; /* inside a line longer than LINE_MAX_BYTES, dropped up to its newline */
    long line;     /* lines read so far */
    int warned;
    bool has_row, paused;
    int64_t step;
    double last_s; /* when its last row was read, on the agent's clock */
};

struct dt_agent__rows {
    int n;
    double next_s;
    struct rank_rows *r;
    int zero; /* local index of global rank 0, -1 when not this node's */
    char metrics_path[4200];
    int metrics_fd;
    bool metrics_failed, tb_failed;
    struct dt_tb_writer *tb;
    const char *run_dir;
};

bool dt_agent__rows_wanted(const struct dt_agent *a)
{
    return a->cfg->job->command && !a->group;
}

static void warn_line(struct rank_rows *r, const char *what, const char *text, size_t len)
{
    if (++r->warned > WARN_MAX)
        return;
    dt_log_warn("rank %d: %s:%ld: not a progress row, ignored: %s: %.*s%s", r->rank, r->path, r->line, what,
                len > 120 ? 120 : (int)len, text, len > 120 ? "..." : "");
    if (r->warned == WARN_MAX)
        dt_log_warn("rank %d: further malformed lines of %s are not reported (docs/progress.md says what a "
                    "row holds)",
                    r->rank, r->path);
}

/* Names go into metrics.jsonl, TensorBoard tags and the report page as
 * they are, so only plain ones are taken. */
static bool plain_name(const char *s)
{
    if (!*s || strlen(s) > NAME_MAX_BYTES)
        return false;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-", *s))
            return false;
    return true;
}

static bool is_count(const json_t *v)
{
    if (!json_is_integer(v) && !json_is_real(v))
        return false;
    double d = json_number_value(v);
    return d >= 0 && d <= COUNT_MAX && d == (double)(int64_t)d;
}

/* What is wrong with row, in why; 0 when it is a row or a pause. */
static int check_row(const json_t *row, char *why, size_t size)
{
    if (!json_is_object(row))
        return snprintf(why, size, "a line must be one JSON object"), -1;
    json_t *step = json_object_get(row, "step"), *pause = json_object_get(row, "pause");
    if (pause && (!json_is_string(pause) || json_object_size(row) != 1))
        return snprintf(why, size, "\"pause\" is a string, alone in its line: {\"pause\": \"checkpoint\"}"), -1;
    if (pause)
        return 0;
    if (!step)
        return snprintf(why, size, "no \"step\" (every row has the step it reports, a count)"), -1;
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)row, key, v) {
        bool count = !strcmp(key, "step") || !strcmp(key, "total_steps");
        if (!plain_name(key))
            return snprintf(why, size, "the name \"%.80s\" is not 1 to %d of A-Z a-z 0-9 _ . / -", key,
                            NAME_MAX_BYTES),
                   -1;
        if (count && !is_count(v))
            return snprintf(why, size, "\"%s\" must be a whole number from 0 to 2^53", key), -1;
        if (!count && !json_is_number(v) && !json_is_null(v))
            return snprintf(why, size, "\"%s\" must be a number or null", key), -1;
    }
    return 0;
}

/* "train/loss", "eval/test_accuracy" as the bundled trainer tags them; a
 * name with a slash is the user's own tag. */
static void tag_of(const char *key, char *tag, size_t size)
{
    bool eval = !strncmp(key, "test_", 5) || !strncmp(key, "val_", 4) || !strncmp(key, "eval_", 5);
    if (strchr(key, '/'))
        snprintf(tag, size, "%s", key);
    else
        snprintf(tag, size, "%s/%s", eval ? "eval" : "train", key);
}

static void to_tensorboard(struct dt_agent__rows *rs, const json_t *row, int64_t step)
{
    if (rs->tb_failed)
        return;
    if (!rs->tb && dt_tb_open(rs->run_dir, &rs->tb) < 0) {
        rs->tb_failed = true;
        dt_log_warn("no TensorBoard file for the progress rows: %s", dt_error_last());
        return;
    }
    const char *key;
    json_t *v;
    char tag[NAME_MAX_BYTES + 8];
    json_object_foreach ((json_t *)row, key, v) {
        if (!json_is_number(v) || !strcmp(key, "step") || !strcmp(key, "total_steps"))
            continue;
        tag_of(key, tag, sizeof tag);
        if (dt_tb_scalar(rs->tb, tag, step, (float)json_number_value(v)) < 0) {
            rs->tb_failed = true;
            dt_log_warn("TensorBoard file of the progress rows: %s; no more scalars are written", dt_error_last());
            return;
        }
    }
}

/* Rank 0's row, as it came (it parsed strictly), to metrics.jsonl. */
static void to_metrics(struct dt_agent__rows *rs, const char *text, size_t len)
{
    if (rs->metrics_failed)
        return;
    if (rs->metrics_fd < 0) {
        /* Appended to (attempts and reruns continue it); a symbolic link there is refused. */
        rs->metrics_fd = open(rs->metrics_path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (rs->metrics_fd < 0) {
            rs->metrics_failed = true;
            dt_log_warn("cannot open %s for rank 0's progress rows: %s", rs->metrics_path, strerror(errno));
            return;
        }
    }
    struct iovec iov[2] = {{(void *)text, len}, {"\n", 1}};
    if (writev(rs->metrics_fd, iov, 2) != (ssize_t)len + 1) {
        rs->metrics_failed = true;
        dt_log_warn("writing %s failed: %s; rank 0's later rows are not copied there", rs->metrics_path,
                    strerror(errno ? errno : EIO));
    }
}

static void take_line(struct dt_agent__rows *rs, struct rank_rows *r, char *text, size_t len, double now)
{
    r->line++;
    while (len > 0 && (text[len - 1] == '\r' || text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    if (len == 0)
        return;
    json_t *row = NULL;
    char why[256];
    if (dt_json_parse(text, len, r->path, (int)r->line, &row) < 0) {
        /* "path:line:column: what": the line is in the warning already */
        const char *msg = dt_error_last();
        size_t pl = strlen(r->path);
        int col = 0, at = 0;
        if (!strncmp(msg, r->path, pl) && sscanf(msg + pl, ":%*d:%d: %n", &col, &at) == 1 && at > 0)
            snprintf(why, sizeof why, "column %d: %s", col, msg + pl + at);
        else
            snprintf(why, sizeof why, "%s", msg);
        warn_line(r, why, text, len);
        dt_error_clear();
        return;
    }
    if (check_row(row, why, sizeof why) < 0) {
        warn_line(r, why, text, len);
        json_decref(row);
        return;
    }
    r->last_s = now;
    if (json_object_get(row, "pause")) {
        r->paused = true;
    } else {
        r->paused = false;
        r->has_row = true;
        r->step = (int64_t)json_number_value(json_object_get(row, "step"));
        if (rs->zero >= 0 && r == &rs->r[rs->zero]) {
            to_metrics(rs, text, len);
            to_tensorboard(rs, row, r->step);
        }
    }
    json_decref(row);
}

/* Opens the rank's file once it is there; false while it is not. */
static bool open_rows(struct rank_rows *r)
{
    if (r->fd >= 0)
        return true;
    if (r->refused)
        return false;
    int fd = open(r->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT) {
            r->refused = true;
            dt_log_warn("rank %d: cannot read its progress rows %s: %s", r->rank, r->path, strerror(errno));
        }
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        r->refused = true;
        dt_log_warn("rank %d: %s is not a regular file: its progress rows are not read", r->rank, r->path);
        return false;
    }
    if (r->skip > 0 && lseek(fd, r->skip, SEEK_SET) < 0)
        r->skip = 0;
    r->fd = fd;
    return true;
}

static void read_rank(struct dt_agent__rows *rs, struct rank_rows *r, double now, size_t max)
{
    for (size_t got = 0; got < max && open_rows(r);) {
        ssize_t n = read(r->fd, r->buf + r->len, LINE_MAX_BYTES - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        got += (size_t)n;
        r->len += (size_t)n;
        char *start = r->buf, *end = r->buf + r->len, *nl;
        while ((nl = memchr(start, '\n', (size_t)(end - start)))) {
            if (r->overlong) {
                r->overlong = false;
                r->line++;
            } else {
                take_line(rs, r, start, (size_t)(nl - start), now);
            }
            start = nl + 1;
        }
        r->len = (size_t)(end - start);
        memmove(r->buf, start, r->len);
        if (r->len == LINE_MAX_BYTES) {
            if (!r->overlong) {
                r->line++;
                warn_line(r, "longer than 65536 bytes", r->buf, 80);
                r->line--; /* counted when its newline comes */
            }
            r->overlong = true;
            r->len = 0;
        }
    }
}

void dt_agent__rows_poll(struct dt_agent *a)
{
    struct dt_agent__rows *rs = a->rows;
    double now = dt_clock_s();
    if (!rs || now < rs->next_s)
        return;
    rs->next_s = now + READ_PERIOD_S;
    for (int i = 0; i < rs->n; i++)
        read_rank(rs, &rs->r[i], now, READ_MAX);
}

int dt_agent__rows_begin(struct dt_agent *a)
{
    if (!dt_agent__rows_wanted(a))
        return 0;
    struct dt_agent__rows *rs = calloc(1, sizeof *rs);
    struct rank_rows *r = rs ? calloc((size_t)a->nproc, sizeof *r) : NULL;
    char *bufs = r ? malloc((size_t)a->nproc * LINE_MAX_BYTES) : NULL;
    if (!bufs) {
        free(r);
        free(rs);
        return dt_error_set(DT_ENOMEM, "out of memory for the ranks' progress rows");
    }
    *rs = (struct dt_agent__rows){.n = a->nproc, .r = r, .zero = -1, .metrics_fd = -1, .run_dir = a->cfg->run_dir};
    snprintf(rs->metrics_path, sizeof rs->metrics_path, "%s/metrics.jsonl", a->cfg->run_dir);
    a->rows = rs;
    for (int i = 0; i < a->nproc; i++) {
        r[i] = (struct rank_rows){.rank = a->procs[i].rank, .fd = -1, .buf = bufs + (size_t)i * LINE_MAX_BYTES};
        dt_agent_rows_path(a->cfg->run_dir, a->attempt, r[i].rank, r[i].path, sizeof r[i].path);
        struct stat st;
        if (stat(r[i].path, &st) == 0 && S_ISREG(st.st_mode))
            r[i].skip = st.st_size;
        if (r[i].rank == 0)
            rs->zero = i;
    }
    return 0;
}

int dt_agent__rows_heartbeat(const struct dt_agent *a, int i, int64_t *step, double *last_s)
{
    const struct dt_agent__rows *rs = a->rows;
    if (!rs || i >= rs->n || !rs->r[i].has_row || rs->r[i].paused)
        return DT_ENOTFOUND;
    *step = rs->r[i].step;
    *last_s = rs->r[i].last_s;
    return 0;
}

void dt_agent__rows_end(struct dt_agent *a)
{
    struct dt_agent__rows *rs = a->rows;
    if (!rs)
        return;
    for (int i = 0; i < rs->n; i++) { /* the rows written last, before the ranks ended: all of them */
        struct rank_rows *r = &rs->r[i];
        read_rank(rs, r, dt_clock_s(), SIZE_MAX);
        if (r->len > 0 && !r->overlong) /* a last row without its newline: the rank is done writing */
            take_line(rs, r, r->buf, r->len, dt_clock_s());
    }
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].fd >= 0)
            close(rs->r[i].fd);
    free(rs->r[0].buf);
    if (rs->metrics_fd >= 0)
        close(rs->metrics_fd);
    if (rs->tb && dt_tb_close(rs->tb) < 0)
        dt_log_warn("TensorBoard file of the progress rows: %s", dt_error_last());
    free(rs->r);
    free(rs);
    a->rows = NULL;
}
