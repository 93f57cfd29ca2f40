/* env.c - checked whole numbers from the environment (see env.h). */
#include "base/env.h"

#include <errno.h>
#include <stdlib.h>

#include "base/error.h"

int dt_env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno == ERANGE || x < lo || x > hi)
        return dt_error_set(DT_EINVAL, "%s=\"%s\": expected a whole number from %llu to %llu", name, v,
                            (unsigned long long)lo, (unsigned long long)hi);
    *out = x;
    return 0;
}

int dt_env_int(const char *name, int def, int lo, int hi, int *out)
{
    uint64_t v;
    int rc = dt_env_u64(name, (uint64_t)def, (uint64_t)lo, (uint64_t)hi, &v);
    *out = (int)v;
    return rc;
}
