/* mpirun_output.c - reading what Open MPI's mpirun prints.
 *
 * With --tag-output every line a rank writes arrives as
 *   [<jobid>,<rank>]<stdout>:text      (or <stderr>, <stddiag>)
 * so one pipe carries every rank and the launcher's agent can give each rank
 * its "[rank N]" prefix and log files (the group's route, mpirun_submit.c),
 * as it does for ranks it forks.
 *
 * When a rank fails, mpirun (Open MPI 4.1) ends the job and says which rank
 * it blames, in one of three shapes:
 *   The first process to do so was: / Process name: [[26137,1],1] / Exit code:    3
 *   mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 (Segmentation fault).
 *   mpirun has exited due to process rank 1 with PID 0 on        (ended without MPI_Finalize)
 * The first of these names the job's first failure.
 *
 * Not for running mpirun (mpirun_submit.c).
 */
#include "scheduler-adapters/mpirun/mpirun_internal.h"

#include "base/lines.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *digits(const char *p, const char *end, int *out)
{
    long v = 0;
    const char *s = p;
    while (p < end && *p >= '0' && *p <= '9' && v < 1 << 24)
        v = v * 10 + (*p++ - '0');
    *out = (int)v;
    return p > s ? p : NULL;
}

bool dt_mpirun_parse_tag(const char *line, size_t len, int *rank, bool *is_err, const char **text)
{
    const char *p = line, *end = line + len;
    int job, r;
    if (p >= end || *p++ != '[' || !(p = digits(p, end, &job)) || p >= end || *p++ != ',' ||
        !(p = digits(p, end, &r)) || p >= end || *p++ != ']')
        return false;
    static const char *const streams[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(streams[i]);
        if ((size_t)(end - p) >= n && !memcmp(p, streams[i], n)) {
            *rank = r;
            *is_err = i > 0;
            *text = p + n;
            return true;
        }
    }
    return false;
}

/* The text after `key` in line, or NULL. */
static const char *after(const char *line, size_t len, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(line + i, key, n))
            return line + i + n;
    return NULL;
}

void dt_mpirun_verdict_feed(struct dt_mpirun_verdict *v, const char *line, size_t len)
{
    const char *end = line + len, *p;
    int x;
    if (v->rank >= 0 && v->state != 2)
        return;
    if (after(line, len, "The first process to do so was:")) {
        v->state = 1;
    } else if (v->state == 1 && (p = after(line, len, "Process name: [[")) != NULL) {
        /* [[jobid,vpid-of-job],rank] */
        const char *q = memchr(p, ']', (size_t)(end - p));
        if (q && q + 2 < end && q[1] == ',' && digits(q + 2, end, &x)) {
            v->rank = x;
            v->state = 2;
        }
    } else if (v->state == 2 && (p = after(line, len, "Exit code:")) != NULL) {
        while (p < end && *p == ' ')
            p++;
        if (digits(p, end, &x))
            v->status = x;
        v->state = 3;
    } else if ((p = after(line, len, "mpirun noticed that process rank ")) != NULL && digits(p, end, &x)) {
        v->rank = x;
        const char *s = after(line, len, "exited on signal ");
        int sig;
        if (s && digits(s, end, &sig)) {
            v->status = 128 + sig;
            v->signaled = true;
        }
        v->state = 3;
    } else if ((p = after(line, len, "mpirun has exited due to process rank ")) != NULL && digits(p, end, &x)) {
        v->rank = x;
        v->state = 3;
    }
}

size_t dt_mpirun_strip_tags(char *text, size_t len)
{
    /* A rank that ends a piece of output without a newline (a progress line
     * redrawn with \r) gets its next piece tagged in the middle of a line. */
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        int r;
        bool err;
        const char *rest;
        if (text[i] == '[' && dt_mpirun_parse_tag(text + i, len - i, &r, &err, &rest)) {
            i = (size_t)(rest - text);
            continue;
        }
        text[w++] = text[i++];
    }
    return w;
}

bool dt_mpirun__untag(const char *line, size_t len, char *scratch, int *rank, bool *is_err, const char **text,
                      size_t *text_len)
{
    if (!dt_mpirun_parse_tag(line, len, rank, is_err, text))
        return false;
    size_t n = len - (size_t)(*text - line);
    if (memchr(*text, '<', n) && n <= DT_LINES_MAX) { /* rare: another tag inside the line */
        memcpy(scratch, *text, n);
        n = dt_mpirun_strip_tags(scratch, n);
        *text = scratch;
    }
    *text_len = n;
    return true;
}
