/* safetensors.c - safetensors reader and writer (see safetensors.h).
 *
 * The header is read with base/json.h (jansson), so it is refused for what
 * any JSON dtrain reads is refused for (a \u0000, a duplicate name, ...);
 * what is left here is what makes it a safetensors header: tensors of a
 * known dtype with integer shapes and offsets, and metadata of strings only.
 */
#include "worker/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
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

/* --- the header ---------------------------------------------------------- */

static int bad_header(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_header(const char *name, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_EINVAL, "%s: bad safetensors header: %s", name, what);
}

/* Tensor t's member key: an array of at most max non-negative integers. */
static int take_ints(const char *name, const struct dt_st_tensor *t, const char *key, json_t *a, int64_t *v,
                     int max, int *n)
{
    size_t i;
    json_t *e;
    if (!json_is_array(a))
        return bad_header(name, "tensor '%s': %s: expected an array", t->name, key);
    if (json_array_size(a) > (size_t)max)
        return bad_header(name, "tensor '%s': %s: more than %d entries", t->name, key, max);
    json_array_foreach (a, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return bad_header(name, "tensor '%s': %s[%zu]: expected a non-negative integer", t->name, key, i);
        v[i] = json_integer_value(e);
    }
    *n = (int)json_array_size(a);
    return 0;
}

static int take_field(const char *name, struct dt_st_tensor *t, const char *key, json_t *v)
{
    if (strcmp(key, "dtype") == 0) {
        const char *dtype = json_string_value(v);
        if (!dtype || !dt_safetensors_dtype_size(dtype))
            return bad_header(name, "tensor '%s': unknown dtype %.16s", t->name,
                              dtype ? dtype : "(not a string)");
        snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
        return 0;
    }
    if (strcmp(key, "shape") == 0)
        return take_ints(name, t, key, v, t->shape, DT_ST_MAX_DIMS, &t->ndim);
    if (strcmp(key, "data_offsets") == 0) {
        int64_t o[2];
        int n;
        if (json_is_array(v) && json_array_size(v) != 2)
            return bad_header(name, "tensor '%s': data_offsets needs 2 numbers", t->name);
        int rc = take_ints(name, t, key, v, o, 2, &n);
        if (rc)
            return rc;
        t->begin = (size_t)o[0];
        t->end = (size_t)o[1];
        return 0;
    }
    return bad_header(name, "tensor '%s': unknown tensor field \"%s\"", t->name, key);
}

static int take_tensor(const char *name, struct dt_safetensors *f, const char *key, json_t *obj)
{
    const char *field;
    json_t *v;
    if (strlen(key) >= DT_ST_MAX_NAME)
        return bad_header(name, "tensor name too long (%zu bytes, at most %d)", strlen(key),
                          DT_ST_MAX_NAME - 1);
    struct dt_st_tensor *t = &f->tensors[f->n++];
    memset(t, 0, sizeof *t);
    t->end = (size_t)-1;
    strcpy(t->name, key);
    if (!json_is_object(obj))
        return bad_header(name, "tensor '%s': expected an object", key);
    json_object_foreach (obj, field, v) {
        int rc = take_field(name, t, field, v);
        if (rc)
            return rc;
    }
    if (!t->dtype[0] || t->end == (size_t)-1)
        return bad_header(name, "tensor '%s' without dtype or data_offsets", key);
    return 0;
}

/* "__metadata__": {str: str}; other values are refused, as the reference does. */
static int take_meta(const char *name, struct dt_safetensors *f, json_t *meta)
{
    const char *key;
    json_t *v;
    if (!json_is_object(meta))
        return bad_header(name, "__metadata__: expected an object of strings");
    if (!(f->meta = calloc(2 * json_object_size(meta) + 1, sizeof *f->meta)))
        return dt_error_set(DT_ENOMEM, "%s: no memory for metadata", name);
    json_object_foreach (meta, key, v) {
        if (!json_is_string(v))
            return bad_header(name, "__metadata__: \"%s\": expected a string", key);
        char *k = strdup(key), *s = strdup(json_string_value(v));
        f->meta[2 * f->n_meta] = k;
        f->meta[2 * f->n_meta + 1] = s;
        f->n_meta++;
        if (!k || !s)
            return dt_error_set(DT_ENOMEM, "%s: no memory for metadata", name);
    }
    return 0;
}

/* The header's JSON into f; errors name the byte of the file. */
static int take_header(const char *name, struct dt_safetensors *f, const char *text, size_t len)
{
    json_error_t err;
    json_t *h = dt_json_loadb(text, len, &err), *v;
    const char *key;
    int rc = 0;
    if (!h) /* position counts the bytes read, the one at fault included */
        return err.position < 0 ? bad_header(name, "%s", err.text)
                                : bad_header(name, "%s at byte %d", err.text,
                                             8 + (err.position > 0 ? err.position - 1 : 0));
    if (!json_is_object(h))
        rc = bad_header(name, "expected an object");
    else if (!(f->tensors = malloc((json_object_size(h) + 1) * sizeof *f->tensors)))
        rc = dt_error_set(DT_ENOMEM, "%s: no memory for the header", name);
    json_object_foreach (h, key, v) {
        if (rc)
            break;
        rc = strcmp(key, "__metadata__") == 0 ? take_meta(name, f, v) : take_tensor(name, f, key, v);
    }
    json_decref(h);
    return rc;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct dt_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Offsets must tile [0, data_len) exactly, each the size its shape says:
 * checked before any data is read, against the file's size. */
static int check_layout(const char *name, struct dt_safetensors *f, size_t data_len)
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
    return rc;
}

