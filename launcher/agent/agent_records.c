/* agent_records.c - the encoder and decoder of the agents' records in the
 * coordinator's store (the keys and layouts are in agent_records.h).
 *
 * The decoder is written for hostile input, as comm/store_wire.c is: it reads
 * through a cursor that never passes the value's end, copies each number into
 * a bounded token before converting it (a value need not be NUL-terminated,
 * and strtod would otherwise read on), checks every range, and refuses
 * whatever is left over.  The encoders write what the decoders accept, and
 * nothing else: a sentence's line breaks become spaces.
 *
 * Not for I/O: agent_link.c, agent_rounds.c, agent_elastic.c and
 * agent_hb_relay.c read and write the store.
 */
#include "launcher/agent/agent_records.h"

#include "base/error.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dt_agent__key(char *out, enum dt_agent__key which, int k, int node)
{
    switch (which) {
    case DT_AGENT__K_FAIL:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/fail/%d", k);
        break;
    case DT_AGENT__K_FAILINFO:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/failinfo/%d/%d", k, node);
        break;
    case DT_AGENT__K_RANKS:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/ranks/%d", node);
        break;
    case DT_AGENT__K_END:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/end/%d", k);
        break;
    case DT_AGENT__K_HB:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/hb/%d", node);
        break;
    case DT_AGENT__K_ROUND:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/round/%d", k);
        break;
    case DT_AGENT__K_CHANGE:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/change/%d", k);
        break;
    case DT_AGENT__K_SLOT_END:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/end/%d/%d", k, node);
        break;
    case DT_AGENT__K_VERDICT:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/verdict/%d", k);
        break;
    case DT_AGENT__K_INCARNATION:
        snprintf(out, DT_AGENT__KEY_MAX, "dtrain/incarnation/%d", node);
        break;
    }
    return out;
}

/* --- encoding ------------------------------------------------------------ */

void dt_agent__text_free(struct dt_agent__text *t)
{
    free(t->p);
    *t = (struct dt_agent__text){0};
}

static int reserve(struct dt_agent__text *t, size_t more)
{
    if (t->len + more + 1 <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p)
        return dt_error_set(DT_ENOMEM, "out of memory writing a record of %zu bytes for the other nodes",
                            t->len + more);
    t->p = p;
    t->cap = cap;
    return 0;
}

static int __attribute__((format(printf, 2, 3))) put(struct dt_agent__text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(t, (size_t)n) < 0)
        return DT_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
    return 0;
}

/* A sentence as one line: a line break inside would end the field. */
static int put_sentence(struct dt_agent__text *t, const char *s, const char *end)
{
    size_t n = strlen(s);
    if (reserve(t, n + strlen(end)) < 0)
        return DT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        t->p[t->len++] = s[i] == '\n' || s[i] == '\r' ? ' ' : s[i];
    t->p[t->len] = 0;
    return put(t, "%s", end);
}

/* --- decoding ------------------------------------------------------------ */

struct rd {
    const char *start, *p, *end;
    const char *what; /* the record's name, for messages */
};

static struct rd reader(const char *v, size_t len, const char *what)
{
    return (struct rd){v, v, v + len, what};
}

/* Refuses the record, quoting its start (what a terminal can show of it). */
static int bad(const struct rd *c, const char *why)
{
    char shown[64];
    size_t n = 0;
    for (const char *q = c->start; q < c->end && n < sizeof shown - 1; q++)
        shown[n++] = *q >= 0x20 && *q < 0x7f ? *q : '?';
    shown[n] = 0;
    return dt_error_set(DT_EPROTO, "%s '%s%s' is not one an agent writes: %s at byte %zu", c->what, shown,
                        c->end - c->start > (ptrdiff_t)n ? "..." : "", why, (size_t)(c->p - c->start));
}

