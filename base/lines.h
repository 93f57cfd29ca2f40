/* lines.h - a byte stream cut into lines, with a bound on how much waits.
 *
 * Whoever shows another process's output line by line needs this: the agent
 * for its ranks' pipes, the Slurm adapter for the job's output files, a
 * helper program's output (base/proc.h).  Complete lines are handed over
 * straight from the input when nothing is pending (no copy); a line longer
 * than the buffer's capacity is handed over in pieces with complete = false,
 * so no writer can make the reader buffer without bound.
 *
 * Not for what happens to a line (prefixes, log files, filters: the callers).
 */
#ifndef DT_LINES_H
#define DT_LINES_H

#include <stdbool.h>
#include <stddef.h>

/* Console lines longer than this are shown in pieces of this size (the
 * agent's log files keep them whole). */
#define DT_LINES_MAX 16384

/* What ended the piece last handed over (struct dt_lines.end): '\n', '\r'
 * (with cr set), or one of these. */
#define DT_LINES_CUT 0  /* a piece of a line longer than the buffer (complete = false) */
#define DT_LINES_OPEN 1 /* dt_lines_take: what has come of a line that goes on (complete = false) */

struct dt_lines {
    char *buf;
    size_t len, cap;
    /* A carriage return ends a piece too, handed over complete: a progress
     * bar (tqdm) redraws its line with \r and never writes \n until it is done. */
    bool cr;
    char end; /* what ended the piece being handed over: '\n', '\r', DT_LINES_CUT or DT_LINES_OPEN */
};

/* One line (or, complete = false, a piece of a long one), without its newline. */
typedef void (*dt_lines_fn)(void *ctx, const char *line, size_t len, bool complete);

int dt_lines_init(struct dt_lines *lb, size_t cap);
void dt_lines_free(struct dt_lines *lb);
/* Hands over every line that n more bytes complete; keeps the rest. */
void dt_lines_feed(struct dt_lines *lb, const char *data, size_t n, dt_lines_fn fn, void *ctx);
/* Hands over a pending partial line (at end of stream), if any, as complete
 * (end '\n'). */
void dt_lines_flush(struct dt_lines *lb, dt_lines_fn fn, void *ctx);
/* Hands over what is pending of a line that has not ended (a prompt, a
 * progress bar, output that stalls mid-line), complete = false and end
 * DT_LINES_OPEN: the reader shows it now; the line's rest comes later. */
void dt_lines_take(struct dt_lines *lb, dt_lines_fn fn, void *ctx);

#endif
