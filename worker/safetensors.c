/* safetensors.c - safetensors reader and writer (see safetensors.h).
 *
 * The JSON parser here knows only the shapes a safetensors header can take
 * (objects of strings, integer arrays and one level of string metadata); it is
 * not a general JSON library.
 */
#include "worker/safetensors.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/json_escape.h"

#define ST_MAX_HEADER 100000000ull

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
    {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
};

size_t dt_safetensors_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, dtype) == 0)
            return st_dtypes[i].size;
    return 0;
}

/* --- a minimal JSON reader over the header ------------------------------ */

struct jp {
    const char *s, *end, *start, *name;
};

static void jp_ws(struct jp *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t'))
        p->s++;
}

static int jp_fail(struct jp *p, const char *what)
{
    return dt_error_set(DT_EINVAL, "%s: bad safetensors header: %s at byte %td", p->name, what,
                        p->s - p->start + 8);
}

static int jp_expect(struct jp *p, char c)
{
    jp_ws(p);
    if (p->s >= p->end || *p->s != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return jp_fail(p, what);
    }
    p->s++;
    return 0;
}

/* One escape; r is at its backslash, end at the closing quote.  Only JSON's
 * escapes: letting any other character stand for itself would let a
 * backslash and a raw NUL byte put a NUL into the string. */
static int jp_escape(struct jp *p, const char **r, const char *end, char **w)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char c = *++*r;
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        *(*w)++ = to[k - from];
        return 0;
    }
    if (c != 'u') {
        p->s = *r - 1;
        return jp_fail(p, "unknown escape in a string");
    }
    const char *why;
    size_t used = dt_json_decode_u(*r, end, w, &why);
    if (!used) {
        p->s = *r - 1; /* the message's offset: the escape, not the string's end */
        return jp_fail(p, why);
    }
    *r += used - 1;
    return 0;
}

/* A JSON string into a fresh malloc'd C string; a NUL in it, raw or \u0000,
 * would cut the C string short, so it is refused. */
static int jp_string(struct jp *p, char **out)
{
    if (jp_expect(p, '"'))
        return DT_EINVAL;
    const char *start = p->s;
    while (p->s < p->end && *p->s != '"')
        p->s += (*p->s == '\\' && p->s + 1 < p->end) ? 2 : 1;
    if (p->s >= p->end)
        return jp_fail(p, "unterminated string");
    char *o = malloc((size_t)(p->s - start) + 1), *w = o;
    if (!o)
        return dt_error_set(DT_ENOMEM, "%s: no memory for the header", p->name);
    const char *end = p->s;
    for (const char *r = start; r < end; r++) {
        int rc = 0;
        if ((unsigned char)*r < 0x20) {
            char what[80];
            snprintf(what, sizeof what, "control character 0x%02x inside a string (must be escaped)",
                     (unsigned char)*r);
            p->s = r;
            rc = jp_fail(p, what);
        } else if (*r == '\\') {
            rc = jp_escape(p, &r, end, &w);
        } else {
            *w++ = *r;
        }
        if (rc) {
            free(o);
            return rc;
        }
    }
    *w = 0;
    p->s = end + 1;
    *out = o;
    return 0;
}

/* Digits read by hand, not strtoll: the header is not zero-terminated, and
 * a header that ends in a digit would have strtoll read past the file. */
static int jp_int(struct jp *p, int64_t *v)
{
    jp_ws(p);
    if (p->s >= p->end || *p->s < '0' || *p->s > '9')
        return jp_fail(p, "expected a non-negative integer");
    int64_t x = 0;
    for (; p->s < p->end && *p->s >= '0' && *p->s <= '9'; p->s++)
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *p->s - '0', &x))
            return jp_fail(p, "integer too large");
    *v = x;
    return 0;
}

/* [int, int, ...] with at most `max` entries. */
static int jp_int_array(struct jp *p, int64_t *v, int max, int *n)
{
    if (jp_expect(p, '['))
        return DT_EINVAL;
    *n = 0;
    jp_ws(p);
    if (p->s < p->end && *p->s == ']') {
        p->s++;
        return 0;
    }
    for (;;) {
        if (*n >= max)
            return jp_fail(p, "too many dims");
        if (jp_int(p, &v[(*n)++]))
            return DT_EINVAL;
        jp_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        return jp_expect(p, ']');
    }
}

