/* agent_output.c - the pure parts of rank output handling: splitting a byte
 * stream into lines, the "[rank N]" prefix, the stderr tail kept for the
 * failure summary, and the --ranks list.
 *
 * Nothing here reads pipes or writes files (agent_supervise.c does); these
 * functions only shape bytes, so the unit tests can drive them directly.
 */
#include "launcher/agent.h"

#include "base/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dt_agent_linebuf_init(struct dt_agent_linebuf *lb, size_t cap)
{
    lb->buf = malloc(cap);
    lb->len = 0;
    lb->cap = cap;
    if (!lb->buf)
        return dt_error_set(DT_ENOMEM, "out of memory for a %zu-byte line buffer", cap);
    return 0;
}

void dt_agent_linebuf_free(struct dt_agent_linebuf *lb)
{
    free(lb->buf);
    lb->buf = NULL;
    lb->len = lb->cap = 0;
}

/* Appends to the pending piece; when it fills up, hands it over as an
 * unfinished line so no rank can make the agent buffer without bound. */
static void append_pending(struct dt_agent_linebuf *lb, const char *data, size_t n, dt_agent_line_fn fn,
                           void *ctx)
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

void dt_agent_linebuf_feed(struct dt_agent_linebuf *lb, const char *data, size_t n, dt_agent_line_fn fn,
                           void *ctx)
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

void dt_agent_linebuf_flush(struct dt_agent_linebuf *lb, dt_agent_line_fn fn, void *ctx)
{
    if (lb->len > 0)
        fn(ctx, lb->buf, lb->len, true);
    lb->len = 0;
}

size_t dt_agent_format_line(char *out, int rank, const char *line, size_t len)
{
    /* Hand-rolled rather than snprintf: this runs once per line of output. */
    char digits[16];
    int nd = 0;
    unsigned v = rank < 0 ? 0u : (unsigned)rank;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t o = 0;
    memcpy(out, "[rank ", 6);
    o = 6;
    while (nd > 0)
        out[o++] = digits[--nd];
    out[o++] = ']';
    out[o++] = ' ';
    memcpy(out + o, line, len);
    o += len;
    out[o++] = '\n';
    return o;
}

void dt_agent_tail_push(struct dt_agent_tail *t, const char *line, size_t len, bool complete)
{
    if (t->continuing) {
        /* Rest of a long line whose start is already kept: the start is what matters. */
        t->continuing = !complete;
        return;
    }
    char *dst = t->lines[t->next];
    size_t keep = len < DT_AGENT_TAIL_WIDTH - 1 ? len : DT_AGENT_TAIL_WIDTH - 1;
    memcpy(dst, line, keep);
    dst[keep] = 0;
    if (keep < len && keep >= 3)
        memcpy(dst + keep - 3, "...", 3);
    t->next = (t->next + 1) % DT_AGENT_TAIL_LINES;
    if (t->count < DT_AGENT_TAIL_LINES)
        t->count++;
    t->continuing = !complete;
}

int dt_agent_tail_copy(const struct dt_agent_tail *t, char out[][DT_AGENT_TAIL_WIDTH])
{
    int first = (t->next - t->count + DT_AGENT_TAIL_LINES) % DT_AGENT_TAIL_LINES;
    for (int i = 0; i < t->count; i++)
        memcpy(out[i], t->lines[(first + i) % DT_AGENT_TAIL_LINES], DT_AGENT_TAIL_WIDTH);
    return t->count;
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

int dt_agent_parse_ranks(const char *list, int world, unsigned char *mask)
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
