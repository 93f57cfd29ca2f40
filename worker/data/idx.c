/* idx.c - IDX reader through zlib and the Fashion-MNIST loader (see idx.h).
 *
 * A file without the gzip magic is read as it is, so an uncompressed copy of
 * the data set works as well.  Not for writing IDX files.
 */
#include "worker/data/idx.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "base/fs.h"

/* The file through inflate, not gzread: after a gzip member, gzread takes
 * bytes that do not start another member for "trailing garbage" and ends
 * quietly, so a data set file with junk appended (or a second file glued
 * on badly) loaded as if whole.  Here a member may only be followed by
 * another member (gzip allows several; the data runs on through them) or by
 * the end of the file.  A file that does not start with the gzip magic is
 * read as it is, as gzread did. */
struct idx_in {
    FILE *f;
    const char *path;
    z_stream z;
    int gzip;         /* else the bytes are the data */
    int member_ended; /* inflate reached a member's end: next, a member or EOF */
    long long raw_at; /* bytes of the file consumed, for messages */
    size_t header_len; /* bytes of the IDX header */
    uint8_t buf[1 << 16];
};

/* Tops the input up to at least `want` bytes where the file has them. */
static int in_fill(struct idx_in *in, size_t want, const char *what)
{
    if (in->z.avail_in >= want)
        return 0;
    memmove(in->buf, in->z.next_in, in->z.avail_in);
    in->z.next_in = in->buf;
    while (in->z.avail_in < want) {
        size_t n = fread(in->buf + in->z.avail_in, 1, sizeof in->buf - in->z.avail_in, in->f);
        if (n == 0 && ferror(in->f))
            return dt_error_set_errno(DT_EIO, errno, "%s: reading %s", in->path, what);
        if (n == 0)
            return 0;
        in->z.avail_in += (uInt)n;
    }
    return 0;
}

static int in_open(struct idx_in *in, const char *path)
{
    memset(in, 0, offsetof(struct idx_in, buf));
    in->path = path;
    in->z.next_in = in->buf;
    int fd = dt_fs_open_read(AT_FDCWD, path, DT_FS_FOLLOW, NULL); /* a FIFO is refused unopened */
    if (fd < 0)
        return fd;
    if (!(in->f = fdopen(fd, "rb"))) {
        close(fd);
        return dt_error_set_errno(DT_ENOMEM, errno, "%s: cannot buffer", path);
    }
    int rc = in_fill(in, 2, "the header");
    in->gzip = rc == 0 && in->z.avail_in >= 2 && in->buf[0] == 0x1f && in->buf[1] == 0x8b;
    if (rc == 0 && in->gzip && inflateInit2(&in->z, 16 + MAX_WBITS) != Z_OK)
        rc = dt_error_set(DT_ENOMEM, "%s: no memory for zlib", path);
    return rc;
}

static void in_close(struct idx_in *in)
{
    if (in->gzip)
        inflateEnd(&in->z);
    if (in->f)
        fclose(in->f);
}

/* After a member's end: the next member, or the end of the file (*eof). */
static int next_member(struct idx_in *in, const char *what, int *eof)
{
    int rc = in_fill(in, 2, what);
    *eof = rc == 0 && in->z.avail_in == 0;
    if (rc || *eof)
        return rc;
    if (in->z.avail_in < 2 || in->z.next_in[0] != 0x1f || in->z.next_in[1] != 0x8b)
        return dt_error_set(DT_EINVAL,
                            "%s: bytes after the gzip data at offset %lld that are not another gzip "
                            "member (trailing garbage: a damaged or badly joined file)",
                            in->path, in->raw_at);
    inflateReset(&in->z);
    in->member_ended = 0;
    return 0;
}

/* One inflate call's worth into z's output; *eof at the clean end. */
static int inflate_some(struct idx_in *in, const char *what, int *eof)
{
    *eof = 0;
    if (in->member_ended)
        return next_member(in, what, eof);
    int rc = in_fill(in, 1, what);
    if (rc)
        return rc;
    if (in->z.avail_in == 0)
        return dt_error_set(DT_EINVAL, "%s: damaged gzip stream while reading %s: unexpected end of file",
                            in->path, what);
    uInt before = in->z.avail_in;
    int zr = inflate(&in->z, Z_NO_FLUSH);
    in->raw_at += before - in->z.avail_in;
    if (zr == Z_STREAM_END)
        in->member_ended = 1;
    else if (zr == Z_MEM_ERROR)
        return dt_error_set(DT_ENOMEM, "%s: no memory for zlib", in->path);
    else if (zr != Z_OK && zr != Z_BUF_ERROR) /* BUF: no progress this call, which the next one makes */
        return dt_error_set(DT_EINVAL, "%s: damaged gzip stream while reading %s: %s", in->path, what,
                            in->z.msg ? in->z.msg : zError(zr));
    return 0;
}

