/* args.c - durations and rank lists from the command line (see args.h). */
#include "base/args.h"

#include "base/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dt_args_seconds(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0 || v > 3600 || (*end && strcmp(end, "s") != 0))
        return -1;
    *out = v;
    return 0;
}

static int parse_rank(const char *s, char **end, int world, const char *list)
{
    errno = 0;
    long v = strtol(s, end, 10);
    if (*end == s || errno != 0 || v < 0)
        return dt_error_set(DT_EINVAL, "--ranks '%s': expected rank numbers like 0,2,4-7", list);
    if (v >= world)
        return dt_error_set(DT_EINVAL, "--ranks '%s': rank %ld does not exist (the job has %d ranks: 0-%d)",
                            list, v, world, world - 1);
    return (int)v;
}

int dt_args_ranks(const char *list, int world, unsigned char *mask)
{
    memset(mask, 0, (size_t)world);
    const char *p = list;
    if (!*p)
        return dt_error_set(DT_EINVAL, "--ranks: expected rank numbers like 0,2,4-7, got nothing");
    for (;;) {
        char *end;
        int lo = parse_rank(p, &end, world, list);
        if (lo < 0)
            return lo;
        int hi = lo;
        if (*end == '-') {
            p = end + 1;
            hi = parse_rank(p, &end, world, list);
            if (hi < 0)
                return hi;
            if (hi < lo)
                return dt_error_set(DT_EINVAL, "--ranks '%s': range %d-%d runs backwards", list, lo, hi);
        }
        for (int r = lo; r <= hi; r++)
            mask[r] = 1;
        if (*end == 0)
            return 0;
        if (*end != ',')
            return dt_error_set(
                DT_EINVAL, "--ranks '%s': unexpected '%c'; expected rank numbers like 0,2,4-7", list, *end);
        p = end + 1;
    }
}
