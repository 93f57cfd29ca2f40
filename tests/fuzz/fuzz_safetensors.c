/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Checkpoints and the PyTorch fixtures come from disk, so any bytes must give
 * either a file whose every tensor lies inside the buffer with exactly the
 * bytes its dtype and shape say, or an error with a message; never a crash, a
 * leak or a hang.  The input is copied into a buffer of its exact size, so a
 * read one byte past the file is an ASan report.  What parses is written back
 * with dt_safetensors_write_fd and read again: the writer must give a file the
 * reader takes, with the same tensors and metadata.
 *
 * Not a test of the reader's refusals one by one (tests/unit/test_safetensors.c)
 * nor of checkpoints' checksums (fuzz_ckpt.c).
 */
#include "base/error.h"
#include "worker/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile uint8_t sink; /* keeps the reads of the data */

/* The header's JSON ends where the data begins. */
static size_t data_start(const struct dt_safetensors *f)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f->file[i];
    return 8 + (size_t)n;
}

/* Bytes a tensor's dtype and shape ask for; aborts on a product that wraps,
 * since a consumer sizing a copy by the shape would then overrun the data. */
static size_t shape_bytes(const struct dt_st_tensor *t)
{
    size_t bytes = dt_safetensors_dtype_size(t->dtype);
    if (bytes == 0 || t->ndim < 0 || t->ndim > DT_ST_MAX_DIMS)
        abort();
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0 || __builtin_mul_overflow(bytes, (size_t)t->shape[d], &bytes))
            abort();
    return bytes;
}

static void check_tensor(const struct dt_safetensors *f, const struct dt_st_tensor *t, size_t start)
{
    if (!memchr(t->name, 0, sizeof t->name) || !memchr(t->dtype, 0, sizeof t->dtype))
        abort();
    if (t->begin > t->end || t->end > f->file_len - start || t->end - t->begin != shape_bytes(t))
        abort();
    if ((const uint8_t *)t->data != f->file + start + t->begin)
        abort();
    /* Touch every byte, so ASan sees a range that leaves the buffer. */
    for (size_t i = 0; i < t->end - t->begin; i++)
        sink += ((const uint8_t *)t->data)[i];
    if (dt_safetensors_find(f, t->name) != t)
        abort(); /* names are unique, so find gives this very tensor */
}

static void check_file(const struct dt_safetensors *f, size_t size)
{
    if (f->n < 0 || f->n_meta < 0 || (f->n && !f->tensors) || (f->n_meta && !f->meta) || f->file_len != size)
        abort();
    size_t start = data_start(f);
    if (start > size)
        abort();
    for (int i = 0; i < f->n; i++)
        check_tensor(f, &f->tensors[i], start);
    for (int i = 0; i < f->n_meta; i++)
        if (!f->meta[2 * i] || !f->meta[2 * i + 1] || !dt_safetensors_meta(f, f->meta[2 * i]))
            abort();
}

/* One memfd for the whole run: the writer wants a descriptor. */
static int scratch_fd(void)
{
    static int fd = -1;
    if (fd < 0)
        fd = memfd_create("fuzz_safetensors", 0);
    if (fd < 0 || ftruncate(fd, 0) || lseek(fd, 0, SEEK_SET))
        abort();
    return fd;
}

static void same(const struct dt_safetensors *a, const struct dt_safetensors *b)
{
    if (a->n != b->n || a->n_meta != b->n_meta)
        abort();
    for (int i = 0; i < a->n; i++) {
        const struct dt_st_tensor *x = &a->tensors[i], *y = dt_safetensors_find(b, x->name);
        if (!y || strcmp(x->dtype, y->dtype) || x->ndim != y->ndim ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) ||
            x->end - x->begin != y->end - y->begin || memcmp(x->data, y->data, x->end - x->begin))
            abort();
    }
    for (int i = 0; i < 2 * a->n_meta; i++)
        if (strcmp(a->meta[i], b->meta[i]))
            abort();
}

/* Writes f back out and reads the result: it must be the same file. */
static void round_trip(const struct dt_safetensors *f)
{
    struct dt_st_entry *e = calloc((size_t)f->n + 1, sizeof *e);
    if (!e)
        abort();
    for (int i = 0; i < f->n; i++) {
        const struct dt_st_tensor *t = &f->tensors[i];
        e[i] = (struct dt_st_entry){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    int fd = scratch_fd();
    if (dt_safetensors_write_fd(fd, "rewritten", e, f->n, (const char *const *)f->meta, f->n_meta))
        abort();
    free(e);
    off_t len = lseek(fd, 0, SEEK_END);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || len < 0 || pread(fd, buf, (size_t)len, 0) != len)
        abort();
    struct dt_safetensors again;
    if (dt_safetensors_parse("rewritten", buf, (size_t)len, &again))
        abort(); /* what the writer writes must read back */
    check_file(&again, (size_t)len);
    same(f, &again);
    dt_safetensors_release(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct dt_safetensors f;
    int rc = dt_safetensors_parse("fuzz.safetensors", buf, size, &f);
    if (rc) {
        if (f.file || f.tensors || f.meta || !dt_error_last()[0])
            abort(); /* a failure frees everything and always says why */
        dt_error_clear();
        return 0;
    }
    check_file(&f, size);
    round_trip(&f);
    dt_safetensors_release(&f);
    return 0;
}
