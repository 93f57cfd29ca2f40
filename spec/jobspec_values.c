/* jobspec_values.c - reading one scalar of the job spec: numbers, durations, sizes, and the error text.
 *
 * Every "expected X, got 'Y'" message of the spec is worded here, so they all
 * read alike and carry "<file>:<line>:<column>: <dotted.key>:".
 *
 * Not for walking sections or knowing key names (jobspec_keys.c).
 */
#include "spec/jobspec_keys.h"

#include "base/error.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *dt_spec_path(const struct dt_spec_ctx *ctx, const char *key, char *buf, size_t size)
{
    if (!key)
        snprintf(buf, size, "%s", ctx->path);
    else if (ctx->path[0])
        snprintf(buf, size, "%s.%s", ctx->path, key);
    else
        snprintf(buf, size, "%s", key);
    return buf;
}

int dt_spec_report(struct dt_spec_ctx *ctx, const struct dt_ynode *at, const char *fmt, ...)
{
    char msg[900], where[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at->line < 0 && ctx->sets)
        snprintf(where, sizeof where, "--set %.300s", ctx->sets[-at->line - 1]);
    else
        snprintf(where, sizeof where, "%s:%d:%d", ctx->file, at->line, at->col);
    int rc = dt_error_set(DT_EINVAL, "%s: %s", where, msg);
    if (ctx->n_problems == ctx->cap_problems) {
        int cap = ctx->cap_problems ? 2 * ctx->cap_problems : 8;
        struct dt_spec_problem *p = realloc(ctx->problems, (size_t)cap * sizeof *p);
        if (!p)
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        ctx->problems = p;
        ctx->cap_problems = cap;
    }
    char *copy = strdup(dt_error_last());
    if (!copy)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    /* Overrides are applied after the file, so their problems sort after its. */
    ctx->problems[ctx->n_problems] = (struct dt_spec_problem){
        .line = at->line < 0 ? INT_MAX : at->line, .col = at->line < 0 ? -at->line : at->col,
        .seq = ctx->n_problems, .msg = copy};
    ctx->n_problems++;
    return rc;
}

