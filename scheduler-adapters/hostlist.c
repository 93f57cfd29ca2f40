/* hostlist.c - expands Slurm hostlist expressions (see hostlist.h).
 *
 * Two passes per comma-separated item: parse it into literal pieces and
 * bracket groups (checking every character, so an error names its column),
 * then count the hosts before making any, and expand the cartesian product
 * with an odometer whose leftmost group turns slowest, as Slurm orders them.
 * A number's width is the width of the range's low bound as written, so
 * [08-10] gives 08 09 10 and [8-10] gives 8 9 10 (Slurm's rule).
 *
 * Not for compressing a list back into brackets, or for name resolution.
 */
#include "scheduler-adapters/hostlist.h"

#include "base/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 8  /* bracket groups in one host expression (rack[..]_blade[..] needs two) */
#define MAX_DIGITS 18 /* fits an unsigned long long with room to add one */

struct range {
    unsigned long long lo, hi;
    int width;
};

struct group {
    const char *lit; /* the literal text before the bracket */
    size_t lit_len;
    struct range *r;
    int nr;
};

struct item {
    const char *start;
    struct group g[MAX_GROUPS];
    int ng;
    const char *tail; /* the literal text after the last bracket */
    size_t tail_len;
};

struct parser {
    const char *expr;
    const char *p;
};

static int fail(const struct parser *ps, const char *at, const char *fmt, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, what);
    return dt_error_set(DT_EINVAL, "hostlist \"%.200s\"%s: column %d: %s", ps->expr,
                        strlen(ps->expr) > 200 ? "..." : "", (int)(at - ps->expr) + 1, msg);
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

/* A printable form of one character for messages. */
static const char *show(char c, char buf[8])
{
    if (c == 0)
        return "the end";
    if (c == ' ')
        return "a space";
    if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        snprintf(buf, 8, "0x%02x", (unsigned char)c);
    else
        snprintf(buf, 8, "'%c'", c);
    return buf;
}

static int parse_number(struct parser *ps, unsigned long long *v, int *width)
{
    char tmp[8];
    const char *start = ps->p;
    if (*ps->p < '0' || *ps->p > '9')
        return fail(ps, ps->p, "expected a number inside the brackets, found %s", show(*ps->p, tmp));
    unsigned long long x = 0;
    while (*ps->p >= '0' && *ps->p <= '9') {
        if (ps->p - start >= MAX_DIGITS)
            return fail(ps, start, "%s", "number has more than 18 digits");
        x = x * 10 + (unsigned long long)(*ps->p - '0');
        ps->p++;
    }
    *v = x;
    *width = (int)(ps->p - start);
    return 0;
}

/* One bracket group; ps->p is just past '['. */
static int parse_group(struct parser *ps, const char *open, struct group *g)
{
    char tmp[8];
    if (*ps->p == ']')
        return fail(ps, ps->p, "%s", "empty brackets: expected numbers like [1-4,7]");
    for (;;) {
        if (*ps->p == 0)
            return fail(ps, open, "%s", "this '[' is never closed");
        const char *at = ps->p;
        struct range r;
        int hi_width, rc = parse_number(ps, &r.lo, &r.width);
        if (rc < 0)
            return rc;
        r.hi = r.lo;
        if (*ps->p == '-') {
            ps->p++;
            if ((rc = parse_number(ps, &r.hi, &hi_width)) < 0)
                return rc;
            if (r.hi < r.lo)
                return fail(ps, at, "%s", "range runs backwards (the high bound is below the low one)");
        }
        struct range *nr = realloc(g->r, (size_t)(g->nr + 1) * sizeof *nr);
        if (!nr)
            return dt_error_set(DT_ENOMEM, "out of memory parsing a hostlist");
        g->r = nr;
        g->r[g->nr++] = r;
        if (*ps->p == ']') {
            ps->p++;
            return 0;
        }
        if (*ps->p == 0)
            return fail(ps, open, "%s", "this '[' is never closed");
        if (*ps->p == '[')
            return fail(ps, ps->p, "%s", "brackets cannot nest");
        if (*ps->p != ',')
            return fail(ps, ps->p, "expected ',', '-' or ']' after a number, found %s", show(*ps->p, tmp));
        ps->p++;
        if (*ps->p == ',' || *ps->p == ']')
            return fail(ps, ps->p, "%s", "empty element between commas inside the brackets");
    }
}

