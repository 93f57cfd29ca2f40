/* cmd_logs.c - `dtrain logs RUN [--rank N] [-f]`: a run's rank logs, from another terminal.
 *
 * Reads <run dir>/attempt_<k>/rank_<n>.out and .err, the files the agents
 * write (on every node, into the run directory all nodes share), of the
 * newest attempt or of --attempt K: stdout lines to stdout, stderr lines to
 * stderr, each "[rank N] "-prefixed as on the launcher's console unless one
 * rank was asked for.  Without -f each file is printed whole, in rank order.
 * With -f the files are followed as they grow (new ranks' files as they
 * appear, the next attempt's once it starts, after a line saying so) until
 * the run has ended (run_info.h: no launcher or scheduler job runs it).
 *
 * Not for the launcher's own lines (they are on its console, and in
 * summary.json) or for a Kubernetes job's pods (`kubectl logs`).
 */
#include "launcher/cli/cli.h"
#include "launcher/cli/run_info.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/lines.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain logs RUN [--rank N] [--attempt K] [-f] [--log-dir DIR]\n\n"
                 "Prints the ranks' output of a run's newest attempt: stdout lines on stdout, stderr\n"
                 "lines on stderr, each prefixed \"[rank N]\" (not with --rank). RUN is named as for\n"
                 "`dtrain status`.\n\n"
                 "Options:\n"
                 "  --rank N        this rank's output only\n"
                 "  --attempt K     this attempt's (default: the newest)\n"
                 "  -f, --follow    keep printing as the logs grow, into later attempts, until the\n"
                 "                  run has ended\n"
                 "  --log-dir DIR   where to look RUN up (default: runs)\n"
                 "  -h, --help      show this help\n\n"
                 "Exit status: 0, 1 when RUN names no run or it has no logs, 2 on a usage error.\n");
}

struct opts {
    const char *handle, *log_dir;
    int rank;    /* -1: all */
    int attempt; /* -1: the newest */
    bool follow;
};

/* One rank_<n>.{out,err}, read from where the last read stopped. */
struct stream {
    int rank;
    bool err;
    int fd;
    struct dt_lines lb;
    bool prefix;
};

struct streams {
    struct stream *s;
    int n, cap;
    int attempt;
    char dir[4096 + 32]; /* attempt_<attempt>/ */
    int refused[64];     /* rank * 2 + err of files refused (said once) */
    int n_refused;
};

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    const struct stream *s = ctx;
    FILE *to = s->err ? stderr : stdout;
    if (s->prefix)
        fprintf(to, "[rank %d] ", s->rank);
    fwrite(line, 1, len, to);
    if (complete || len)
        fputc('\n', to);
}

static void pump(struct stream *s, bool flush)
{
    char buf[16384];
    ssize_t n;
    while ((n = read(s->fd, buf, sizeof buf)) > 0)
        dt_lines_feed(&s->lb, buf, (size_t)n, on_line, s);
    if (flush)
        dt_lines_flush(&s->lb, on_line, s);
    fflush(s->err ? stderr : stdout);
}

static int by_rank(const void *a, const void *b)
{
    const struct stream *x = a, *y = b;
    return x->rank != y->rank ? (x->rank > y->rank) - (x->rank < y->rank) : (int)x->err - (int)y->err;
}

static bool known(const struct streams *ss, int rank, bool err)
{
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].rank == rank && ss->s[i].err == err)
            return true;
    return false;
}

/* A rank file that is a link or no regular file (a FIFO, /dev/zero behind a
 * link) is said once and skipped: a run directory may be someone else's. */
static void refused(struct streams *ss, int rank, bool err)
{
    if (known(ss, rank, err) || ss->n_refused >= (int)(sizeof ss->refused / sizeof *ss->refused))
        return;
    for (int i = 0; i < ss->n_refused; i++)
        if (ss->refused[i] == rank * 2 + err)
            return;
    ss->refused[ss->n_refused++] = rank * 2 + err;
    char where[3 * sizeof ss->dir], why[1024];
    fprintf(stderr, "dtrain logs: %s/%s\n", dt_run_info_shown(ss->dir, where, sizeof where),
            dt_run_info_shown(dt_error_last(), why, sizeof why));
}

/* Opens the rank files of the attempt directory not yet open; the directory
 * itself is not followed through a link either. */
static void scan(struct streams *ss, const struct opts *o)
{
    int dfd = open(ss->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d && dfd >= 0)
        close(dfd);
    for (struct dirent *e; d && (e = readdir(d));) {
        int rank, end = 0;
        char kind[4];
        if (sscanf(e->d_name, "rank_%d.%3[a-z]%n", &rank, kind, &end) != 2 || e->d_name[end])
            continue;
        bool err = strcmp(kind, "err") == 0;
        if ((!err && strcmp(kind, "out")) || (o->rank >= 0 && rank != o->rank) || known(ss, rank, err))
            continue;
        if (ss->n == ss->cap) {
            int cap = ss->cap ? 2 * ss->cap : 16;
            struct stream *s = realloc(ss->s, (size_t)cap * sizeof *s);
            if (!s)
                break;
            ss->s = s;
            ss->cap = cap;
        }
        struct stream *s = &ss->s[ss->n];
        *s = (struct stream){.rank = rank, .err = err, .prefix = o->rank < 0};
        if ((s->fd = dt_fs_open_read(dirfd(d), e->d_name, DT_FS_NOFOLLOW, NULL)) < 0) {
            refused(ss, rank, err);
            continue;
        }
        if (dt_lines_init(&s->lb, DT_LINES_MAX) < 0) {
            close(s->fd);
            continue;
        }
        ss->n++;
    }
    if (d)
        closedir(d);
}

