/* error.c - the thread-local error message behind error.h.
 *
 * One fixed buffer per thread: setting an error never allocates, so it is
 * safe on out-of-memory paths and inside the step loop.
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DT_ERROR_MAX 1024

static _Thread_local char error_message[DT_ERROR_MAX];
static _Thread_local int error_code;

int dt_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    error_code = code;
    return code;
}

int dt_error_set_errno(int code, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof error_message)
        snprintf(error_message + n, sizeof error_message - (size_t)n, ": %s", strerror(errnum));
    error_code = code;
    return code;
}

int dt_error_prefix(const char *fmt, ...)
{
    /* Built by hand rather than with snprintf("%s: %s") so that a long
     * context truncates the tail of the message instead of failing. */
    char joined[DT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, sizeof joined, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n;
    if (used > sizeof joined - 1)
        used = sizeof joined - 1;
    if (error_message[0] && used + 2 < sizeof joined) {
        joined[used++] = ':';
        joined[used++] = ' ';
        size_t room = sizeof joined - 1 - used;
        size_t len = strnlen(error_message, room);
        memcpy(joined + used, error_message, len);
        used += len;
    }
    joined[used] = '\0';
    memcpy(error_message, joined, used + 1);
    return error_code;
}

const char *dt_error_last(void) { return error_message; }

int dt_error_code(void) { return error_code; }

void dt_error_clear(void)
{
    error_message[0] = '\0';
    error_code = DT_OK;
}

const char *dt_error_name(int code)
{
    switch (code) {
    case DT_OK: return "success";
    case DT_EINVAL: return "invalid input";
    case DT_ENOMEM: return "out of memory or over a limit";
    case DT_EIO: return "input/output error";
    case DT_ETIMEDOUT: return "timed out";
    case DT_ECONN: return "connection failed";
    case DT_EPROTO: return "protocol error";
    case DT_ENOTFOUND: return "not found";
    case DT_EAUTH: return "authentication failed";
    case DT_EABORTED: return "aborted";
    case DT_EUNSUPPORTED: return "not supported";
    case DT_EINTERNAL: return "internal error";
    }
    return "unknown error";
}
