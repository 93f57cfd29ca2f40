/* test_crc32c.c - CRC-32C (base/crc32c.c): the crc32-instruction path gives the table's values.
 *
 * Known vectors through both implementations; then dt_crc32c against
 * dt_crc32c_table on random bytes of every length 0..1024 from every start
 * within 8 bytes of alignment (the byte head, the 8-byte loop, the byte
 * tail, the 3 x 256-byte chains), on lengths around the 3 x 8 KiB chains'
 * edges, and continued across splits.  The speed of each is printed, not
 * asserted (a loaded machine must not fail a test); on a CPU with SSE4.2
 * dt_crc32c must be the instruction's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crc32c.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        p[i] = (unsigned char)(rng >> 24);
    }
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void vectors_of(crc_fn f)
{
    unsigned char zeros[32] = {0}, ones[32], inc[32], dec[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) {
        inc[i] = (unsigned char)i;
        dec[i] = (unsigned char)(31 - i);
    }
    assert_int_equal(f(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(f(0, "", 0), 0);
    assert_int_equal(f(0x12345678u, "", 0), 0x12345678u);
    /* RFC 3720 (iSCSI) B.4 */
    assert_int_equal(f(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(f(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(f(0, inc, 32), 0x46DD794Eu);
    assert_int_equal(f(0, dec, 32), 0x113FDB5Cu);
    assert_int_equal(f(f(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void known_vectors(void **state)
{
    (void)state;
    vectors_of(dt_crc32c_table);
    vectors_of(dt_crc32c);
}

static void every_length_and_start_matches_the_table(void **state)
{
    (void)state;
    unsigned char *buf = malloc(1024 + 8);
    assert_non_null(buf);
    fill_random(buf, 1024 + 8);
    for (size_t start = 0; start < 8; start++)
        for (size_t len = 0; len <= 1024; len++) {
            uint32_t want = dt_crc32c_table(0, buf + start, len), got = dt_crc32c(0, buf + start, len);
            if (want != got)
                fail_msg("start %zu length %zu: %08x, the table says %08x", start, len, got, want);
            /* a register carried in from earlier bytes */
            assert_int_equal(dt_crc32c(0xDEADBEEFu, buf + start, len),
                             dt_crc32c_table(0xDEADBEEFu, buf + start, len));
        }
    free(buf);
}

static void long_buffers_match_the_table(void **state)
{
    (void)state;
    const size_t big = 3 * 8192 * 5 + 3 * 256 * 3 + 77;
    unsigned char *buf = malloc(big + 8);
    assert_non_null(buf);
    fill_random(buf, big + 8);
    const size_t lens[] = {3 * 256 - 1,  3 * 256,  3 * 256 + 1,  3 * 8192 - 8,
                           3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 8192 + 3 * 256 + 7,
                           6 * 8192 + 5, big};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (size_t start = 0; start < 8; start += 3) {
            uint32_t want = dt_crc32c_table(0, buf + start, lens[i]);
            if (dt_crc32c(0, buf + start, lens[i]) != want)
                fail_msg("start %zu length %zu differs from the table", start, lens[i]);
        }
    /* split anywhere, continued: the same as one pass */
    uint32_t whole = dt_crc32c(0, buf, big);
    for (size_t cut = 0; cut <= big; cut += 4099)
        assert_int_equal(dt_crc32c(dt_crc32c(0, buf, cut), buf + cut, big - cut), whole);
    free(buf);
}

static double mb_per_s(crc_fn f, const unsigned char *p, size_t n, int reps)
{
    volatile uint32_t sink = 0;
    double t0 = dt_clock_s();
    for (int i = 0; i < reps; i++)
        sink = sink + f(0, p, n);
    double dt = dt_clock_s() - t0;
    return (double)n * reps / dt / 1e6;
}

static void speed_is_printed(void **state)
{
    (void)state;
    if (__builtin_cpu_supports("sse4.2"))
        assert_string_equal(dt_crc32c_impl(), "sse4.2");
    else
        assert_string_equal(dt_crc32c_impl(), "table");
    const size_t n = 16u << 20;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    fill_random(buf, n);
    double table = mb_per_s(dt_crc32c_table, buf, n, 2), used = mb_per_s(dt_crc32c, buf, n, 16);
    print_message("crc32c over 16 MiB: table %.0f MB/s, dt_crc32c (%s) %.0f MB/s\n", table, dt_crc32c_impl(),
                  used);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_vectors),
        cmocka_unit_test(every_length_and_start_matches_the_table),
        cmocka_unit_test(long_buffers_match_the_table),
        cmocka_unit_test(speed_is_printed),
    };
    return cmocka_run_group_tests_name("crc32c", tests, NULL, NULL);
}