/* Iterates the members of an object: calls fn(key) positioned at the value. */
static int jp_object(struct jp *p, int (*fn)(struct jp *, const char *, void *), void *ctx)
{
    if (jp_expect(p, '{'))
        return DT_EINVAL;
    jp_ws(p);
    if (p->s < p->end && *p->s == '}') {
        p->s++;
        return 0;
    }
    for (;;) {
        char *key;
        int rc = jp_string(p, &key);
        if (rc)
            return rc;
        rc = jp_expect(p, ':');
        if (rc == 0)
            rc = fn(p, key, ctx);
        free(key);
        if (rc)
            return rc;
        jp_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        return jp_expect(p, '}');
    }
}

static int tensor_field(struct jp *p, const char *key, void *ctx)
{
    struct dt_st_tensor *t = ctx;
    if (strcmp(key, "dtype") == 0) {
        char *s;
        int rc = jp_string(p, &s);
        if (rc)
            return rc;
        snprintf(t->dtype, sizeof t->dtype, "%s", s);
        rc = dt_safetensors_dtype_size(s) ? 0 : jp_fail(p, "unknown dtype");
        free(s);
        return rc;
    }
    if (strcmp(key, "shape") == 0)
        return jp_int_array(p, t->shape, DT_ST_MAX_DIMS, &t->ndim);
    if (strcmp(key, "data_offsets") == 0) {
        int64_t v[3]; /* room for a third, so that it is named for what it is */
        int n;
        int rc = jp_int_array(p, v, 3, &n);
        if (rc)
            return rc;
        if (n != 2)
            return jp_fail(p, "data_offsets needs 2 numbers");
        t->begin = (size_t)v[0];
        t->end = (size_t)v[1];
        return 0;
    }
    return jp_fail(p, "unknown tensor field");
}

static int meta_field(struct jp *p, const char *key, void *ctx)
{
    struct dt_safetensors *f = ctx;
    char **m = realloc(f->meta, (size_t)(f->n_meta + 1) * 2 * sizeof *m);
    if (!m)
        return dt_error_set(DT_ENOMEM, "%s: no memory for metadata", p->name);
    f->meta = m;
    char *v;
    int rc = jp_string(p, &v);
    if (rc)
        return rc;
    m[2 * f->n_meta] = strdup(key);
    m[2 * f->n_meta + 1] = v;
    f->n_meta++;
    return 0;
}

static int top_field(struct jp *p, const char *key, void *ctx)
{
    struct dt_safetensors *f = ctx;
    if (strcmp(key, "__metadata__") == 0)
        return jp_object(p, meta_field, f);
    if (strlen(key) >= DT_ST_MAX_NAME)
        return jp_fail(p, "tensor name too long");
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, key) == 0)
            return jp_fail(p, "duplicate tensor name");
    struct dt_st_tensor *t = realloc(f->tensors, (size_t)(f->n + 1) * sizeof *t);
    if (!t)
        return dt_error_set(DT_ENOMEM, "%s: no memory for the header", p->name);
    f->tensors = t;
    t = &f->tensors[f->n++];
    memset(t, 0, sizeof *t);
    t->end = (size_t)-1;
    strcpy(t->name, key);
    int rc = jp_object(p, tensor_field, t);
    if (rc == 0 && (!t->dtype[0] || t->end == (size_t)-1))
        return jp_fail(p, "tensor without dtype or data_offsets");
    return rc;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct dt_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Offsets must tile [0, data_len) exactly, each the size its shape says. */