/* One host expression up to a top-level ',' or the end. */
static int parse_item(struct parser *ps, struct item *it)
{
    char tmp[8];
    const char *lit = ps->p;
    memset(it, 0, sizeof *it);
    it->start = ps->p;
    for (;;) {
        char c = *ps->p;
        if (c == 0 || c == ',') {
            if (ps->p == lit && it->ng == 0)
                return fail(ps, ps->p, "%s",
                            "empty host name (two commas in a row, or a comma at the start or end)");
            it->tail = lit;
            it->tail_len = (size_t)(ps->p - lit);
            return 0;
        }
        if (c == '[') {
            if (it->ng == MAX_GROUPS)
                return fail(ps, ps->p, "%s", "more than 8 bracket groups in one host name");
            struct group *g = &it->g[it->ng++];
            g->lit = lit;
            g->lit_len = (size_t)(ps->p - lit);
            const char *open = ps->p++;
            int rc = parse_group(ps, open, g);
            if (rc < 0)
                return rc;
            lit = ps->p;
            continue;
        }
        if (c == ']')
            return fail(ps, ps->p, "%s", "']' without a matching '['");
        if (!name_char(c))
            return fail(ps, ps->p, "%s cannot be part of a host name (letters, digits, '-', '.', '_')",
                        show(c, tmp));
        ps->p++;
    }
}

static void item_free(struct item *it)
{
    for (int i = 0; i < it->ng; i++)
        free(it->g[i].r);
    it->ng = 0;
}

/* Hosts of one group, and of one item; -1 past DT_HOSTLIST_MAX_HOSTS. */
static long long group_count(const struct group *g)
{
    long long n = 0;
    for (int i = 0; i < g->nr; i++) {
        unsigned long long span = g->r[i].hi - g->r[i].lo;
        if (span >= DT_HOSTLIST_MAX_HOSTS || n + (long long)span + 1 > DT_HOSTLIST_MAX_HOSTS)
            return -1;
        n += (long long)span + 1;
    }
    return n;
}

static long long item_count(const struct item *it)
{
    long long n = 1;
    for (int i = 0; i < it->ng; i++) {
        long long k = group_count(&it->g[i]);
        if (k < 0 || n * k > DT_HOSTLIST_MAX_HOSTS)
            return -1;
        n *= k;
    }
    return n;
}

/* The value at position pos of a group (pos < group_count). */
static unsigned long long group_value(const struct group *g, long long pos, int *width)
{
    for (int i = 0;; i++) {
        long long size = (long long)(g->r[i].hi - g->r[i].lo) + 1;
        if (pos < size) {
            *width = g->r[i].width;
            return g->r[i].lo + (unsigned long long)pos;
        }
        pos -= size;
    }
}

static int emit(struct parser *ps, const struct item *it, const long long *pos, struct dt_hostlist *out)
{
    char name[DT_HOSTLIST_NAME_MAX + 2];
    size_t len = 0;
    for (int i = 0; i <= it->ng; i++) {
        const char *lit = i < it->ng ? it->g[i].lit : it->tail;
        size_t n = i < it->ng ? it->g[i].lit_len : it->tail_len;
        char num[32] = "";
        if (i < it->ng) {
            int w;
            unsigned long long v = group_value(&it->g[i], pos[i], &w);
            snprintf(num, sizeof num, "%0*llu", w, v);
        }
        size_t k = strlen(num);
        if (len + n + k > DT_HOSTLIST_NAME_MAX)
            return fail(ps, it->start, "%s", "a host name here would be longer than 255 characters");
        memcpy(name + len, lit, n);
        memcpy(name + len + n, num, k);
        len += n + k;
    }
    name[len] = 0;
    char *copy = strdup(name);
    if (!copy)
        return dt_error_set(DT_ENOMEM, "out of memory expanding a hostlist");
    out->hosts[out->n++] = copy;
    return 0;
}

