/* cmd_list.c - `dtrain list [LOG_DIR]`: the runs of a log directory, one line each.
 *
 * Every directory of LOG_DIR (default runs) with launch.json or
 * summary.json is a run; each line says its directory, job, scheduler,
 * state, step and start, oldest first.  A run still running is asked about
 * through its adapter's status op (run_info.h); one that has ended is read
 * from its files only, so a long list costs no scheduler queries for it.
 *
 * Not for one run in detail (`dtrain status`).
 */
#include "launcher/cli/cli.h"
#include "launcher/cli/run_info.h"

#include "base/error.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain list [LOG_DIR]\n\n"
                 "Lists the runs in LOG_DIR (default: runs), oldest first: run directory, job name,\n"
                 "scheduler, state (as `dtrain status` says it), step and start time (UTC).\n\n"
                 "Options:\n"
                 "  -h, --help   show this help\n\n"
                 "Exit status: 0, 1 when LOG_DIR cannot be read, 2 on a usage error.\n");
}

struct row {
    char entry[256];
    double started;
};

static int by_start(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    return x->started != y->started ? (x->started > y->started) - (x->started < y->started)
                                    : strcmp(x->entry, y->entry);
}

static void print_row(const char *log_dir, const struct row *r)
{
    char dir[4096 + 260], step[48] = "-", when[32] = "-";
    snprintf(dir, sizeof dir, "%s/%s", log_dir, r->entry);
    struct dt_run_info in;
    char e[1024], name[512], sched[128], state[128];
    if (dt_run_info_load(dir, false, &in) < 0) { /* a record refused (a FIFO, an option for a job id) */
        printf("%-40s %-16s %-10s %-11s %-11s %s\n", dt_run_info_shown(r->entry, e, sizeof e), "-", "-",
               "unreadable", "-", "-");
        dt_error_clear();
        return;
    }
    /* Only a run that has not said how it ended is asked about (a pid check, or one query). */
    if (!in.have_summary || in.attempt < 0)
        dt_run_info_load(dir, true, &in);
    if (in.step >= 0 && in.total_steps >= 0)
        snprintf(step, sizeof step, "%lld/%lld", in.step, in.total_steps);
    else if (in.step >= 0)
        snprintf(step, sizeof step, "%lld", in.step);
    if (in.have_record) {
        time_t t = (time_t)in.rec.started_unix;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    }
    /* Names and states may come from files someone planted: never printed raw. */
    printf("%-40s %-16s %-10s %-11s %-11s %s\n", dt_run_info_shown(r->entry, e, sizeof e),
           in.have_record ? dt_run_info_shown(in.rec.name, name, sizeof name) : "-",
           in.have_record ? dt_run_info_shown(in.rec.scheduler, sched, sizeof sched) : "-",
           dt_run_info_shown(in.state, state, sizeof state), step, when);
}

/* A directory with launch.json (started: its time) or summary.json (its mtime). */
static bool is_run(const char *log_dir, const char *entry, double *started)
{
    char dir[4096 + 300], path[4096 + 320];
    snprintf(dir, sizeof dir, "%s/%s", log_dir, entry);
    struct dt_run_record rec;
    int rc = dt_run_record_read(dir, &rec);
    if (rc == 0) {
        *started = rec.started_unix;
        return true;
    }
    /* One that is there but refused is listed too, as unreadable. */
    snprintf(path, sizeof path, "%s/%s", dir, rc == DT_ENOTFOUND ? "summary.json" : DT_RUN_RECORD_FILE);
    struct stat st;
    if (lstat(path, &st) != 0)
        return false;
    *started = (double)st.st_mtime;
    return true;
}

static int list(const char *log_dir)
{
    DIR *d = opendir(log_dir);
    if (!d)
        return dt_error_set(DT_ENOTFOUND, "cannot read the log directory %s", log_dir);
    struct row *rows = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        double started;
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof rows->entry ||
            !is_run(log_dir, e->d_name, &started))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            struct row *r = realloc(rows, cap * sizeof *r);
            if (!r)
                break;
            rows = r;
        }
        snprintf(rows[n].entry, sizeof rows[n].entry, "%s", e->d_name);
        rows[n++].started = started;
    }
    closedir(d);
    qsort(rows, n, sizeof *rows, by_start);
    printf("%-40s %-16s %-10s %-11s %-11s %s\n", "RUN", "JOB", "SCHEDULER", "STATE", "STEP", "STARTED (UTC)");
    for (size_t i = 0; i < n; i++)
        print_row(log_dir, &rows[i]);
    free(rows);
    dt_error_clear();
    return 0;
}

static int parse_args(int argc, char **argv, const char **log_dir)
{
    static const struct option *const tables[] = {NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "list", "", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (*log_dir)
            return dt_cli_usage_error("list", "one log directory at a time (got '%s' and '%s')", *log_dir, v);
        *log_dir = v;
    }
    return 0;
}

static int run(int argc, char **argv)
{
    const char *log_dir = NULL;
    int prc = parse_args(argc, argv, &log_dir);
    if (prc)
        return prc;
    if (list(log_dir ? log_dir : "runs") < 0) {
        fprintf(stderr, "dtrain list: %s\n", dt_run_info_shown(dt_error_last(), (char[4096]){0}, 4096));
        return 1;
    }
    return 0;
}

const struct dt_cli_command dt_cli_list = {
    .name = "list",
    .summary = "the runs of a log directory, one line each",
    .run = run,
    .usage = usage,
};