/* The token of chars from `set` at the cursor, into tok (at most size - 1). */
static size_t token(const struct rd *c, const char *set, char *tok, size_t size)
{
    size_t n = 0;
    while (c->p + n < c->end && n < size - 1 && c->p[n] && strchr(set, c->p[n]))
        n++;
    memcpy(tok, c->p, n);
    tok[n] = 0;
    return n;
}

static int rd_ll(struct rd *c, long long min, long long max, long long *v)
{
    char tok[24], *stop;
    size_t n = token(c, "-0123456789", tok, sizeof tok);
    if (n == 0)
        return bad(c, "a number is missing");
    errno = 0;
    long long x = strtoll(tok, &stop, 10);
    if (*stop || n == sizeof tok - 1)
        return bad(c, "not a whole number");
    if (errno == ERANGE || x < min || x > max)
        return bad(c, "a number out of range");
    c->p += n;
    *v = x;
    return 0;
}

static int rd_int(struct rd *c, int min, int max, int *v)
{
    long long x;
    int rc = rd_ll(c, min, max, &x);
    if (rc == 0)
        *v = (int)x;
    return rc;
}

static int rd_bool(struct rd *c, bool *v)
{
    int x;
    int rc = rd_int(c, 0, 1, &x);
    if (rc == 0)
        *v = x;
    return rc;
}

static int rd_u64(struct rd *c, unsigned long long *v)
{
    char tok[24], *stop;
    size_t n = token(c, "0123456789", tok, sizeof tok);
    if (n == 0)
        return bad(c, "a number is missing");
    errno = 0;
    unsigned long long x = strtoull(tok, &stop, 10);
    if (*stop || errno == ERANGE || n == sizeof tok - 1)
        return bad(c, "a number out of range");
    c->p += n;
    *v = x;
    return 0;
}

/* A finite decimal number, at least min. */
static int rd_real(struct rd *c, double min, double *v)
{
    char tok[40], *stop;
    size_t n = token(c, "-+.0123456789eE", tok, sizeof tok);
    if (n == 0)
        return bad(c, "a number is missing");
    double x = strtod(tok, &stop);
    if (*stop || n == sizeof tok - 1 || !isfinite(x) || x < min)
        return bad(c, "not a finite number in range");
    c->p += n;
    *v = x;
    return 0;
}

static int rd_char(struct rd *c, char want)
{
    if (c->p >= c->end || *c->p != want)
        return bad(c, want == ' ' ? "a space expected" : want == '\n' ? "a line break expected" : "a mark expected");
    c->p++;
    return 0;
}

/* The rest of the line (cut to size - 1 bytes), and its line break. */
static int rd_line(struct rd *c, char *out, size_t size)
{
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (!nl)
        return bad(c, "a line without its end");
    size_t n = (size_t)(nl - c->p);
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), c->p);
    c->p = nl + 1;
    return 0;
}

/* The rest of the value (cut to size - 1 bytes). */
static void rd_rest(struct rd *c, char *out, size_t size)
{
    size_t n = (size_t)(c->end - c->p);
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), c->p);
    c->p = c->end;
}

static int rd_end(struct rd *c)
{
    return c->p == c->end ? 0 : bad(c, "more than the record");
}

/* --- abort, fail --------------------------------------------------------- */

int dt_agent__rec_abort_encode(const struct dt_agent__rec_abort *r, struct dt_agent__text *out)
{
    int rc = put(out, "%d ", r->status);
    return rc ? rc : put_sentence(out, r->why, "");
}

int dt_agent__rec_abort_decode(const char *v, size_t len, struct dt_agent__rec_abort *r)
{
    struct rd c = reader(v, len, "the job's abort");
    int rc = rd_int(&c, 0, 255, &r->status);
    if (rc == 0)
        rc = rd_char(&c, ' ');
    if (rc == 0)
        rd_rest(&c, r->why, sizeof r->why);
    return rc;
}

int dt_agent__rec_fail_encode(const struct dt_agent__rec_fail *r, struct dt_agent__text *out)
{
    return put(out, "%d %d %d %d", r->rank, r->wstatus, r->node, r->hung);
}

