/* test_idx.c - the IDX reader on the real Fashion-MNIST files and on broken
 * ones (bad magic, wrong dims, truncated, trailing data, damaged gzip, dims
 * far beyond the file), each error naming the file; gzip bombs (issue 26)
 * cost their header, or what their header declares, not what they inflate to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "worker/data/idx.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static void real_files(void **state)
{
    (void)state;
    struct dt_dataset tr, te;
    int rc = dt_data_load_fashion_mnist(FMNIST, 1, &tr);
    if (rc)
        fail_msg("%s (install dataset-fashion-mnist: scripts/install-deps.sh)", dt_error_last());
    assert_int_equal(tr.n, 60000);
    assert_int_equal(tr.labels[0], 9);
    assert_int_equal(tr.labels[1], 0);
    assert_int_equal(tr.labels[3], 3);
    int counts[10] = {0};
    for (int i = 0; i < 60000; i++)
        counts[tr.labels[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(counts[c], 6000);
    assert_int_equal(dt_data_load_fashion_mnist(FMNIST, 0, &te), 0);
    assert_int_equal(te.n, 10000);
    assert_int_equal(te.labels[0], 9);
    assert_int_equal(te.labels[1], 2);
    dt_data_release(&tr);
    dt_data_release(&te);
}

/* Writes a gzip'd file of `len` bytes. */
static void write_gz(const char *path, const uint8_t *b, size_t len)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, b, (unsigned)len), (int)len);
    gzclose(f);
}

static int load(const char *path, int ndim, const int64_t *want)
{
    struct dt_idx x;
    int rc = dt_data_idx_load(path, ndim, want, &x);
    if (rc == 0)
        dt_data_idx_release(&x);
    return rc;
}

static void broken_files(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/dtrain-idx-%d.gz", (int)getpid());
    const int64_t img[3] = {0, 2, 2}, any[1] = {0};
    /* 2 images of 2x2: magic 0x00000803, dims 2, 2, 2, then 8 bytes. */
    uint8_t good[16 + 8] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8};
    write_gz(path, good, sizeof good);
    assert_int_equal(load(path, 3, img), 0);

    write_gz(path, good, sizeof good - 3);
    assert_int_equal(load(path, 3, img), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), path));
    assert_non_null(strstr(dt_error_last(), "truncated"));

    uint8_t bad[sizeof good];
    memcpy(bad, good, sizeof good);
    bad[2] = 0x0d; /* float data */
    write_gz(path, bad, sizeof bad);
    assert_int_equal(load(path, 3, img), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "magic 0x00000d03"));

    write_gz(path, good, sizeof good);
    const int64_t img3[3] = {0, 3, 2};
    assert_int_equal(load(path, 3, img3), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "dim 1 is 2, expected 3"));
    assert_int_equal(load(path, 1, any), DT_EINVAL); /* a label file was expected */

    uint8_t longer[sizeof good + 1];
    memcpy(longer, good, sizeof good);
    longer[sizeof good] = 9;
    write_gz(path, longer, sizeof longer);
    assert_int_equal(load(path, 3, img), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "more data"));

    unlink(path);
    assert_int_equal(load(path, 3, img), DT_ENOTFOUND);
    assert_int_equal(dt_data_load_fashion_mnist("/nonexistent", 1, &(struct dt_dataset){0}), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "/nonexistent/train-images-idx3-ubyte.gz"));
}