static int check_layout(const char *name, struct dt_safetensors *f, size_t data_len, const uint8_t *data)
{
    struct dt_st_tensor *sorted = malloc((size_t)(f->n ? f->n : 1) * sizeof *sorted);
    if (!sorted)
        return dt_error_set(DT_ENOMEM, "%s: no memory", name);
    if (f->n) /* a file of no tensors has tensors == NULL, which memcpy may not be given */
        memcpy(sorted, f->tensors, (size_t)f->n * sizeof *sorted);
    qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_begin);
    size_t at = 0;
    int rc = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        const struct dt_st_tensor *t = &sorted[i];
        size_t want = dt_safetensors_dtype_size(t->dtype);
        int wraps = 0;
        /* A product that wraps could equal the byte count of a small range
         * while a reader sizing a copy by the shape runs far past it. */
        for (int d = 0; d < t->ndim; d++)
            wraps |= __builtin_mul_overflow(want, (size_t)t->shape[d], &want);
        if (wraps)
            rc = dt_error_set(DT_EINVAL, "%s: tensor '%s': shape of more than 2^64 bytes", name, t->name);
        else if (t->begin != at || t->end < t->begin)
            rc = dt_error_set(DT_EINVAL, "%s: tensor '%s': data_offsets [%zu, %zu] not contiguous (expected start %zu)",
                              name, t->name, t->begin, t->end, at);
        else if (t->end - t->begin != want)
            rc = dt_error_set(DT_EINVAL, "%s: tensor '%s': %zu bytes for a shape of %zu bytes", name, t->name,
                              t->end - t->begin, want);
        at = t->end;
    }
    if (rc == 0 && at != data_len)
        rc = dt_error_set(DT_EINVAL, "%s: %zu data bytes, the header describes %zu", name, data_len, at);
    free(sorted);
    for (int i = 0; rc == 0 && i < f->n; i++)
        f->tensors[i].data = data + f->tensors[i].begin;
    return rc;
}

int dt_safetensors_parse(const char *name, uint8_t *buf, size_t len, struct dt_safetensors *out)
{
    memset(out, 0, sizeof *out);
    out->file = buf;
    out->file_len = len;
    if (len < 8) {
        dt_safetensors_release(out);
        return dt_error_set(DT_EINVAL, "%s: %zu bytes, too small for a safetensors file", name, len);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n > ST_MAX_HEADER || n > len - 8) {
        dt_safetensors_release(out);
        return dt_error_set(DT_EINVAL, "%s: header length %llu is larger than %s", name,
                            (unsigned long long)n, n > ST_MAX_HEADER ? "100 MB" : "the file");
    }
    struct jp p = {(const char *)buf + 8, (const char *)buf + 8 + n, (const char *)buf + 8, name};
    int rc = jp_object(&p, top_field, out);
    if (rc == 0) {
        jp_ws(&p); /* the writers pad with spaces; anything else is not JSON */
        if (p.s < p.end)
            rc = jp_fail(&p, "trailing bytes after the header's object");
    }
    if (rc == 0)
        rc = check_layout(name, out, len - 8 - n, buf + 8 + n);
    if (rc)
        dt_safetensors_release(out);
    return rc;
}

int dt_safetensors_read(const char *path, struct dt_safetensors *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "%s: cannot open", path);
    uint8_t *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)len + 1);
    int rc = 0;
    if (!buf)
        rc = dt_error_set(DT_EIO, "%s: cannot size or buffer the file", path);
    else if (fread(buf, 1, (size_t)len, f) != (size_t)len)
        rc = dt_error_set(DT_EIO, "%s: short read", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    return dt_safetensors_parse(path, buf, (size_t)len, out);
}

void dt_safetensors_release(struct dt_safetensors *f)
{
    for (int i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->tensors);
    free(f->file);
    memset(f, 0, sizeof *f);
}