int dt_agent__rec_fail_decode(const char *v, size_t len, struct dt_agent__rec_fail *r)
{
    struct rd c = reader(v, len, "a round's failure");
    int rc = rd_int(&c, 0, INT_MAX, &r->rank);
    if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
        rc = rd_int(&c, 0, INT_MAX, &r->wstatus);
    if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
        rc = rd_int(&c, 0, INT_MAX, &r->node);
    if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
        rc = rd_bool(&c, &r->hung);
    return rc ? rc : rd_end(&c);
}

/* --- failinfo ------------------------------------------------------------ */

/* A traceback is kept line for line: "<n>\n" then its n lines. */
#define TRACEBACK_MAX_LINES 512

static int put_block(struct dt_agent__text *t, const char *text)
{
    int n = 0;
    for (const char *p = text; *p && n < TRACEBACK_MAX_LINES; n++) {
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    int rc = put(t, "%d\n", n);
    for (const char *p = text; rc == 0 && n-- > 0;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        rc = put(t, "%.*s\n", (int)len, p); /* a line of its own: no newline inside, and \r is text */
        p += len + (nl != NULL);
    }
    return rc;
}

static int rd_block(struct rd *c, char *out, size_t size)
{
    int n, rc = rd_int(c, 0, TRACEBACK_MAX_LINES, &n);
    if (rc == 0)
        rc = rd_char(c, '\n');
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
        if (!nl)
            return bad(c, "a traceback line without its end");
        size_t len = (size_t)(nl - c->p);
        if (used + len + 1 < size) { /* whole lines only: what does not fit is left out */
            memcpy(out + used, c->p, len);
            used += len;
            out[used++] = '\n';
            out[used] = 0;
        }
        c->p = nl + 1;
    }
    return rc;
}

int dt_agent__rec_failinfo_encode(const struct dt_agent__rec_failinfo *r, struct dt_agent__text *out)
{
    const struct dt_agent_failure *f = &r->f;
    int rc = put(out, "%d %d %d %d %.6f %d %lld %.6f %d %d %d\n", f->rank, f->wstatus, f->node, f->n_tail,
                 r->time_unix, f->hung, (long long)f->hung_step, r->detected_unix, f->oom_killer, f->final,
                 f->traceback_left_out);
    const char *lines[] = {f->host, f->error_file, f->error_message, f->hang_reason, f->hang_report};
    for (size_t i = 0; rc == 0 && i < sizeof lines / sizeof *lines; i++)
        rc = put_sentence(out, lines[i], "\n");
    for (int i = 0; rc == 0 && i < f->n_tail; i++)
        rc = put_sentence(out, f->tail[i], "\n");
    /* The tracebacks whole, for node 0's summary.json and report as the failing node saw them. */
    if (rc == 0)
        rc = put_block(out, f->error_traceback);
    if (rc == 0)
        rc = put_block(out, f->hang_traceback);
    return rc;
}

/* "<rank> <wstatus> <node> <n_tail> <time> <hung> <hung step> <detected> <oom> <final> <left out>\n" */
static int failinfo_head(struct rd *c, struct dt_agent__rec_failinfo *r)
{
    struct dt_agent_failure *f = &r->f;
    long long step = 0;
    int rc = rd_int(c, 0, INT_MAX, &f->rank);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &f->wstatus);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &f->node);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, DT_AGENT_TAIL_LINES, &f->n_tail);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_real(c, 0, &r->time_unix);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_bool(c, &f->hung);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_ll(c, -1, LLONG_MAX, &step);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_real(c, 0, &r->detected_unix);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, -1, 1, &f->oom_killer);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_bool(c, &f->final);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &f->traceback_left_out);
    f->hung_step = step;
    return rc ? rc : rd_char(c, '\n');
}

