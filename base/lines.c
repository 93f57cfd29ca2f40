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
            fn(ctx, lb->buf, lb->len, false);
            lb->len = 0;
        }
    }
}

void dt_lines_feed(struct dt_lines *lb, const char *data, size_t n, dt_lines_fn fn, void *ctx)
{
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        if (!nl) {
            append_pending(lb, data, n, fn, ctx);
            return;
        }
        size_t part = (size_t)(nl - data);
        if (lb->len == 0) {
            /* The common case: a whole line inside this read, handed over in place. */
            while (part > lb->cap) {
                fn(ctx, data, lb->cap, false);
                data += lb->cap;
                n -= lb->cap;
                part -= lb->cap;
            }
            fn(ctx, data, part, true);
        } else if (lb->len + part <= lb->cap) {
            memcpy(lb->buf + lb->len, data, part);
            fn(ctx, lb->buf, lb->len + part, true);
            lb->len = 0;
        } else {
            append_pending(lb, data, part, fn, ctx);
            fn(ctx, lb->buf, lb->len, true);
            lb->len = 0;
        }
        data += part + 1;
        n -= part + 1;
    }
}

void dt_lines_flush(struct dt_lines *lb, dt_lines_fn fn, void *ctx)
{
    if (lb->len > 0)
        fn(ctx, lb->buf, lb->len, true);
    lb->len = 0;
}
