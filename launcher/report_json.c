/* report_json.c - strict JSON reader (see report_json.h).
 *
 * Recursive descent over the RFC 8259 grammar:
 *   value  = object | array | string | number | true | false | null
 *   number = [-] (0 | [1-9][0-9]*) [. [0-9]+] [(e|E) [+|-] [0-9]+]
 *   string = " chars " with escapes \" \\ \/ \b \f \n \r \t \uXXXX (surrogate pairs joined)
 * but for \u0000: decoded strings are C strings (base/json_escape.h).
 * The arena is a list of blocks of at least 64 KiB, so a trace of a hundred
 * thousand events costs a few dozen mallocs, not a million.
 */
#include "launcher/report_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/json_escape.h"

#define BLOCK_MIN (64 * 1024)
#define MAX_DEPTH 64

struct dt_json_block {
    struct dt_json_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

static void *arena_alloc(struct dt_json_arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    struct dt_json_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > BLOCK_MIN ? size : BLOCK_MIN;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used;
    b->used += size;
    return p;
}

void dt_json_arena_free(struct dt_json_arena *a)
{
    while (a->head) {
        struct dt_json_block *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

struct parser {
    struct dt_json_arena *a;
    const char *p, *end, *line_start, *file;
    int line, depth;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_EINVAL, "%s:%d:%d: %s", ps->file, ps->line, (int)(ps->p - ps->line_start) + 1, msg);
}

static const char *what(struct parser *ps)
{
    return ps->p >= ps->end ? "the end of the text" : "another character";
}

static void skip_ws(struct parser *ps)
{
    for (; ps->p < ps->end; ps->p++) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
    }
}

static struct dt_json *new_node(struct parser *ps, enum dt_json_type type)
{
    struct dt_json *v = arena_alloc(ps->a, sizeof *v);
    if (v)
        *v = (struct dt_json){.type = type, .line = ps->line, .col = (int)(ps->p - ps->line_start) + 1};
    return v;
}

static int parse_value(struct parser *ps, struct dt_json **out);

/* One escape after the backslash at ps->p; appends its UTF-8 to *o. */
static int escape(struct parser *ps, char **o)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char c = ++ps->p < ps->end ? *ps->p : 0;
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        *(*o)++ = to[k - from];
        ps->p++;
        return 0;
    }
    if (c != 'u')
        return fail(ps, "unknown escape \\%c in a string", c ? c : '?');
    const char *why;
    size_t used = dt_json_decode_u(ps->p, ps->end, o, &why);
    if (!used)
        return fail(ps, "%s", why);
    ps->p += used;
    return 0;
}

/* A string at ps->p (the opening quote); decoded text never outgrows its source. */
static int parse_string(struct parser *ps, const char **str, size_t *len)
{
    const char *s = ps->p + 1;
    while (s < ps->end && *s != '"')
        s += *s == '\\' && s + 1 < ps->end ? 2 : 1;
    if (s >= ps->end)
        return fail(ps, "a string is not closed (missing \")");
    ps->p++;
    char *buf = arena_alloc(ps->a, (size_t)(s - ps->p) + 1), *o = buf;
    if (!buf)
        return dt_error_set(DT_ENOMEM, "%s: no memory for a string", ps->file);
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20)
            return fail(ps, "control character 0x%02x inside a string (must be escaped)", c);
        if (c == '\\') {
            int rc = escape(ps, &o);
            if (rc)
                return rc;
        } else {
            *o++ = (char)c;
            ps->p++;
        }
    }
    ps->p++;
    *o = 0;
    *str = buf;
    *len = (size_t)(o - buf);
    return 0;
}

static size_t digits(struct parser *ps)
{
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
        ps->p++;
    return (size_t)(ps->p - s);
}

static int parse_number(struct parser *ps, struct dt_json *v)
{
    const char *s = ps->p;
    if (*ps->p == '-')
        ps->p++;
    size_t n = digits(ps);
    if (n == 0 || (n > 1 && ps->p[-(long)n] == '0'))
        return fail(ps, n ? "a number must not start with 0" : "expected a digit");
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!digits(ps))
            return fail(ps, "expected a digit after the decimal point");
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (!digits(ps))
            return fail(ps, "expected a digit in the exponent");
    }
    char *text = arena_alloc(ps->a, (size_t)(ps->p - s) + 1);
    if (!text)
        return dt_error_set(DT_ENOMEM, "%s: no memory for a number", ps->file);
    memcpy(text, s, (size_t)(ps->p - s));
    text[ps->p - s] = 0;
    v->str = text;
    v->len = (size_t)(ps->p - s);
    v->num = strtod(text, NULL);
    return 0;
}