/* Up to len bytes of the data into buf; *got < len only at the end. */
static int in_read(struct idx_in *in, uint8_t *buf, size_t len, size_t *got, const char *what)
{
    *got = 0;
    while (*got < len) {
        int rc, eof = 0;
        if (!in->gzip) {
            size_t take = in->z.avail_in < len - *got ? in->z.avail_in : len - *got;
            memcpy(buf + *got, in->z.next_in, take);
            in->z.next_in += take;
            in->z.avail_in -= (uInt)take;
            *got += take;
            rc = *got < len ? in_fill(in, 1, what) : 0;
            eof = in->z.avail_in == 0;
        } else {
            size_t room = len - *got > (1u << 30) ? (1u << 30) : len - *got;
            in->z.next_out = buf + *got;
            in->z.avail_out = (uInt)room;
            rc = inflate_some(in, what, &eof);
            *got += room - in->z.avail_out;
        }
        if (rc || eof)
            return rc;
    }
    return 0;
}

/* Fills buf[from, to) of a `total`-byte part (the count is for the message). */
static int read_range(struct idx_in *in, uint8_t *buf, size_t from, size_t to, size_t total, const char *what)
{
    size_t got;
    int rc = in_read(in, buf + from, to - from, &got, what);
    if (rc == 0 && got < to - from)
        rc = dt_error_set(DT_EINVAL, "%s: truncated: %s ends after %zu of %zu bytes", in->path, what,
                          from + got, total);
    return rc;
}

static int read_exact(struct idx_in *in, void *buf, size_t len, const char *what)
{
    return read_range(in, buf, 0, len, len, what);
}

/* The data, in a buffer that grows (doubling from 1 MiB) as bytes arrive:
 * the dims are only the header's word, and 20 bytes can claim 2^62 of data.
 * Sized up front, such a file fails as "no memory" (or, lazily allocated,
 * not at all until the short read) instead of as the truncated file it is. */