static int expand_item(struct parser *ps, const struct item *it, struct dt_hostlist *out)
{
    long long pos[MAX_GROUPS] = {0}, size[MAX_GROUPS];
    for (int i = 0; i < it->ng; i++)
        size[i] = group_count(&it->g[i]);
    for (;;) {
        int rc = emit(ps, it, pos, out);
        if (rc < 0)
            return rc;
        int i = it->ng - 1; /* the rightmost group turns fastest */
        while (i >= 0 && ++pos[i] == size[i])
            pos[i--] = 0;
        if (i < 0)
            return 0;
    }
}

static int too_many(struct parser *ps)
{
    return dt_error_set(DT_EINVAL, "hostlist \"%.200s\"%s: more than %d hosts", ps->expr,
                        strlen(ps->expr) > 200 ? "..." : "", DT_HOSTLIST_MAX_HOSTS);
}

int dt_hostlist_expand(const char *expr, struct dt_hostlist *out)
{
    memset(out, 0, sizeof *out);
    if (!expr || !*expr)
        return dt_error_set(DT_EINVAL, "hostlist is empty: expected names like node[01-04,07]");
    struct parser ps = {.expr = expr, .p = expr};
    struct item it;
    long long total = 0;
    int rc;
    /* First pass: check everything and count, so nothing is allocated for bad input. */
    for (;;) {
        if ((rc = parse_item(&ps, &it)) < 0)
            goto fail_item;
        long long n = item_count(&it);
        item_free(&it);
        if (n < 0 || (total += n) > DT_HOSTLIST_MAX_HOSTS)
            return too_many(&ps);
        if (*ps.p == 0)
            break;
        ps.p++;
        if (*ps.p == 0)
            return fail(&ps, ps.p - 1, "%s",
                        "empty host name (two commas in a row, or a comma at the start or end)");
    }
    out->hosts = calloc((size_t)total, sizeof *out->hosts);
    if (!out->hosts)
        return dt_error_set(DT_ENOMEM, "out of memory expanding a hostlist of %lld hosts", total);
    for (ps.p = expr;;) {
        if ((rc = parse_item(&ps, &it)) < 0 || (rc = expand_item(&ps, &it, out)) < 0)
            goto fail_item;
        item_free(&it);
        if (*ps.p == 0)
            return 0;
        ps.p++;
    }
fail_item:
    item_free(&it);
    dt_hostlist_free(out);
    return rc;
}

void dt_hostlist_free(struct dt_hostlist *hl)
{
    for (int i = 0; i < hl->n; i++)
        free(hl->hosts[i]);
    free(hl->hosts);
    hl->hosts = NULL;
    hl->n = 0;
}

int dt_hostlist_nth(const char *expr, int index, char *out, size_t size)
{
    struct dt_hostlist hl;
    int rc = dt_hostlist_expand(expr, &hl);
    if (rc < 0)
        return rc;
    if (index < 0 || index >= hl.n) {
        rc = dt_error_set(DT_EINVAL, "hostlist \"%.200s\" has %d host%s; there is no host number %d", expr,
                          hl.n, hl.n == 1 ? "" : "s", index);
    } else if (snprintf(out, size, "%s", hl.hosts[index]) >= (int)size) {
        rc = dt_error_set(DT_EINVAL, "host name %s is longer than %zu characters", hl.hosts[index], size - 1);
    }
    dt_hostlist_free(&hl);
    return rc;
}