int dt_agent__rec_failinfo_decode(const char *v, size_t len, struct dt_agent__rec_failinfo *r)
{
    struct rd c = reader(v, len, "a failure's report");
    memset(r, 0, sizeof *r);
    struct dt_agent_failure *f = &r->f;
    int rc = failinfo_head(&c, r);
    struct {
        char *out;
        size_t size;
    } lines[] = {{f->host, sizeof f->host},
                 {f->error_file, sizeof f->error_file},
                 {f->error_message, sizeof f->error_message},
                 {f->hang_reason, sizeof f->hang_reason},
                 {f->hang_report, sizeof f->hang_report}};
    for (size_t i = 0; rc == 0 && i < sizeof lines / sizeof *lines; i++)
        rc = rd_line(&c, lines[i].out, lines[i].size);
    for (int i = 0; rc == 0 && i < f->n_tail; i++)
        rc = rd_line(&c, f->tail[i], DT_AGENT_TAIL_WIDTH);
    if (rc == 0)
        rc = rd_block(&c, f->error_traceback, sizeof f->error_traceback);
    if (rc == 0)
        rc = rd_block(&c, f->hang_traceback, sizeof f->hang_traceback);
    return rc ? rc : rd_end(&c);
}

/* --- ranks --------------------------------------------------------------- */

int dt_agent__rec_ranks_encode(const struct dt_agent__rec_rank *r, int n, struct dt_agent__text *out)
{
    int rc = reserve(out, 0); /* no ranks: an empty value, still a record */
    for (int i = 0; rc == 0 && i < n; i++)
        rc = put(out, "%d %d %d %d %d %d %.6f %.6f\n", r[i].round, r[i].rank, r[i].pid, r[i].exited,
                 r[i].wstatus, r[i].stopped, r[i].spawn_unix, r[i].exit_unix);
    return rc;
}

static int rank_line(struct rd *c, struct dt_agent__rec_rank *r)
{
    int rc = rd_int(c, 0, INT_MAX, &r->round);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &r->rank);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &r->pid);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_bool(c, &r->exited);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_int(c, 0, INT_MAX, &r->wstatus);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_bool(c, &r->stopped);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_real(c, 0, &r->spawn_unix);
    if (rc == 0 && (rc = rd_char(c, ' ')) == 0)
        rc = rd_real(c, 0, &r->exit_unix);
    return rc ? rc : rd_char(c, '\n');
}

int dt_agent__rec_ranks_decode(const char *v, size_t len, struct dt_agent__rec_rank **r, int *n)
{
    *r = NULL;
    *n = 0;
    if (len == 0) /* a node that had no place in any round */
        return 0;
    size_t lines = 1; /* each record ends a line: at most one per line break, or one refused */
    for (size_t i = 0; i < len; i++)
        lines += v[i] == '\n';
    if (lines > INT_MAX / 2 || !(*r = calloc(lines, sizeof **r)))
        return dt_error_set(DT_ENOMEM, "out of memory reading %zu rank records", lines);
    struct rd c = reader(v, len, "a node's rank records");
    int rc = 0;
    while (rc == 0 && c.p < c.end && (size_t)*n < lines)
        if ((rc = rank_line(&c, &(*r)[*n])) == 0)
            (*n)++;
    if (rc == 0)
        rc = rd_end(&c);
    if (rc) {
        free(*r);
        *r = NULL;
        *n = 0;
    }
    return rc;
}

/* --- heartbeats ---------------------------------------------------------- */

int dt_agent__rec_hb_encode(const struct dt_agent__rec_hb *r, struct dt_agent__text *out)
{
    int rc = put(out, "%llu\n", r->seq);
    for (int i = 0; rc == 0 && i < r->n; i++)
        rc = put(out, "%d %" PRId64 " %.3f\n", r->e[i].rank, r->e[i].step, r->e[i].age_s);
    return rc;
}

