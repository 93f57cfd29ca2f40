/* report_progress.h - the live progress line of `dtrain launch` for trainer jobs.
 *
 * The launcher follows <run dir>/metrics.jsonl as rank 0 writes it (one
 * flushed line per logged step) and shows
 *   epoch 1.42 | step 340/1000 | loss 0.4567 | lr 1.2e-03 | 12345 samples/s | ETA 1m23s | restarts 0
 * and on GPU runs "| gpu 87% 1.2 GiB" after the samples/s (the ranks' mean
 * utilisation and the largest memory in use, from the rows' NVML lists).
 * On a terminal the line is redrawn in place (at most 4 times a second) and
 * is erased before other output is written, so rank output scrolls above it;
 * elsewhere (CI, a file) a plain line is printed every interval_s when there
 * is news.  Reading tolerates a line still being written: only complete lines
 * count, and one that does not parse is skipped (the report is strict, not
 * the live view).  An update reads about 1 MiB at most: more unread than that
 * (a big file, a runaway writer) is skipped, as the line needs only the
 * latest rows.  A metrics.jsonl that is no regular file (a FIFO) is not
 * followed, and the console is told so once.
 *
 * Not for the agent's decisions: it only reads and prints.
 */
#ifndef DT_REPORT_PROGRESS_H
#define DT_REPORT_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dt_progress_state {
    int64_t step, total_steps;  /* total 0: unknown */
    double epoch, loss, lr, samples_per_s, test_accuracy; /* NaN: not seen yet */
    double eta_s;               /* NaN: unknown */
    int restarts;
    int gpu_ranks;              /* ranks with GPU figures in the last row; 0: none */
    double gpu_util_pct, gpu_mem_mib; /* mean utilisation, largest memory in use */
    double tokens_per_s, mfu;   /* token runs (mfu: on a GPU whose peak is known); NaN or 0: none */
};

struct dt_progress;

/* Follows run_dir/metrics.jsonl (it may not exist yet) and draws on fd;
 * tty selects in-place redrawing; interval_s paces plain lines (0: 10 s). */
int dt_progress_open(const char *run_dir, int fd, bool tty, double interval_s, struct dt_progress **out);

/* Reads what metrics.jsonl gained and redraws or prints when due; now is a
 * monotonic time in seconds.  Cheap when nothing changed. */
void dt_progress_update(struct dt_progress *p, double now, int restarts);

/* Erases the line on a terminal before someone else writes to fd; the next
 * update draws it again.  NULL is fine. */
void dt_progress_hide(struct dt_progress *p);

/* Whether the line is drawn in place on a terminal, which it is once a row
 * has been read: a rank's unfinished output line must then be ended before
 * each redraw, which would otherwise write over it.  NULL is fine. */
bool dt_progress_drawing(const struct dt_progress *p);

/* Erases the line and frees (NULL is fine). */
void dt_progress_close(struct dt_progress *p);

/* What the line says now (tests, the end-of-run summary). */
const struct dt_progress_state *dt_progress_state(const struct dt_progress *p);

/* Formats the line; returns its length. */
size_t dt_progress_format(const struct dt_progress_state *s, char *buf, size_t size);

#endif
