/* fuzz_report_progress.c - libFuzzer target for the live progress line of
 * `dtrain launch` (launcher/report/report_progress.h), which follows a metrics.jsonl
 * that the ranks' own code writes.
 *
 * The input is that file as it grows, cut at form feeds into appends: each
 * part is appended to metrics.jsonl in the scratch directory
 * (tests/fuzz/scratch_dir.h) and the readers update 0.3 s later, so rows
 * split across appends (a line half flushed) are exercised.  A part that
 * starts with \v first truncates the file in place and one that starts with
 * \a first puts a new file under the name, as a rewritten or rotated file
 * would.  Two readers follow the file as the launcher does, one drawing in
 * place as on a terminal (hidden now and then, as rank output does) and one
 * printing plain lines, both to /dev/null.  After every update the line of
 * each reader's state, in the room the launcher gives it, must be printable
 * ASCII without "inf", "nan" or a negative step or ETA, and must end with
 * its " | restarts N" (no field pushed it out).  Never a crash, a leak or a
 * hang.
 *
 * Not for the JSON grammar itself (fuzz_json.c) or the report's reading of
 * the same file (fuzz_report_load.c).  Lines longer than the reader's 64 KiB
 * buffer and backlogs past the 1 MiB an update reads are beyond the inputs
 * libFuzzer makes; the unit tests (tests/unit/test_report_progress.c) hold
 * them.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/report/report_progress.h"
#include "tests/fuzz/scratch_dir.h"

#define FILE_NAME "metrics.jsonl"
#define LINE_ROOM 500 /* dt_progress_update's 512 less the "\r\033[K[dtrain] " head and a newline */

static void check_line(const struct dt_progress *p, int restarts)
{
    char line[LINE_ROOM], tail[32];
    size_t n = dt_progress_format(dt_progress_state(p), line, sizeof line);
    int t = snprintf(tail, sizeof tail, " | restarts %d", restarts);
    if (n != strlen(line) || n < (size_t)t || strcmp(line + n - (size_t)t, tail) != 0)
        abort();
    for (size_t i = 0; i < n; i++)
        if (line[i] < 0x20 || line[i] > 0x7e)
            abort();
    if (strstr(line, "inf") || strstr(line, "nan") || strstr(line, "step -") || strstr(line, "ETA -"))
        abort();
}

/* Truncates or replaces the file as the part's first byte asks; returns the
 * bytes that byte took. */
static size_t rewrite(const uint8_t *part, size_t len)
{
    if (len == 0 || (part[0] != '\v' && part[0] != '\a'))
        return 0;
    if (part[0] == '\a')
        scratch_write(FILE_NAME, NULL, 0);
    scratch_put(FILE_NAME, NULL, 0, "wb");
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int devnull = -1;
    if (devnull < 0 && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
        abort();
    const char *dir = scratch_dir();
    scratch_write(FILE_NAME, NULL, 0);
    struct dt_progress *tty, *plain;
    if (dt_progress_open(dir, devnull, true, 0, &tty) || dt_progress_open(dir, devnull, false, 0.5, &plain))
        abort();
    const uint8_t *p = data, *end = data + size;
    for (int i = 0;; i++) {
        const uint8_t *ff = p < end ? memchr(p, '\f', (size_t)(end - p)) : NULL, *stop = ff ? ff : end;
        size_t skip = rewrite(p, (size_t)(stop - p));
        scratch_put(FILE_NAME, p + skip, (size_t)(stop - p) - skip, "ab");
        int restarts = i / 4;
        dt_progress_update(tty, 0.3 * i, restarts);
        dt_progress_update(plain, 0.3 * i, restarts);
        check_line(tty, restarts);
        check_line(plain, restarts);
        if (i % 3 == 2)
            dt_progress_hide(tty);
        if (!ff)
            break;
        p = ff + 1;
    }
    dt_progress_close(tty);
    dt_progress_close(plain);
    return 0;
}