/* The file buffer into f (released with it); with `checked` (the layout
 * fits), the tensors' data pointers into it. */
static void attach(struct dt_safetensors *f, uint8_t *file, size_t len, size_t header_len, bool checked)
{
    f->file = file;
    f->file_len = len;
    for (int i = 0; checked && i < f->n; i++)
        f->tensors[i].data = file + 8 + header_len + f->tensors[i].begin;
}

/* The header's length from the file's first 8 bytes, held to the limit and
 * to the `len` bytes the file has. */
static int header_length(const char *name, const uint8_t *le, size_t len, size_t *n_out)
{
    if (len < 8)
        return dt_error_set(DT_EINVAL, "%s: %zu bytes, too small for a safetensors file", name, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | le[i];
    if (n > ST_MAX_HEADER || n > len - 8)
        return dt_error_set(DT_EINVAL, "%s: header length %llu is larger than %s", name,
                            (unsigned long long)n, n > ST_MAX_HEADER ? "100 MB" : "the file");
    *n_out = (size_t)n;
    return 0;
}

/* The header (n bytes of JSON) of a file of len bytes: tensors, metadata,
 * and a layout that fits the data part exactly. */
static int describe(const char *name, const uint8_t *json, size_t n, size_t len, struct dt_safetensors *out)
{
    int rc = take_header(name, out, (const char *)json, n);
    return rc ? rc : check_layout(name, out, len - 8 - n);
}

int dt_safetensors_parse(const char *name, uint8_t *buf, size_t len, struct dt_safetensors *out)
{
    memset(out, 0, sizeof *out);
    size_t n = 0;
    int rc = header_length(name, buf, len, &n);
    if (rc == 0)
        rc = describe(name, buf + 8, n, len, out);
    attach(out, buf, len, n, rc == 0); /* owned even on failure, freed by the release */
    if (rc)
        dt_safetensors_release(out);
    return rc;
}

static int read_at(int fd, const char *path, uint8_t *buf, size_t len, size_t at)
{
    while (len > 0) {
        ssize_t r = pread(fd, buf, len, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return dt_error_set_errno(DT_EIO, errno, "%s: read", path);
        if (r == 0)
            return dt_error_set(DT_EIO, "%s: the file shrank while being read", path);
        buf += r;
        at += (size_t)r;
        len -= (size_t)r;
    }
    return 0;
}

/* What a path may be before anything is read from it: a regular file (a
 * FIFO would block, a device never end; base/fs.h refuses both before it
 * opens them), of a size from fstat. */
static int open_regular(const char *path, enum dt_fs_links links, size_t *len)
{
    struct stat st;
    int fd = dt_fs_open_read(AT_FDCWD, path, links, &st);
    if (fd < 0)
        return fd;
    if ((uint64_t)st.st_size > SIZE_MAX / 2) {
        close(fd);
        return dt_error_set(DT_EINVAL, "%s: %lld bytes, too large to read", path, (long long)st.st_size);
    }
    *len = (size_t)st.st_size;
    return fd;
}

/* The header first, checked against the size fstat gives; the data only
 * once the header describes exactly the bytes the file has, so a junk file
 * (or one of the wrong size) costs at most its header to refuse, not its
 * length in memory and time.  DT_ST_HEADER_ONLY stops there. */
int dt_safetensors_read_with(const char *path, unsigned flags, struct dt_safetensors *out)
{
    memset(out, 0, sizeof *out);
    size_t len = 0, n = 0;
    int fd = open_regular(path, flags & DT_ST_NOFOLLOW ? DT_FS_NOFOLLOW : DT_FS_FOLLOW, &len);
    if (fd < 0)
        return fd;
    uint8_t le[8], *head = NULL, *buf = NULL;
    int rc = len < 8 ? header_length(path, le, len, &n) : read_at(fd, path, le, 8, 0);
    if (rc == 0)
        rc = header_length(path, le, len, &n);
    if (rc == 0 && !(head = malloc(n + 1)))
        rc = dt_error_set(DT_ENOMEM, "%s: no memory for a header of %zu bytes", path, n);
    if (rc == 0)
        rc = read_at(fd, path, head, n, 8);
    if (rc == 0)
        rc = describe(path, head, n, len, out);
    bool whole = !(flags & DT_ST_HEADER_ONLY);
    if (rc == 0 && whole && !(buf = malloc(len)))
        rc = dt_error_set(DT_ENOMEM, "%s: no memory for its %zu bytes", path, len);
    if (rc == 0 && whole) {
        memcpy(buf, le, 8);
        memcpy(buf + 8, head, n);
        rc = read_at(fd, path, buf + 8 + n, len - 8 - n, 8 + n);
    }
    free(head);
    close(fd);
    attach(out, buf, len, n, rc == 0 && whole);
    if (rc)
        dt_safetensors_release(out);
    return rc;
}

int dt_safetensors_read(const char *path, struct dt_safetensors *out)
{
    return dt_safetensors_read_with(path, 0, out);
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