static int read_data(struct idx_in *in, size_t bytes, uint8_t **out)
{
    size_t cap = bytes < ((size_t)1 << 20) ? bytes : (size_t)1 << 20, got = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    int rc = buf ? 0 : dt_error_set(DT_ENOMEM, "%s: no memory for %zu bytes", in->path, cap);
    while (rc == 0 && got < bytes) {
        if (got == cap) {
            cap = cap > bytes / 2 ? bytes : 2 * cap;
            uint8_t *more = realloc(buf, cap);
            if (!more) {
                rc = dt_error_set(DT_ENOMEM, "%s: no memory for %zu bytes", in->path, cap);
                break;
            }
            buf = more;
        }
        rc = read_range(in, buf, got, cap, bytes, "the data");
        got = cap;
    }
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

/* After the data: the end of the file, and for gzip the end of its last
 * member (trailer checked) with nothing but members after it.  Inflating
 * stops one byte past what the header declared: a stream that goes on is
 * refused there, whatever it would have grown to. */
static int read_end(struct idx_in *in, size_t bytes)
{
    uint8_t extra;
    size_t got;
    int rc = in_read(in, &extra, 1, &got, "past the data");
    if (rc == 0 && got > 0)
        rc = dt_error_set(
            DT_EINVAL,
            "%s: more data than the header's dims say (%zu bytes): the data goes on past byte %zu "
            "of it (file offset %lld)",
            in->path, bytes, bytes, in->gzip ? in->raw_at : (long long)in->header_len + (long long)bytes);
    return rc;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Header: magic (0, 0, type 0x08 = ubyte, ndim), then ndim big-endian int32 dims. */
static int read_header(struct idx_in *in, int ndim, const int64_t *want, struct dt_idx *out, size_t *bytes)
{
    const char *path = in->path;
    uint8_t b[4 + 4 * DT_IDX_MAX_DIMS];
    int rc = read_exact(in, b, 4, "the header");
    if (rc)
        return rc;
    uint32_t magic = be32(b);
    if (b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != ndim)
        return dt_error_set(DT_EINVAL, "%s: not an IDX file of %d-dim unsigned bytes (magic 0x%08x, want 0x%08x)",
                            path, ndim, magic, 0x0800u | (unsigned)ndim);
    rc = read_exact(in, b + 4, 4 * (size_t)ndim, "the header");
    if (rc)
        return rc;
    size_t total = 1;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t d = be32(b + 4 + 4 * i);
        if (want[i] > 0 && d != want[i])
            return dt_error_set(DT_EINVAL, "%s: dim %d is %lld, expected %lld", path, i, (long long)d,
                                (long long)want[i]);
        if (d > (int64_t)INT32_MAX || (d > 0 && total > SIZE_MAX / 4 / (size_t)d))
            return dt_error_set(DT_EINVAL, "%s: dim %d is %lld, too large", path, i, (long long)d);
        out->dims[i] = d;
        total *= (size_t)d;
    }
    *bytes = total;
    in->header_len = 4 + 4 * (size_t)ndim;
    return 0;
}

/* An IDX file open with its header read (dims in out->dims); the data comes
 * later, so that a caller can check the headers of several files against
 * each other before inflating any of them. */
struct idx_file {
    struct idx_in *in;
    size_t bytes; /* of data, as the header declares */
};

static int idx_open(const char *path, int ndim, const int64_t *want_dims, struct dt_idx *out,
                    struct idx_file *x)
{
    memset(out, 0, sizeof *out);
    x->bytes = 0;
    if (ndim < 1 || ndim > DT_IDX_MAX_DIMS)
        return dt_error_set(DT_EINVAL, "%s: %d dims asked for, IDX supports 1..%d", path, ndim,
                            DT_IDX_MAX_DIMS);
    if (!(x->in = malloc(sizeof *x->in)))
        return dt_error_set(DT_ENOMEM, "%s: no memory for a read buffer", path);
    int rc = in_open(x->in, path);
    return rc ? rc : read_header(x->in, ndim, want_dims, out, &x->bytes);
}

/* The data and the end of the file after it. */
static int idx_read(struct idx_file *x, struct dt_idx *out)
{
    int rc = read_data(x->in, x->bytes, &out->data);
    return rc ? rc : read_end(x->in, x->bytes);
}

static void idx_close(struct idx_file *x)
{
    if (x->in) {
        in_close(x->in);
        free(x->in);
    }
    x->in = NULL;
}

int dt_data_idx_load(const char *path, int ndim, const int64_t *want_dims, struct dt_idx *out)
{
    struct idx_file x = {0};
    int rc = idx_open(path, ndim, want_dims, out, &x);
    if (rc == 0)
        rc = idx_read(&x, out);
    idx_close(&x);
    if (rc)
        dt_data_idx_release(out);
    return rc;
}

void dt_data_idx_release(struct dt_idx *x)
{
    free(x->data);
    x->data = NULL;
}

/* Both headers first: the counts must agree, and the set may not be empty,
 * before either file's data is inflated.  A 1.5 MB gzip bomb of an images
 * file, its header declaring two million images (1.5 GB) beside 60000
 * labels, was inflated whole before the mismatch showed; now it costs its
 * header. */
static int open_pair(const char *ipath, const char *lpath, struct dt_idx *img, struct dt_idx *lab,
                     struct idx_file f[2])
{
    const int64_t want_img[3] = {0, 28, 28}, want_lab[1] = {0};
    int rc = idx_open(ipath, 3, want_img, img, &f[0]);
    if (rc == 0)
        rc = idx_open(lpath, 1, want_lab, lab, &f[1]);
    if (rc == 0 && lab->dims[0] != img->dims[0])
        rc = dt_error_set(DT_EINVAL,
                          "%s: %lld labels for %lld images in %s (the headers disagree; no data read)", lpath,
                          (long long)lab->dims[0], (long long)img->dims[0], ipath);
    if (rc == 0 && img->dims[0] == 0)
        rc = dt_error_set(DT_EINVAL, "%s and %s hold no examples: an empty data set", ipath, lpath);
    return rc;
}

int dt_data_load_fashion_mnist(const char *dir, int train, struct dt_dataset *out)
{
    memset(out, 0, sizeof *out);
    const char *split = train ? "train" : "t10k";
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    struct dt_idx img = {0}, lab = {0};
    struct idx_file f[2] = {{0}, {0}};
    int rc = open_pair(ipath, lpath, &img, &lab, f);
    if (rc == 0)
        rc = idx_read(&f[1], &lab);
    if (rc == 0)
        rc = idx_read(&f[0], &img);
    idx_close(&f[0]);
    idx_close(&f[1]);
    for (int64_t i = 0; rc == 0 && i < lab.dims[0]; i++)
        if (lab.data[i] > 9)
            rc = dt_error_set(DT_EINVAL, "%s: label %d of example %lld is not a class 0..9", lpath,
                              lab.data[i], (long long)i);
    if (rc) {
        dt_data_idx_release(&img);
        dt_data_idx_release(&lab);
        return rc;
    }
    out->n = img.dims[0];
    out->rows = 28;
    out->cols = 28;
    out->classes = 10;
    out->images = img.data;
    out->labels = lab.data;
    return 0;
}

void dt_data_release(struct dt_dataset *d)
{
    free(d->images);
    free(d->labels);
    d->images = d->labels = NULL;
}