/* Elements or members up to `close`; members have "key": before the value. */
static int parse_list(struct parser *ps, struct dt_json *v, char close, bool members)
{
    struct dt_json **tail = &v->child;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len;
        int rc;
        if (members) {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a member name in double quotes, found %s", what(ps));
            if ((rc = parse_string(ps, &key, &key_len)))
                return rc;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return fail(ps, "expected ':' after the member name \"%s\"", key);
            ps->p++;
            skip_ws(ps);
        }
        struct dt_json *item;
        if ((rc = parse_value(ps, &item)))
            return rc;
        item->key = key;
        *tail = item;
        tail = &item->next;
        v->n++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            struct parser at_comma = *ps;
            ps->p++;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == close)
                return fail(&at_comma, "trailing ',' before '%c'", close);
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, "expected ',' or '%c' %s", close, members ? "after a member" : "after an element");
    }
}

static int parse_literal(struct parser *ps, struct dt_json *v)
{
    static const struct {
        const char *word;
        enum dt_json_type type;
    } lit[] = {{"true", DT_JSON_TRUE}, {"false", DT_JSON_FALSE}, {"null", DT_JSON_NULL}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(lit[i].word);
        if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, lit[i].word, n) == 0) {
            v->type = lit[i].type;
            ps->p += n;
            return 0;
        }
    }
    if (ps->p >= ps->end)
        return fail(ps, "expected a value, found the end of the text (truncated?)");
    unsigned char c = (unsigned char)*ps->p;
    if (c >= 0x20 && c < 0x7f)
        return fail(ps, "expected a value, found '%c'", c);
    return fail(ps, "expected a value, found byte 0x%02x", c);
}

static int parse_value(struct parser *ps, struct dt_json **out)
{
    struct dt_json *v = new_node(ps, DT_JSON_NULL);
    if (!v)
        return dt_error_set(DT_ENOMEM, "%s: no memory for a JSON value", ps->file);
    *out = v;
    char c = ps->p < ps->end ? *ps->p : 0;
    if (c == '{' || c == '[') {
        if (++ps->depth > MAX_DEPTH)
            return fail(ps, "nested deeper than %d levels", MAX_DEPTH);
        v->type = c == '{' ? DT_JSON_OBJECT : DT_JSON_ARRAY;
        int rc = parse_list(ps, v, c == '{' ? '}' : ']', c == '{');
        ps->depth--;
        return rc;
    }
    if (c == '"') {
        v->type = DT_JSON_STRING;
        return parse_string(ps, &v->str, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = DT_JSON_NUMBER;
        return parse_number(ps, v);
    }
    return parse_literal(ps, v);
}

int dt_json_parse(struct dt_json_arena *a, const char *src, size_t len, const char *file, int first_line,
                  struct dt_json **out)
{
    struct parser ps = {.a = a, .p = src, .end = src + len, .line_start = src, .file = file, .line = first_line};
    skip_ws(&ps);
    int rc = parse_value(&ps, out);
    if (rc)
        return rc;
    skip_ws(&ps);
    if (ps.p < ps.end)
        return fail(&ps, "unexpected text after the JSON value");
    return 0;
}

int dt_json_read_file(struct dt_json_arena *a, const char *path, size_t max_bytes, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "cannot open %s", path);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return dt_error_set(DT_EINVAL, "%s is not a regular file", path);
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(f);
        return dt_error_set(DT_EINVAL, "%s is %lld bytes, more than the %zu this reads", path,
                            (long long)st.st_size, max_bytes);
    }
    char *buf = arena_alloc(a, (size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return dt_error_set(DT_ENOMEM, "no memory to read %s", path);
    if (bad)
        return dt_error_set(DT_EIO, "reading %s failed", path);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

const struct dt_json *dt_json_get(const struct dt_json *v, const char *key)
{
    if (!v || v->type != DT_JSON_OBJECT)
        return NULL;
    for (const struct dt_json *m = v->child; m; m = m->next)
        if (strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

bool dt_json_get_num(const struct dt_json *v, const char *key, double *out)
{
    const struct dt_json *m = dt_json_get(v, key);
    if (!m || m->type != DT_JSON_NUMBER)
        return false;
    *out = m->num;
    return true;
}

const char *dt_json_get_str(const struct dt_json *v, const char *key)
{
    const struct dt_json *m = dt_json_get(v, key);
    return m && m->type == DT_JSON_STRING ? m->str : NULL;
}

void dt_json_write(FILE *f, const struct dt_json *v)
{
    switch (v->type) {
    case DT_JSON_NULL: fputs("null", f); return;
    case DT_JSON_FALSE: fputs("false", f); return;
    case DT_JSON_TRUE: fputs("true", f); return;
    case DT_JSON_NUMBER: fwrite(v->str, 1, v->len, f); return;
    case DT_JSON_STRING: dt_json_put_str(f, v->str, DT_JSON_U); return;
    case DT_JSON_ARRAY:
    case DT_JSON_OBJECT:
        fputc(v->type == DT_JSON_ARRAY ? '[' : '{', f);
        for (const struct dt_json *c = v->child; c; c = c->next) {
            if (v->type == DT_JSON_OBJECT) {
                dt_json_put_str(f, c->key, DT_JSON_U);
                fputs(": ", f);
            }
            dt_json_write(f, c);
            if (c->next)
                fputs(", ", f);
        }
        fputc(v->type == DT_JSON_ARRAY ? ']' : '}', f);
        return;
    }
}