int dt_agent__rec_hb_decode(const char *v, size_t len, int cap, struct dt_agent__rec_hb *r)
{
    struct rd c = reader(v, len, "a heartbeat relay");
    r->n = 0;
    int rc = rd_u64(&c, &r->seq);
    if (rc == 0)
        rc = rd_char(&c, '\n');
    while (rc == 0 && c.p < c.end) {
        if (r->n >= cap)
            return bad(&c, "more ranks than a node runs");
        struct dt_agent__rec_hb_entry *e = &r->e[r->n];
        long long step = 0;
        rc = rd_int(&c, 0, INT_MAX, &e->rank);
        if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
            rc = rd_ll(&c, -INT64_MAX, INT64_MAX, &step);
        if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
            rc = rd_real(&c, 0, &e->age_s);
        if (rc == 0 && (rc = rd_char(&c, '\n')) == 0)
            r->n++;
        e->step = step;
    }
    return rc;
}

/* --- the rounds node 0 forms -------------------------------------------- */

int dt_agent__rec_round_encode(const struct dt_agent__rec_round *r, struct dt_agent__text *out)
{
    int rc = put(out, "%d %d", r->restarts, r->n);
    for (int i = 0; rc == 0 && i < r->n; i++)
        rc = put(out, " %d:%d", r->slots[i], r->incarns[i]);
    return rc;
}

int dt_agent__rec_round_decode(const char *v, size_t len, int cap, struct dt_agent__rec_round *r)
{
    struct rd c = reader(v, len, "a round's record");
    int rc = rd_int(&c, 0, INT_MAX, &r->restarts);
    if (rc == 0 && (rc = rd_char(&c, ' ')) == 0)
        rc = rd_int(&c, 1, cap, &r->n);
    for (int i = 0; rc == 0 && i < r->n; i++) {
        if ((rc = rd_char(&c, ' ')) == 0)
            rc = rd_int(&c, 0, INT_MAX, &r->slots[i]);
        if (rc == 0 && (rc = rd_char(&c, ':')) == 0)
            rc = rd_int(&c, 1, INT_MAX, &r->incarns[i]);
        for (int j = 0; rc == 0 && j < i; j++)
            if (r->slots[j] == r->slots[i])
                rc = bad(&c, "a slot named twice");
    }
    return rc ? rc : rd_end(&c);
}

int dt_agent__rec_slot_end_encode(const struct dt_agent__rec_slot_end *r, struct dt_agent__text *out)
{
    return put(out, "%d", r->finished ? 0 : 1);
}

int dt_agent__rec_slot_end_decode(const char *v, size_t len, struct dt_agent__rec_slot_end *r)
{
    struct rd c = reader(v, len, "a node's end of a round");
    bool unfinished = true;
    int rc = rd_bool(&c, &unfinished);
    r->finished = !unfinished;
    return rc ? rc : rd_end(&c);
}

int dt_agent__rec_verdict_encode(const struct dt_agent__rec_verdict *r, struct dt_agent__text *out)
{
    return r->next ? put(out, "next") : put(out, "done %d", r->status);
}

int dt_agent__rec_verdict_decode(const char *v, size_t len, struct dt_agent__rec_verdict *r)
{
    struct rd c = reader(v, len, "a round's verdict");
    *r = (struct dt_agent__rec_verdict){.status = 0};
    if (len == 4 && memcmp(v, "next", 4) == 0) {
        r->next = true;
        return 0;
    }
    if (len < 5 || memcmp(v, "done ", 5) != 0)
        return bad(&c, "neither 'next' nor 'done <status>'");
    c.p += 5;
    int rc = rd_int(&c, 0, 255, &r->status);
    return rc ? rc : rd_end(&c);
}

int dt_agent__rec_round_number_encode(int k, struct dt_agent__text *out)
{
    return put(out, "%d", k);
}

int dt_agent__rec_round_number_decode(const char *v, size_t len, int max, int *k)
{
    struct rd c = reader(v, len, "the newest round's number");
    int rc = rd_int(&c, 0, max, k);
    return rc ? rc : rd_end(&c);
}