/* Writes raw bytes (no gzip framing of ours). */
static void write_raw(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* What fuzz_idx found: dims claiming terabytes in a 20-byte file were
 * allocated up front and failed as "no memory".  Next to it: a gzip stream
 * cut before its trailer was taken as whole, and a CRC mismatch was called
 * an I/O error. */
static void fuzzed_files(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/dtrain-idx-fz-%d.gz", (int)getpid());
    const int64_t img[3] = {0, 28, 28}, any[2] = {0, 0};
    uint8_t huge[16 + 4] = {0, 0, 8, 3, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3, 4};
    write_gz(path, huge, sizeof huge);
    assert_int_equal(load(path, 3, img), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), path));
    assert_non_null(strstr(dt_error_last(), "truncated: the data ends after 4 of 1683627179248 bytes"));
    uint8_t huge2[12 + 4] = {0, 0, 8, 2, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4};
    write_raw(path, huge2, sizeof huge2);
    assert_int_equal(load(path, 2, any), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "truncated"));

    /* A gzip file's last 8 bytes: CRC-32 and length of the data. */
    uint8_t good[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 9, 0, 3};
    const int64_t lab[1] = {0};
    write_gz(path, good, sizeof good);
    FILE *f = fopen(path, "rb");
    uint8_t gz[256];
    size_t n = fread(gz, 1, sizeof gz, f);
    fclose(f);
    assert_true(n > 8 && n < sizeof gz);
    gz[n - 8] ^= 1;
    write_raw(path, gz, n);
    assert_int_equal(load(path, 1, lab), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "damaged gzip stream"));
    gz[n - 8] ^= 1;
    write_raw(path, gz, n - 8);
    assert_int_equal(load(path, 1, lab), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "damaged gzip stream"));
    write_raw(path, gz, n);
    assert_int_equal(load(path, 1, lab), 0);
    unlink(path);
}

/* The gzip'd bytes of `len` bytes of data (as write_gz writes them). */
static size_t gz_bytes(const uint8_t *b, size_t len, uint8_t *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/dtrain-idx-gz-%d.gz", (int)getpid());
    write_gz(path, b, len);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(out, 1, cap, f);
    fclose(f);
    unlink(path);
    assert_true(n > 0 && n < cap);
    return n;
}

/* zlib's gzread stops quietly at bytes after a gzip member that do not start
 * another one, so junk appended to a data set file was never noticed.  gzip
 * allows members one after another, and the data may run on through them;
 * anything else after the last member is refused, naming where it starts. */
static void bytes_after_the_gzip_data(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/dtrain-idx-tail-%d.gz", (int)getpid());
    const int64_t lab[1] = {0};
    uint8_t good[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 9, 0, 3};
    uint8_t gz[512];
    size_t n = gz_bytes(good, sizeof good, gz, sizeof gz);
    static const char *const tails[] = {"garbage", "\x1f", "\0\0\0\0"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        size_t t = strlen(tails[i]) ? strlen(tails[i]) : 4;
        memcpy(gz + n, tails[i], t);
        write_raw(path, gz, n + t);
        assert_int_equal(load(path, 1, lab), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), path));
        char at[64];
        snprintf(at, sizeof at, "at offset %zu that are not another gzip member", n);
        if (!strstr(dt_error_last(), at))
            fail_msg("tail %zu: wanted '%s' in: %s", i, at, dt_error_last());
    }
    /* Two members, the data split between them: one file. */
    size_t n1 = gz_bytes(good, 9, gz, sizeof gz);
    size_t n2 = gz_bytes(good + 9, 2, gz + n1, sizeof gz - n1);
    write_raw(path, gz, n1 + n2);
    struct dt_idx x;
    assert_int_equal(dt_data_idx_load(path, 1, lab, &x), 0);
    assert_int_equal(x.dims[0], 3);
    assert_memory_equal(x.data, good + 8, 3);
    dt_data_idx_release(&x);
    /* A third member holding more than the dims say; then one cut inside its header. */
    size_t n3 = gz_bytes(good + 9, 1, gz + n1 + n2, sizeof gz - n1 - n2);
    write_raw(path, gz, n1 + n2 + n3);
    assert_int_equal(load(path, 1, lab), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "more data than the header's dims say"));
    write_raw(path, gz, n1 + n2 + 5);
    assert_int_equal(load(path, 1, lab), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "damaged gzip stream"));
    /* An uncompressed file is read as it is, and its tail is more data. */
    write_raw(path, good, sizeof good);
    assert_int_equal(load(path, 1, lab), 0);
    uint8_t longer[sizeof good + 1];
    memcpy(longer, good, sizeof good);
    longer[sizeof good] = 1;
    write_raw(path, longer, sizeof longer);
    assert_int_equal(load(path, 1, lab), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "more data"));
    unlink(path);
}

/* ---- gzip bombs (issue 26) ---- */

