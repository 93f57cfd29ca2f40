/* cmd_report.c - `dtrain report RUN_DIR`: the run as one HTML page.
 *
 * Writes RUN_DIR/report.html (or -o FILE) from metrics.jsonl, summary.json and
 * trainer_summary.json, and prints the findings (what limits the run) on the
 * terminal too.  Not for the page itself: report_html.c and report_svg.c.
 */
#include "launcher/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "launcher/report/report.h"
#include "base/fs.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain report RUN_DIR [-o REPORT.html]\n\n"
            "Writes one self-contained HTML page about a run: loss, accuracy, learning-rate and\n"
            "throughput curves (inline SVG, drawn from RUN_DIR/metrics.jsonl), the step-time split\n"
            "and what limits the run, and the launcher's and trainer's summaries. The page needs\n"
            "no network; open it in any browser.\n\n"
            "Options:\n"
            "  -o FILE     where to write (default: RUN_DIR/report.html; - for stdout)\n"
            "  -h, --help  show this help\n\n"
            "Exit status: 0 on success, 1 when the run directory or its files are missing or\n"
            "malformed (the message names the file and line), 2 on a usage error.\n");
}

static int write_report(void *r, FILE *f)
{
    return dt_report_write(r, f);
}

static int write_page(const struct dt_report *r, const char *out)
{
    if (strcmp(out, "-") == 0)
        return dt_report_write(r, stdout);
    return dt_fs_write_atomic(out, false, write_report, (void *)r);
}

static int run(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    static const struct option own[] = {{"output", required_argument, NULL, 'o'}, {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "report", "o:", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == 'o')
            out = v;
        else if (!dir)
            dir = v;
        else
            return dt_cli_usage_error("report", "takes one run directory");
    }
    if (!dir)
        return dt_cli_usage_error("report", "needs a run directory");
    struct stat st;
    int rc = 0;
    if (stat(dir, &st) != 0)
        rc = dt_error_set_errno(DT_ENOTFOUND, errno, "run directory %s", dir);
    else if (!S_ISDIR(st.st_mode))
        rc = dt_error_set(DT_EINVAL, "%s is not a directory (give the run directory)", dir);
    char out_default[4200], findings[4096];
    snprintf(out_default, sizeof out_default, "%s/report.html", dir);
    out = out ? out : out_default;
    struct dt_report r;
    if (!rc)
        rc = dt_report_load(dir, &r);
    if (!rc) {
        rc = write_page(&r, out);
        dt_report_diagnose(&r, findings, sizeof findings);
        dt_report_free(&r);
    }
    if (rc) {
        fprintf(stderr, "dtrain report: %s\n", dt_error_last());
        return 1;
    }
    if (strcmp(out, "-") != 0)
        fprintf(stdout, "%sreport: %s\n", findings, out);
    return 0;
}

const struct dt_cli_command dt_cli_report = {
    .name = "report",
    .summary = "write an HTML page of a run's curves, step-time split and summary",
    .run = run,
    .usage = usage,
};
