/* token.c - making, checking and reading the job token (token.h). */
#include "spec/token.h"

#include "base/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int dt_token_make(char out[DT_TOKEN_LEN + 1])
{
    uint8_t raw[DT_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dt_error_set_errno(DT_EIO, errno, "making the job token: getrandom");
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DT_TOKEN_LEN] = 0;
    return 0;
}

int dt_token_check(const char *t, const char *where)
{
    size_t n = strlen(t);
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)t[i]))
            n = 0;
    if (n != DT_TOKEN_LEN)
        return dt_error_set(DT_EINVAL, "the job token from %s must be %d hexadecimal characters (as `dtrain "
                                       "launch` or `openssl rand -hex 32` makes it)",
                            where, DT_TOKEN_LEN);
    return 0;
}

int dt_token_from_env(char out[DT_TOKEN_LEN + 1], bool *found)
{
    out[0] = 0;
    *found = false;
    const char *env = getenv("DTRAIN_JOB_TOKEN"), *file = getenv("DTRAIN_JOB_TOKEN_FILE");
    char line[256] = "";
    const char *where = "DTRAIN_JOB_TOKEN";
    if (env && *env) {
        snprintf(line, sizeof line, "%s", env);
    } else if (file && *file) {
        FILE *f = fopen(file, "r");
        if (!f)
            return dt_error_set_errno(DT_EIO, errno, "DTRAIN_JOB_TOKEN_FILE=%s", file);
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
        line[strcspn(line, "\r\n")] = 0;
        where = file;
    } else {
        return 0;
    }
    *found = true;
    int rc = dt_token_check(line, where);
    if (rc == 0)
        memcpy(out, line, DT_TOKEN_LEN + 1);
    memset(line, 0, sizeof line);
    return rc;
}