const struct dt_st_tensor *dt_safetensors_find(const struct dt_safetensors *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *dt_safetensors_meta(const struct dt_safetensors *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

/* --- writer ----------------------------------------------------------- */

/* Appends s as a JSON string literal at h + *at.  The header was sized at
 * 6 bytes per byte of every string, dt_json_quote's worst case, so false
 * means that count is wrong; it stops the header instead of overrunning it. */
static bool put_string(char *h, size_t size, size_t *at, const char *s)
{
    size_t n;
    if (dt_json_quote(h + *at, size - *at, s, DT_JSON_U, &n)) {
        dt_error_prefix("the header was sized too small");
        return false;
    }
    *at += n;
    return true;
}

/* "__metadata__":{"k":"v",...} */
static bool put_meta(char *h, size_t size, size_t *at, const char *const *meta, int n_meta)
{
    *at += (size_t)sprintf(h + *at, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
        if (!put_string(h, size, at, meta[2 * i]))
            return false;
        h[(*at)++] = ':';
        if (!put_string(h, size, at, meta[2 * i + 1]))
            return false;
        h[(*at)++] = i + 1 < n_meta ? ',' : '}';
    }
    return true;
}

struct st_order {
    const struct dt_st_entry *e;
    size_t bytes, align;
};

/* The reference writer's order: dtype alignment descending, then name. */
static int cmp_order(const void *a, const void *b)
{
    const struct st_order *x = a, *y = b;
    if (x->align != y->align)
        return x->align > y->align ? -1 : 1;
    return strcmp(x->e->name, y->e->name);
}

static int write_all(int fd, const char *path, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return dt_error_set_errno(DT_EIO, errno, "%s: write", path);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The header, padded with spaces to a multiple of 8; NULL with the error set. */
static char *build_header(const struct st_order *o, int n, const char *const *meta, int n_meta, size_t *len)
{
    size_t size = 64 + 8;
    for (int i = 0; i < n; i++)
        size += 6 * strlen(o[i].e->name) + 96 + 24 * (size_t)o[i].e->ndim;
    for (int i = 0; i < 2 * n_meta; i++)
        size += 6 * strlen(meta[i]) + 4;
    char *h = malloc(size);
    if (!h) {
        dt_error_set(DT_ENOMEM, "no memory for the header");
        return NULL;
    }
    size_t at = 0, off = 0;
    h[at++] = '{';
    bool ok = n_meta == 0 || put_meta(h, size, &at, meta, n_meta);
    if (ok && n_meta > 0 && n > 0)
        h[at++] = ',';
    for (int i = 0; ok && i < n; i++) {
        ok = put_string(h, size, &at, o[i].e->name);
        if (!ok)
            break;
        at += (size_t)sprintf(h + at, ":{\"dtype\":\"%s\",\"shape\":[", o[i].e->dtype);
        for (int d = 0; d < o[i].e->ndim; d++)
            at += (size_t)sprintf(h + at, "%s%lld", d ? "," : "", (long long)o[i].e->shape[d]);
        at += (size_t)sprintf(h + at, "],\"data_offsets\":[%zu,%zu]}%s", off, off + o[i].bytes,
                              i + 1 < n ? "," : "");
        off += o[i].bytes;
    }
    if (!ok) {
        free(h);
        return NULL;
    }
    h[at++] = '}';
    while (at % 8)
        h[at++] = ' ';
    *len = at;
    return h;
}

int dt_safetensors_write_fd(int fd, const char *path, const struct dt_st_entry *e, int n,
                            const char *const *meta, int n_meta)
{
    struct st_order *o = malloc((size_t)(n ? n : 1) * sizeof *o);
    if (!o)
        return dt_error_set(DT_ENOMEM, "%s: no memory for the header", path);
    for (int i = 0; i < n; i++) {
        o[i].e = &e[i];
        o[i].align = dt_safetensors_dtype_size(e[i].dtype);
        if (!o[i].align) {
            free(o);
            return dt_error_set(DT_EINVAL, "%s: tensor '%s' has unknown dtype '%s'", path, e[i].name,
                                e[i].dtype);
        }
        o[i].bytes = o[i].align;
        for (int d = 0; d < e[i].ndim; d++)
            o[i].bytes *= (size_t)e[i].shape[d];
    }
    qsort(o, (size_t)n, sizeof *o, cmp_order);
    size_t hlen = 0;
    char *h = build_header(o, n, meta, n_meta, &hlen);
    int rc = h ? 0 : dt_error_prefix("%s", path);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (rc == 0)
        rc = write_all(fd, path, le, 8);
    if (rc == 0)
        rc = write_all(fd, path, h, hlen);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = write_all(fd, path, o[i].e->data, o[i].bytes);
    free(h);
    free(o);
    return rc;
}
