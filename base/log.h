/* log.h - the few lines dtrain itself prints on stderr.
 *
 * Every line starts with "dtrain: " and a level word, so a user can tell
 * dtrain's voice from a rank's output.  The level is set once at start-up
 * (--quiet, --verbose, or DTRAIN_LOG=debug|info|warn|error).
 * Not for rank output (the agent copies that verbatim) or metrics.
 */
#ifndef DT_LOG_H
#define DT_LOG_H

enum dt_log_level { DT_LOG_DEBUG, DT_LOG_INFO, DT_LOG_WARN, DT_LOG_ERROR, DT_LOG_SILENT };

void dt_log_set_level(enum dt_log_level level);
enum dt_log_level dt_log_get_level(void);
/* Reads DTRAIN_LOG; unknown values leave the level as it is and say so. */
void dt_log_level_from_env(void);

void dt_log(enum dt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Called before each line the calling thread logs is written (the agent
 * ends a rank's unfinished console line first, so its message never lands
 * in the middle of a progress bar); other threads' lines do not call it.
 * NULL removes it.  One at a time. */
typedef void (*dt_log_before_fn)(void *ctx);
void dt_log_set_before(dt_log_before_fn fn, void *ctx);

#define dt_log_debug(...) dt_log(DT_LOG_DEBUG, __VA_ARGS__)
#define dt_log_info(...) dt_log(DT_LOG_INFO, __VA_ARGS__)
#define dt_log_warn(...) dt_log(DT_LOG_WARN, __VA_ARGS__)
#define dt_log_error(...) dt_log(DT_LOG_ERROR, __VA_ARGS__)

#endif