static void close_all(struct streams *ss)
{
    for (int i = 0; i < ss->n; i++) {
        pump(&ss->s[i], true);
        close(ss->s[i].fd);
        dt_lines_free(&ss->s[i].lb);
    }
    ss->n = 0;
}

static void open_attempt(struct streams *ss, const char *run_dir, int k, const struct opts *o)
{
    close_all(ss);
    ss->attempt = k;
    snprintf(ss->dir, sizeof ss->dir, "%s/attempt_%d", run_dir, k);
    scan(ss, o);
    qsort(ss->s, (size_t)ss->n, sizeof *ss->s, by_rank);
}

/* -f: every quarter second what the files gained, new files, a new attempt;
 * the run's state every second, until it has ended. */
static void follow(struct streams *ss, struct dt_run_info *in, const struct opts *o)
{
    struct timespec tick = {0, 250 * 1000 * 1000};
    for (int t = 0;; t++) {
        for (int i = 0; i < ss->n; i++)
            pump(&ss->s[i], false);
        if (t % 4 != 3)
            goto sleep;
        bool ended = dt_run_info_load(in->dir, true, in) < 0 || !dt_run_info_active(in);
        if (o->attempt < 0 && in->attempt > ss->attempt) {
            close_all(ss);
            fprintf(stderr, "---- dtrain logs: attempt %d ----\n", in->attempt);
            open_attempt(ss, in->dir, in->attempt, o);
            continue;
        }
        scan(ss, o);
        if (ended)
            return;
    sleep:
        nanosleep(&tick, NULL);
    }
}

static int show(const struct opts *o)
{
    char dir[4096];
    struct dt_run_info in;
    if (dt_run_info_find(o->handle, o->log_dir, dir, sizeof dir) < 0 ||
        dt_run_info_load(dir, o->follow, &in) < 0)
        return -1;
    int k = o->attempt >= 0 ? o->attempt : in.attempt;
    if (k < 0 && !o->follow)
        return dt_error_set(DT_ENOTFOUND, "%s has no attempt_<k>/ with rank logs%s", dir,
                            !strcmp(in.rec.scheduler, "kubernetes") ? " (a Kubernetes job's are in its pods: "
                                                                      "kubectl logs --prefix -l "
                                                                      "app.kubernetes.io/instance=<Job>)"
                                                                    : "");
    struct streams ss = {0};
    open_attempt(&ss, dir, k < 0 ? 0 : k, o);
    if (!o->follow && ss.n == 0 && o->rank >= 0)
        return dt_error_set(DT_ENOTFOUND, "%s has no log of rank %d", ss.dir, o->rank);
    if (o->follow)
        follow(&ss, &in, o);
    close_all(&ss);
    free(ss.s);
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    enum { RANK = DT_CLI_OPT_OWN, ATTEMPT };
    static const struct option own[] = {{"follow", no_argument, NULL, 'f'},
                                        {"log-dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR},
                                        {"rank", required_argument, NULL, RANK},
                                        {"attempt", required_argument, NULL, ATTEMPT},
                                        {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "logs", "f", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        char *end;
        long n = ch == RANK || ch == ATTEMPT ? strtol(v, &end, 10) : 0;
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if ((ch == RANK || ch == ATTEMPT) && (end == v || *end || n < 0 || n > 1 << 20))
            return dt_cli_usage_error("logs", "%s '%s': expected a number from 0", ch == RANK ? "--rank" : "--attempt",
                                      v);
        if (ch == 'f')
            o->follow = true;
        else if (ch == DT_CLI_OPT_LOG_DIR)
            o->log_dir = v;
        else if (ch == RANK || ch == ATTEMPT)
            *(ch == RANK ? &o->rank : &o->attempt) = (int)n;
        else if (o->handle)
            return dt_cli_usage_error("logs", "one run at a time (got '%s' and '%s')", o->handle, v);
        else
            o->handle = v;
    }
    return 0;
}

static int run(int argc, char **argv)
{
    struct opts o = {.rank = -1, .attempt = -1};
    int prc = parse_args(argc, argv, &o);
    if (prc)
        return prc;
    if (!o.handle)
        return dt_cli_usage_error("logs", "which run? Give its run directory (or job id, or name)");
    if (show(&o) < 0) {
        fprintf(stderr, "dtrain logs: %s\n", dt_run_info_shown(dt_error_last(), (char[4096]){0}, 4096));
        return 1;
    }
    return 0;
}

const struct dt_cli_command dt_cli_logs = {
    .name = "logs",
    .summary = "a run's rank logs (--rank N, -f to follow)",
    .run = run,
    .usage = usage,
};
