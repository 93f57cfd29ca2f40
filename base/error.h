/* error.h - dtrain's error codes and the per-thread error message.
 *
 * Every fallible function returns 0 or a negative DT_E* code and leaves a
 * sentence for a human in a thread-local buffer: dt_error_set() writes it,
 * dt_error_last() reads it.  Callers that add context (which file, which
 * peer) wrap the message with dt_error_prefix() instead of replacing it, so
 * the user reads "job.yaml: rendezvous.timeout: expected a duration like 30s"
 * rather than an errno.
 *
 * Not for logging: nothing here prints.  See log.h.
 */
#ifndef DT_ERROR_H
#define DT_ERROR_H

enum dt_error_code {
    DT_OK = 0,
    DT_EINVAL = -1,      /* bad input: spec, argument, frame, data file */
    DT_ENOMEM = -2,      /* allocation failed or a configured limit was hit */
    DT_EIO = -3,         /* a file or socket operation failed */
    DT_ETIMEDOUT = -4,   /* a deadline passed */
    DT_ECONN = -5,       /* a peer could not be reached or went away */
    DT_EPROTO = -6,      /* a peer spoke the protocol wrongly */
    DT_ENOTFOUND = -7,   /* a key, file or host does not exist */
    DT_EAUTH = -8,       /* the job token was missing or wrong */
    DT_EABORTED = -9,    /* the operation was cancelled (abort, signal) */
    DT_EUNSUPPORTED = -10, /* not built in, or not possible on this machine */
    DT_EINTERNAL = -11,  /* a bug in dtrain: the message says where */
};

/* Sets the message (printf format) and returns `code`, so that a failing
 * path reads `return dt_error_set(DT_EINVAL, "...", ...);`. */
int dt_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like dt_error_set, with ": <strerror(errnum)>" appended. */
int dt_error_set_errno(int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts context in front of the current message: "<context>: <message>".
 * Returns the code of the current error so it can be passed up unchanged. */
int dt_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The message of the last error set on this thread ("" if none). */
const char *dt_error_last(void);

/* The code of the last error set on this thread (DT_OK if none). */
int dt_error_code(void);

/* Forgets the current error. */
void dt_error_clear(void);

/* A short name for a code: "invalid input", "timed out", ... */
const char *dt_error_name(int code);

#endif
