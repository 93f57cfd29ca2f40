/* idx.c - IDX reader through zlib and the Fashion-MNIST loader (see idx.h).
 *
 * gzread reads plain files too, so an uncompressed copy of the data set works
 * as well.  Not for writing IDX files.
 */
#include "worker/idx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "comm/error.h"

/* zlib's message for the last error, without the "<path>: " it puts first
 * (ours are prefixed with the path already). */
static const char *gz_message(gzFile f, const char *path, int *zerr)
{
    const char *msg = gzerror(f, zerr);
    size_t n = strlen(path);
    return strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0 ? msg + n + 2 : msg;
}

/* Fills buf[from, to) of a `total`-byte part (the count is for the message). */
static int read_range(gzFile f, const char *path, uint8_t *buf, size_t from, size_t to, size_t total,
                      const char *what)
{
    while (from < to) {
        unsigned chunk = to - from > (1u << 30) ? (1u << 30) : (unsigned)(to - from);
        int r = gzread(f, buf + from, chunk);
        if (r < 0) { /* Z_ERRNO: the disk failed; any other: the gzip stream is damaged */
            int zerr;
            const char *msg = gz_message(f, path, &zerr);
            if (zerr == Z_ERRNO)
                return dt_error_set(DT_EIO, "%s: reading %s: %s", path, what, msg);
            return dt_error_set(DT_EINVAL, "%s: damaged gzip stream in %s: %s", path, what, msg);
        }
        if (r == 0)
            return dt_error_set(DT_EINVAL, "%s: truncated: %s ends after %zu of %zu bytes", path, what,
                                from, total);
        from += (size_t)r;
    }
    return 0;
}

static int read_exact(gzFile f, const char *path, void *buf, size_t len, const char *what)
{
    return read_range(f, path, buf, 0, len, len, what);
}

/* The data, in a buffer that grows (doubling from 1 MiB) as bytes arrive:
 * the dims are only the header's word, and 20 bytes can claim 2^62 of data.
 * Sized up front, such a file fails as "no memory" (or, lazily allocated,
 * not at all until the short read) instead of as the truncated file it is. */
static int read_data(gzFile f, const char *path, size_t bytes, uint8_t **out)
{
    size_t cap = bytes < ((size_t)1 << 20) ? bytes : (size_t)1 << 20, got = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    int rc = buf ? 0 : dt_error_set(DT_ENOMEM, "%s: no memory for %zu bytes", path, cap);
    while (rc == 0 && got < bytes) {
        if (got == cap) {
            cap = cap > bytes / 2 ? bytes : 2 * cap;
            uint8_t *more = realloc(buf, cap);
            if (!more) {
                rc = dt_error_set(DT_ENOMEM, "%s: no memory for %zu bytes", path, cap);
                break;
            }
            buf = more;
        }
        rc = read_range(f, path, buf, got, cap, bytes, "the data");
        got = cap;
    }
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

/* After the data: the end of the file, and for gzip its trailer.  A stream
 * cut right after the data reads as a clean end (gzread returns 0, as it
 * does for a file still being written) and only gzerror's Z_BUF_ERROR
 * tells, which leaves the data's CRC unchecked. */
static int read_end(gzFile f, const char *path, size_t bytes)
{
    uint8_t extra;
    int r = gzread(f, &extra, 1), zerr = Z_OK;
    const char *msg = gz_message(f, path, &zerr);
    if (r > 0)
        return dt_error_set(DT_EINVAL, "%s: more data than the header's dims say (%zu bytes)", path, bytes);
    if (r < 0 || zerr == Z_BUF_ERROR)
        return dt_error_set(DT_EINVAL, "%s: damaged gzip stream after the data: %s", path, msg);
    return 0;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Header: magic (0, 0, type 0x08 = ubyte, ndim), then ndim big-endian int32 dims. */
static int read_header(gzFile f, const char *path, int ndim, const int64_t *want, struct dt_idx *out,
                       size_t *bytes)
{
    uint8_t b[4 + 4 * DT_IDX_MAX_DIMS];
    int rc = read_exact(f, path, b, 4, "the header");
    if (rc)
        return rc;
    uint32_t magic = be32(b);
    if (b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != ndim)
        return dt_error_set(DT_EINVAL, "%s: not an IDX file of %d-dim unsigned bytes (magic 0x%08x, want 0x%08x)",
                            path, ndim, magic, 0x0800u | (unsigned)ndim);
    rc = read_exact(f, path, b + 4, 4 * (size_t)ndim, "the header");
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
    return 0;
}

int dt_data_idx_load(const char *path, int ndim, const int64_t *want_dims, struct dt_idx *out)
{
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > DT_IDX_MAX_DIMS)
        return dt_error_set(DT_EINVAL, "%s: %d dims asked for, IDX supports 1..%d", path, ndim,
                            DT_IDX_MAX_DIMS);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno ? errno : ENOMEM,
                                  "%s: cannot open", path);
    size_t bytes = 0;
    int rc = read_header(f, path, ndim, want_dims, out, &bytes);
    if (rc == 0)
        rc = read_data(f, path, bytes, &out->data);
    if (rc == 0)
        rc = read_end(f, path, bytes);
    gzclose(f);
    if (rc)
        dt_data_idx_release(out);
    return rc;
}

void dt_data_idx_release(struct dt_idx *x)
{
    free(x->data);
    x->data = NULL;
}

int dt_data_load_fashion_mnist(const char *dir, int train, struct dt_dataset *out)
{
    memset(out, 0, sizeof *out);
    const char *split = train ? "train" : "t10k";
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    struct dt_idx img, lab;
    const int64_t want_img[3] = {0, 28, 28}, want_lab[1] = {0};
    int rc = dt_data_idx_load(ipath, 3, want_img, &img);
    if (rc)
        return rc;
    rc = dt_data_idx_load(lpath, 1, want_lab, &lab);
    if (rc) {
        dt_data_idx_release(&img);
        return rc;
    }
    if (lab.dims[0] != img.dims[0])
        rc = dt_error_set(DT_EINVAL, "%s: %lld labels for %lld images in %s", lpath, (long long)lab.dims[0],
                          (long long)img.dims[0], ipath);
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