int dt_spec_fail(struct dt_spec_ctx *ctx, const struct dt_ynode *at, const char *key, const char *fmt, ...)
{
    char msg[768], path[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dt_spec_path(ctx, key, path, sizeof path);
    if (path[0])
        return dt_spec_report(ctx, at, "%s: %s", path, msg);
    return dt_spec_report(ctx, at, "%s", msg);
}

static int cmp_problem(const void *a, const void *b)
{
    const struct dt_spec_problem *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->seq - y->seq;
}

void dt_spec_problems_finish(struct dt_spec_ctx *ctx, char **joined)
{
    if (joined)
        *joined = NULL;
    if (ctx->n_problems > 1) /* qsort's base may not be NULL, even for no element */
        qsort(ctx->problems, (size_t)ctx->n_problems, sizeof *ctx->problems, cmp_problem);
    char *text = NULL;
    size_t len = 0;
    FILE *m = joined && ctx->n_problems ? open_memstream(&text, &len) : NULL;
    for (int i = 0; i < ctx->n_problems; i++) {
        if (m)
            fprintf(m, "%s\n", ctx->problems[i].msg);
        if (i == 0)
            dt_error_set(DT_EINVAL, "%s", ctx->problems[i].msg);
        free(ctx->problems[i].msg);
    }
    if (m && fclose(m) == 0)
        *joined = text;
    else
        free(m ? text : NULL);
    free(ctx->problems);
    ctx->problems = NULL;
    ctx->n_problems = ctx->cap_problems = 0;
}

const char *dt_spec_got(const struct dt_ynode *v, char *buf, size_t size)
{
    char q[96];
    if (v->kind == DT_Y_SCALAR && !dt_ynode_is_null(v))
        snprintf(buf, size, "'%s'", dt_yaml_quote(v->text, q, sizeof q));
    else
        snprintf(buf, size, "%s", dt_ynode_kind_name(v));
    return buf;
}

int dt_spec_scalar(struct dt_spec_ctx *ctx, const char *key, const struct dt_ynode *v, const char *what)
{
    if (v->kind == DT_Y_SCALAR && !dt_ynode_is_null(v))
        return 0;
    return dt_spec_fail(ctx, v, key, "expected %s, got %s", what, dt_ynode_kind_name(v));
}

int dt_spec_parse_int(const char *s, long long *out)
{
    if (!*s || isspace((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = x;
    return 0;
}

/* strtod alone would take "nan", "inf" and hex floats; a job spec wants
 * plain decimal numbers like 3e-4. */
int dt_spec_parse_num(const char *s, double *out)
{
    int digits = 0;
    for (const char *p = s; *p; p++) {
        if (isdigit((unsigned char)*p))
            digits = 1;
        else if (!strchr("+-.eE", *p))
            return -1;
    }
    if (!digits)
        return -1;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || !isfinite(x))
        return -1;
    *out = x;
    return 0;
}

/* Reads a leading unsigned decimal ("1.5") and advances *s past it. */
static int leading_number(const char **s, double *out)
{
    const char *p = *s;
    if (!isdigit((unsigned char)*p))
        return -1;
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    if (errno || end == p || !isfinite(x))
        return -1;
    for (const char *q = p; q < end; q++)
        if (!isdigit((unsigned char)*q) && *q != '.')
            return -1; /* no exponents or hex inside durations and sizes */
    *out = x;
    *s = end;
    return 0;
}

int dt_spec_parse_duration(const char *s, double *seconds)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
    double total = 0;
    if (!*s)
        return -1;
    while (*s) {
        double x;
        if (leading_number(&s, &x))
            return -1;
        size_t i, n = sizeof units / sizeof units[0];
        for (i = 0; i < n; i++) {
            size_t len = strlen(units[i].unit);
            if (strncmp(s, units[i].unit, len) == 0 && !isalpha((unsigned char)s[len]))
                break;
        }
        if (i == n)
            return -1;
        total += x * units[i].scale;
        s += strlen(units[i].unit);
    }
    *seconds = total;
    return 0;
}

int dt_spec_parse_bytes(const char *s, double plain_unit, double *bytes)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {
        {"B", 1},
        {"K", 1e3},
        {"KB", 1e3},
        {"M", 1e6},
        {"MB", 1e6},
        {"G", 1e9},
        {"GB", 1e9},
        {"T", 1e12},
        {"TB", 1e12},
        {"Ki", 1024.0},
        {"KiB", 1024.0},
        {"Mi", 1048576.0},
        {"MiB", 1048576.0},
        {"Gi", 1073741824.0},
        {"GiB", 1073741824.0},
        {"Ti", 1099511627776.0},
        {"TiB", 1099511627776.0},
    };
    double x;
    if (leading_number(&s, &x))
        return -1;
    while (*s == ' ')
        s++;
    if (!*s) {
        *bytes = x * plain_unit;
        return 0;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(s, units[i].unit) == 0) {
            *bytes = x * units[i].scale;
            return 0;
        }
    }
    return -1;
}

static void range_text(const struct dt_spec_key *k, int integer, char *buf, size_t size)
{
    const char *noun = integer                     ? "an integer"
                       : k->type == DT_KT_DURATION ? "a duration"
                       : k->type == DT_KT_SIZE_MB  ? "a size"
                       : k->type == DT_KT_BYTES    ? "a size"
                                                   : "a number";
    const char *unit = k->type == DT_KT_SIZE_MB ? " MiB" : k->type == DT_KT_BYTES ? " bytes" : "";
    int lo = (k->flags & DT_KF_LO) != 0, hi = (k->flags & DT_KF_HI) != 0;
    if (lo && hi && integer)
        snprintf(buf, size, "%s from %.15g to %.15g", noun, k->lo, k->hi);
    else if (lo && hi)
        snprintf(buf, size, "%s in %c%.15g, %.15g%c%s", noun, k->flags & DT_KF_LO_X ? '(' : '[', k->lo, k->hi,
                 k->flags & DT_KF_HI_X ? ')' : ']', unit);
    else if (lo)
        snprintf(buf, size, "%s %s %.15g%s", noun, k->flags & DT_KF_LO_X ? ">" : ">=", k->lo, unit);
    else if (hi)
        snprintf(buf, size, "%s %s %.15g%s", noun, k->flags & DT_KF_HI_X ? "<" : "<=", k->hi, unit);
    else
        snprintf(buf, size, "%s", noun);
}

int dt_spec_check_range(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                        double x, int integer)
{
    int bad = 0;
    if (k->flags & DT_KF_LO)
        bad |= (k->flags & DT_KF_LO_X) ? !(x > k->lo) : !(x >= k->lo);
    if (k->flags & DT_KF_HI)
        bad |= (k->flags & DT_KF_HI_X) ? !(x < k->hi) : !(x <= k->hi);
    if (!bad)
        return 0;
    char want[128], q[96];
    range_text(k, integer, want, sizeof want);
    return dt_spec_fail(ctx, v, k->name, "expected %s, got '%s'", want, dt_yaml_quote(v->text, q, sizeof q));
}
