/* fixture.h - helpers the trainer's unit tests share: reading the PyTorch
 * fixtures in tests/fixtures/ and comparing arrays with a named tolerance.
 * Header-only so each test stays one file; not a test itself. */
#ifndef DT_TEST_FIXTURE_H
#define DT_TEST_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/safetensors.h"

/* The number after "key": in a fixture's one-line JSON record. */
static inline double jnum(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    if (!p)
        fail_msg("no %s in %s", key, json);
    return strtod(p + strlen(pat), NULL);
}

/* Tests run from the repository root (scripts/run-tests.sh cds there). */
static inline void fixture_open(const char *name, struct dt_safetensors *f)
{
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/%s", name);
    int rc = dt_safetensors_read(path, f);
    if (rc)
        fail_msg("cannot read fixture %s: %s", path, dt_error_last());
}

static inline const struct dt_st_tensor *fixture_tensor(const struct dt_safetensors *f, const char *name,
                                                       const char *dtype)
{
    const struct dt_st_tensor *t = dt_safetensors_find(f, name);
    if (!t)
        fail_msg("fixture has no tensor '%s'", name);
    if (strcmp(t->dtype, dtype) != 0)
        fail_msg("fixture tensor '%s' is %s, expected %s", name, t->dtype, dtype);
    return t;
}

static inline size_t fixture_numel(const struct dt_st_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* Largest |a - b| / max(|b|, floor) over n floats; floor keeps near-zero
 * reference values from turning rounding noise into huge relative errors. */
static inline double max_rel_err_f32(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), s = fabs((double)b[i]);
        double e = d / (s > floor ? s : floor);
        if (e > worst || isnan(e))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

#endif