/* One gzip member of `len` zero bytes (about a thousandth of that). */
static uint8_t *zeros_member(size_t len, size_t *out_len)
{
    uint8_t *zeros = calloc(1, len);
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, len);
    uint8_t *out = malloc(cap);
    z.next_in = zeros;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    free(zeros);
    return out;
}

/* An IDX file of `count` x dims of zeros as one member for the header and
 * `members` members of `member_len` zero bytes each: megabytes that inflate
 * to gigabytes. */
static void write_bomb(const char *path, int ndim, uint32_t count, size_t member_len, size_t members)
{
    uint8_t head[16] = {0, 0, 8, (uint8_t)ndim, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28};
    for (int b = 0; b < 4; b++)
        head[4 + b] = (uint8_t)(count >> (24 - 8 * b)); /* dim 0, big-endian */
    uint8_t gz[256];
    size_t n = gz_bytes(head, 4 + 4 * (size_t)ndim, gz, sizeof gz), m;
    uint8_t *member = zeros_member(member_len, &m);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(gz, 1, n, f), n);
    for (size_t i = 0; i < members; i++)
        assert_int_equal(fwrite(member, 1, m, f), m);
    assert_int_equal(fclose(f), 0);
    free(member);
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The bomb: 1.5 MB of images whose header declares 1996800 images
 * (1.5 GB, all there) next to a labels file of 3.  The counts are compared
 * from the headers, before anything is inflated.  Next, a labels file that
 * agrees: the images file then inflates no further than its header's
 * 3 images and one byte past them.  An empty data set is an error. */
static void gzip_bomb_costs_its_header(void **state)
{
    (void)state;
    char dir[64], img[128], lab[128];
    snprintf(dir, sizeof dir, "/tmp/dtrain-idx-bomb-%d", (int)getpid());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte.gz", dir);
    const size_t member = 784 * 1024, members = 1950; /* 1996800 images of 784 bytes */
    write_bomb(img, 3, 1024 * members, member, members);
    uint8_t labels[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 9, 0, 3};
    write_gz(lab, labels, sizeof labels);
    struct stat st;
    assert_int_equal(stat(img, &st), 0);
    long rss0 = max_rss_kib();
    double t0 = now_s();
    struct dt_dataset d;
    assert_int_equal(dt_data_load_fashion_mnist(dir, 1, &d), DT_EINVAL);
    double t1 = now_s();
    printf("# a %lld-byte bomb of 1996800 images refused in %.3f s: %s\n", (long long)st.st_size, t1 - t0,
           dt_error_last());
    assert_non_null(strstr(dt_error_last(), "3 labels for 1996800 images"));
    assert_non_null(strstr(dt_error_last(), img));
    assert_non_null(strstr(dt_error_last(), lab));
    /* headers agree at 3 images, the stream goes on: refused one byte past them */
    write_bomb(img, 3, 3, member, members);
    assert_int_equal(dt_data_load_fashion_mnist(dir, 1, &d), DT_EINVAL);
    double t2 = now_s();
    printf("# a bomb declaring 3 images refused in %.3f s: %s\n", t2 - t1, dt_error_last());
    assert_non_null(strstr(dt_error_last(), img));
    assert_non_null(strstr(dt_error_last(), "more data than the header's dims say (2352 bytes)"));
    assert_non_null(strstr(dt_error_last(), "past byte 2352 of it (file offset"));
    long grew = max_rss_kib() - rss0;
    printf("# peak RSS grew %ld KiB\n", grew);
    assert_true(t2 - t0 < 3.0);
    assert_true(grew < 64 * 1024);
    /* empty: both headers say 0 */
    uint8_t none[8] = {0, 0, 8, 1, 0, 0, 0, 0};
    write_gz(lab, none, sizeof none);
    write_bomb(img, 3, 0, 16, 0);
    assert_int_equal(dt_data_load_fashion_mnist(dir, 1, &d), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "hold no examples: an empty data set"));
    unlink(img);
    unlink(lab);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_files),
        cmocka_unit_test(broken_files),
        cmocka_unit_test(fuzzed_files),
        cmocka_unit_test(bytes_after_the_gzip_data),
        cmocka_unit_test(gzip_bomb_costs_its_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
