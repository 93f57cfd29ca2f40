/* fuzz_report_load.c - libFuzzer target for `dtrain report`'s reading of a run
 * directory (launcher/report/report_load.c) and what it makes of what it read.
 *
 * The input is a run directory cut at form feeds (tests/fuzz/scratch_dir.h):
 * metrics.jsonl, then summary.json, then trainer_summary.json.  Loading must
 * give a report or an error that names the file; never a crash, a leak or a
 * hang.  A loaded report is then diagnosed and rendered as the page (to
 * /dev/null), since the findings and the SVG charts do arithmetic on
 * whatever numbers the files hold.
 *
 * Not for the JSON grammar itself (fuzz_json.c) or the page's looks
 * (tests/integration/test_obs_report.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "launcher/report/report.h"
#include "tests/fuzz/scratch_dir.h"

static const char *const files[] = {"metrics.jsonl", "summary.json", "trainer_summary.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        abort();
    const char *dir = scratch_files(data, size, files, 3);
    struct dt_report r;
    if (dt_report_load(dir, &r)) {
        if (!strstr(dt_error_last(), dir))
            abort(); /* the user must be told which file is wrong */
        dt_error_clear();
        return 0;
    }
    char findings[4096];
    if (dt_report_diagnose(&r, findings, sizeof findings) < 1 || strlen(findings) >= sizeof findings)
        abort();
    if (dt_report_write(&r, devnull))
        abort();
    dt_report_free(&r);
    dt_error_clear();
    return 0;
}
