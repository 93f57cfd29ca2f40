/* test_tbevents.c - CRC-32C and the TensorBoard event writer: the reference
 * vectors of trainer.md §9.2 byte for byte, and a reader written here that
 * checks framing, both CRCs and the decoded scalars of a longer file (the
 * Python tensorboard reader is exercised by tests/integration/test_obs_tensorboard.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/crc32c.h"
#include "worker/tbevents.h"
#include "tests/unit/run_dir_fixture.h"

static size_t slurp(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void crc32c_vectors(void **state)
{
    (void)state;
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++)
        inc[i] = (unsigned char)i;
    assert_int_equal(dt_crc32c(0, "123456789", 9), 0xE3069283u);
    /* RFC 3720 (iSCSI) B.4 vectors */
    assert_int_equal(dt_crc32c(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(dt_crc32c(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(dt_crc32c(0, inc, 32), 0x46DD794Eu);
    /* continuing a CRC equals one pass over the whole */
    assert_int_equal(dt_crc32c(dt_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    /* the masked CRC of the 8 length bytes of a 24-byte record (§9.2: a37f4b22 on disk) */
    unsigned char len24[8] = {24};
    assert_int_equal(dt_crc32c_mask(dt_crc32c(0, len24, 8)), 0x224b7fa3u);
}

static const unsigned char reference_file[88] = {
    /* record 1: Event{wall_time=1700000000.5, file_version="brain.Event:2"} */
    0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22,
    0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x1a, 0x0d,
    'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2',
    0x2b, 0x35, 0x31, 0x10,
    /* record 2: Event{wall_time=1700000001.25, step=42, summary{value{tag="train/loss", simple_value=0.5}}} */
    0x20, 0, 0, 0, 0, 0, 0, 0, 0x29, 0xed, 0xa9, 0x50,
    0x09, 0x00, 0x00, 0x50, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x2a, 0x2a, 0x13, 0x0a, 0x11, 0x0a, 0x0a,
    't', 'r', 'a', 'i', 'n', '/', 'l', 'o', 's', 's', 0x15, 0x00, 0x00, 0x00, 0x3f,
    0x86, 0x15, 0x16, 0x73,
};

static void reference_file_byte_exact(void **state)
{
    (void)state;
    char path[128];
    unsigned char got[256];
    struct dt_tb_writer *w;
    snprintf(path, sizeof path, "%s/events.out.tfevents.1700000000.host", run_dir);
    assert_int_equal(dt_tb_open_file(path, 1700000000.5, &w), 0);
    assert_int_equal(dt_tb_scalar_at(w, "train/loss", 42, 0.5f, 1700000001.25), 0);
    assert_int_equal(dt_tb_close(w), 0);
    size_t n = slurp(path, got, sizeof got);
    assert_int_equal(n, sizeof reference_file);
    assert_memory_equal(got, reference_file, sizeof reference_file);
}

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t varint(const unsigned char **p)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

/* Checks one scalar record at p (framing, CRCs, every field) and returns its size. */
static size_t check_scalar(const unsigned char *p, const char *tag, int64_t step, float value)
{
    uint64_t len = le(p, 8);
    assert_int_equal(le(p + 8, 4), dt_crc32c_mask(dt_crc32c(0, p, 8)));
    assert_int_equal(le(p + 12 + len, 4), dt_crc32c_mask(dt_crc32c(0, p + 12, len)));
    const unsigned char *q = p + 12;
    assert_int_equal(*q++, 0x09);
    q += 8;
    if (step != 0) {
        assert_int_equal(*q++, 0x10);
        assert_int_equal((int64_t)varint(&q), step);
    }
    assert_int_equal(*q++, 0x2a);
    uint64_t slen = varint(&q);
    assert_ptr_equal(q + slen, p + 12 + len);
    assert_int_equal(*q++, 0x0a);
    varint(&q);
    assert_int_equal(*q++, 0x0a);
    uint64_t tlen = varint(&q);
    assert_int_equal(tlen, strlen(tag));
    assert_memory_equal(q, tag, tlen);
    q += tlen;
    assert_int_equal(*q++, 0x15);
    uint32_t bits = (uint32_t)le(q, 4);
    float v;
    memcpy(&v, &bits, 4);
    assert_memory_equal(&v, &value, 4);
    return 16 + len;
}

/* 5000 scalars overflow the 64 KiB buffer several times; every record must survive intact. */
static void many_scalars_survive_buffer_flushes(void **state)
{
    (void)state;
    static const char *tags[] = {"train/loss", "train/lr", "a/much/longer/tag/name/for/the/varint/length/of/the/tag"};
    char path[128];
    struct dt_tb_writer *w;
    snprintf(path, sizeof path, "%s/many", run_dir);
    assert_int_equal(dt_tb_open_file(path, 1.0, &w), 0);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(dt_tb_scalar(w, tags[i % 3], (int64_t)i * 1000003, 1.0f / (float)(i + 1)), 0);
    assert_int_equal(dt_tb_close(w), 0);
    static unsigned char buf[1 << 20];
    size_t n = slurp(path, buf, sizeof buf), off = 16 + le(buf, 8);
    for (int i = 0; i < 5000; i++)
        off += check_scalar(buf + off, tags[i % 3], (int64_t)i * 1000003, 1.0f / (float)(i + 1));
    assert_int_equal(off, n);
}

/* The trainer's form: several tags of one step, non-finite values left out (null in metrics.jsonl). */
static void scalars_of_a_step_skip_non_finite(void **state)
{
    (void)state;
    static const char *const tags[] = {"train/loss", "train/grad_norm", "train/lr"};
    double values[] = {0.25, NAN, 1e-3};
    char path[128];
    struct dt_tb_writer *w;
    assert_int_equal(dt_tb_scalars(NULL, 1, tags, values, 3), 0);
    assert_int_equal(dt_tb_flush(NULL), 0);
    snprintf(path, sizeof path, "%s/step", run_dir);
    assert_int_equal(dt_tb_open_file(path, 1.0, &w), 0);
    assert_int_equal(dt_tb_scalars(w, 7, tags, values, 3), 0);
    assert_int_equal(dt_tb_close(w), 0);
    unsigned char buf[1024];
    size_t n = slurp(path, buf, sizeof buf), off = 16 + le(buf, 8);
    off += check_scalar(buf + off, "train/loss", 7, 0.25f);
    off += check_scalar(buf + off, "train/lr", 7, 1e-3f);
    assert_int_equal(off, n);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void buffered_until_flush(void **state)
{
    (void)state;
    char path[128];
    struct dt_tb_writer *w;
    snprintf(path, sizeof path, "%s/buffered", run_dir);
    assert_int_equal(dt_tb_open_file(path, 1.0, &w), 0);
    long first = file_size(path); /* the file_version event is written at once */
    assert_int_equal(first, 16 + 9 + 15);
    assert_int_equal(dt_tb_scalar(w, "x", 1, 2.0f), 0);
    assert_int_equal(file_size(path), first);
    assert_int_equal(dt_tb_flush(w), 0);
    long second = file_size(path);
    assert_true(second > first);
    dt_tb_set_flush_secs(w, 0);
    assert_int_equal(dt_tb_scalar(w, "x", 2, 3.0f), 0);
    assert_true(file_size(path) > second);
    assert_int_equal(dt_tb_close(w), 0);
}

static void named_for_time_and_host_without_clobbering(void **state)
{
    (void)state;
    struct dt_tb_writer *a, *b;
    assert_int_equal(dt_tb_open(run_dir, &a), 0);
    assert_int_equal(dt_tb_open(run_dir, &b), 0);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *base = strrchr(dt_tb_path(a), '/') + 1;
    assert_int_equal(strncmp(base, "events.out.tfevents.", 20), 0);
    assert_true(strlen(base) >= 20 + 10 + 1 + strlen(host));
    assert_non_null(strstr(base, host));
    assert_string_not_equal(dt_tb_path(a), dt_tb_path(b));
    assert_int_equal(dt_tb_close(a), 0);
    assert_int_equal(dt_tb_close(b), 0);
}

static void bad_input_is_reported(void **state)
{
    (void)state;
    struct dt_tb_writer *w = NULL;
    assert_int_equal(dt_tb_open("/nonexistent/dir", &w), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "/nonexistent/dir/events.out.tfevents."));
    char path[128], tag[DT_TB_MAX_TAG + 2];
    snprintf(path, sizeof path, "%s/tags", run_dir);
    assert_int_equal(dt_tb_open_file(path, 1.0, &w), 0);
    memset(tag, 't', sizeof tag - 1);
    tag[sizeof tag - 1] = 0;
    assert_int_equal(dt_tb_scalar(w, tag, 1, 1.0f), DT_EINVAL);
    assert_int_equal(dt_tb_scalar(w, "", 1, 1.0f), DT_EINVAL);
    tag[DT_TB_MAX_TAG] = 0;
    assert_int_equal(dt_tb_scalar(w, tag, 1, 1.0f), 0);
    assert_int_equal(dt_tb_close(w), 0);
    assert_int_equal(dt_tb_close(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32c_vectors),
        cmocka_unit_test(reference_file_byte_exact),
        cmocka_unit_test(many_scalars_survive_buffer_flushes),
        cmocka_unit_test(scalars_of_a_step_skip_non_finite),
        cmocka_unit_test(buffered_until_flush),
        cmocka_unit_test(named_for_time_and_host_without_clobbering),
        cmocka_unit_test(bad_input_is_reported),
    };
    return cmocka_run_group_tests_name("tbevents", tests, run_dir_setup, run_dir_teardown);
}
