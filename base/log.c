/* log.c - dtrain's own stderr lines (see log.h).
 *
 * Each line is formatted into one buffer and written with a single write(2),
 * so lines from the coordinator thread and the agent never interleave.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static enum dt_log_level log_level = DT_LOG_INFO;
/* The hook is its setter's thread's alone: another thread that logs (the
 * coordinator's) never runs it, so it needs no lock. */
static _Thread_local dt_log_before_fn before_fn;
static _Thread_local void *before_ctx;

void dt_log_set_before(dt_log_before_fn fn, void *ctx)
{
    before_fn = fn;
    before_ctx = ctx;
}

void dt_log_set_level(enum dt_log_level level) { log_level = level; }

enum dt_log_level dt_log_get_level(void) { return log_level; }

void dt_log_level_from_env(void)
{
    const char *v = getenv("DTRAIN_LOG");
    if (!v || !*v)
        return;
    static const char *names[] = {"debug", "info", "warn", "error", "silent"};
    for (int i = 0; i < 5; i++) {
        if (strcmp(v, names[i]) == 0) {
            log_level = (enum dt_log_level)i;
            return;
        }
    }
    dt_log_warn("DTRAIN_LOG=%s is not one of debug, info, warn, error, silent; keeping the default", v);
}

void dt_log(enum dt_log_level level, const char *fmt, ...)
{
    if (level < log_level)
        return;
    static const char *words[] = {"debug: ", "", "warning: ", "error: ", ""};
    char line[2048];
    int n = snprintf(line, sizeof line, "dtrain: %s", words[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    if (before_fn)
        before_fn(before_ctx);
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
