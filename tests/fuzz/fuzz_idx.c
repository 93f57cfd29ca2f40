/* fuzz_idx.c - libFuzzer target for the IDX (MNIST format) reader.
 *
 * dt_data_idx_load reads a path through zlib, so each input is written to two
 * memfds, as it is and gzip-compressed, and each is loaded as the Fashion-MNIST
 * loader does (3 dims of 28x28 images, 1 dim of labels) and with the dims its
 * own magic claims.  Any bytes must give either data whose size is the
 * product of the dims it reports, or an error naming the file; never a crash,
 * a leak, a hang, or gigabytes allocated for a file of a few bytes (libFuzzer
 * stops at a 2 GB malloc by default).  Inputs that are themselves gzip (the
 * seeds include some) fuzz zlib's decoding of damaged streams; zlib is not
 * instrumented, so its paths add no coverage and those mutations are blind.
 *
 * Not a test of the Fashion-MNIST loader's label checks (tests/unit/test_idx.c).
 */
#include "base/error.h"
#include "worker/data/idx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

static volatile uint8_t sink; /* keeps the reads of the data */

struct scratch {
    int fd;
    char path[64];
};

/* Made once per process and rewritten for every input: a file per input
 * would make the fuzzer's speed the file system's. */
static void put(struct scratch *s, const char *name, const void *b, size_t len)
{
    if (!s->path[0]) {
        s->fd = memfd_create(name, 0);
        snprintf(s->path, sizeof s->path, "/proc/self/fd/%d", s->fd);
    }
    if (s->fd < 0 || ftruncate(s->fd, 0) || pwrite(s->fd, b, len, 0) != (ssize_t)len)
        abort();
}

/* gzip (not zlib) framing, as the data set's .gz files have. */
static uint8_t *gzip(const uint8_t *data, size_t size, size_t *out_len)
{
    z_stream z = {0};
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    size_t cap = deflateBound(&z, size);
    uint8_t *out = malloc(cap);
    if (!out)
        abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static void load(const char *path, int ndim, const int64_t *want)
{
    struct dt_idx x;
    if (dt_data_idx_load(path, ndim, want, &x)) {
        if (x.data || !strstr(dt_error_last(), path))
            abort(); /* a failure frees the data and names the file */
        dt_error_clear();
        return;
    }
    size_t bytes = 1;
    for (int i = 0; i < ndim; i++) {
        if (x.dims[i] < 0 || (want[i] > 0 && x.dims[i] != want[i]))
            abort();
        bytes *= (size_t)x.dims[i];
    }
    if (x.ndim != ndim || !x.data)
        abort();
    for (size_t i = 0; i < bytes; i++)
        sink += x.data[i]; /* ASan sees dims that claim more than was allocated */
    dt_data_idx_release(&x);
}

static void load_all(const char *path, const uint8_t *data, size_t size)
{
    static const int64_t images[3] = {0, 28, 28}, labels[1] = {0}, any[DT_IDX_MAX_DIMS] = {0};
    load(path, 3, images);
    load(path, 1, labels);
    int claimed = size >= 4 && data[3] >= 1 && data[3] <= DT_IDX_MAX_DIMS ? data[3] : 2;
    load(path, claimed, any);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct scratch raw, packed;
    put(&raw, "fuzz_idx_raw", data, size);
    load_all(raw.path, data, size);
    size_t len;
    uint8_t *gz = gzip(data, size, &len);
    put(&packed, "fuzz_idx_gz", gz, len);
    free(gz);
    load_all(packed.path, data, size);
    return 0;
}
