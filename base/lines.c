/* lines.c - a byte stream cut into lines (see lines.h). */
#include "base/lines.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

int dt_lines_init(struct dt_lines *lb, size_t cap)
{
    lb->buf = malloc(cap);
    lb->len = 0;
    lb->cap = cap;
    lb->cr = false;
    lb->end = '\n';
    if (!lb->buf)
        return dt_error_set(DT_ENOMEM, "out of memory for a %zu-byte line buffer", cap);
    return 0;
}

void dt_lines_free(struct dt_lines *lb)
{
    free(lb->buf);
    lb->buf = NULL;
    lb->len = lb->cap = 0;
}

/* Appends to the pending piece; when it fills up, hands it over as an
 * unfinished line so no writer can make the reader buffer without bound. */
static void append_pending(struct dt_lines *lb, const char *data, size_t n, dt_lines_fn fn, void *ctx)
{
    while (n > 0) {
        size_t room = lb->cap - lb->len;
        size_t take = n < room ? n : room;
        memcpy(lb->buf + lb->len, data, take);
        lb->len += take;
        data += take;
        n -= take;
        if (lb->len == lb->cap) {
            lb->end = DT_LINES_CUT;
            fn(ctx, lb->buf, lb->len, false);
            lb->len = 0;
        }
    }
}

/* The end of the next piece: a newline, or with cr a carriage return before it. */
static const char *piece_end(const struct dt_lines *lb, const char *data, size_t n)
{
    const char *nl = memchr(data, '\n', n);
    if (!lb->cr)
        return nl;
    const char *cr = memchr(data, '\r', nl ? (size_t)(nl - data) : n);
    return cr ? cr : nl;
}

void dt_lines_feed(struct dt_lines *lb, const char *data, size_t n, dt_lines_fn fn, void *ctx)
{
    while (n > 0) {
        const char *nl = piece_end(lb, data, n);
        if (!nl) {
            append_pending(lb, data, n, fn, ctx);
            return;
        }
        size_t part = (size_t)(nl - data);
        if (lb->len == 0) {
            /* The common case: a whole line inside this read, handed over in place. */
            while (part > lb->cap) {
                lb->end = DT_LINES_CUT;
                fn(ctx, data, lb->cap, false);
                data += lb->cap;
                n -= lb->cap;
                part -= lb->cap;
            }
            lb->end = *nl;
            fn(ctx, data, part, true);
        } else if (lb->len + part <= lb->cap) {
            memcpy(lb->buf + lb->len, data, part);
            lb->end = *nl;
            fn(ctx, lb->buf, lb->len + part, true);
            lb->len = 0;
        } else {
            append_pending(lb, data, part, fn, ctx);
            lb->end = *nl;
            fn(ctx, lb->buf, lb->len, true);
            lb->len = 0;
        }
        data += part + 1;
        n -= part + 1;
    }
}

void dt_lines_flush(struct dt_lines *lb, dt_lines_fn fn, void *ctx)
{
    lb->end = '\n';
    if (lb->len > 0)
        fn(ctx, lb->buf, lb->len, true);
    lb->len = 0;
}

void dt_lines_take(struct dt_lines *lb, dt_lines_fn fn, void *ctx)
{
    lb->end = DT_LINES_OPEN;
    if (lb->len > 0)
        fn(ctx, lb->buf, lb->len, false);
    lb->len = 0;
}
