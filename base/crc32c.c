/* crc32c.c - CRC-32C (see crc32c.h): the SSE4.2 crc32 instruction where the CPU has it, a table otherwise.
 *
 * The table: table[n] is the CRC of the byte n with a zero register, e.g.
 * table[1] = 0xF26B8303; a byte at a time, about 230 MB/s.
 *
 * The instruction folds 8 bytes into the register in 3 cycles but can start
 * one every cycle, so one chain of it waits on itself two cycles in three.
 * Three chains over three adjacent blocks of the same length n keep it busy;
 * the CRC register is linear over GF(2), so with shift_n(r) the register
 * that n zero bytes take r to,
 *
 *     crc(r, A B C) = shift_n(shift_n(crc(r, A)) ^ crc(0, B)) ^ crc(0, C),
 *
 * and shift_n, linear too, is four 256-entry tables, one per byte of r
 * (Mark Adler's crc32c.c does the same).  The tables are made once, with
 * the instruction itself, from shift_n of the 32 one-bit registers.
 * Blocks of 8 KiB carry long buffers (the checkpoint's tensors); 256 bytes
 * the shorter tails, where shifting by 8 KiB would cost more than it saves.
 *
 * Which one runs is decided once, by cpuid (__builtin_cpu_supports), and
 * the choice is read through a pthread_once, so no thread sees it half made.
 */
#include "base/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[n] = c;
    }
}

uint32_t dt_crc32c_table(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&table_once, build_table);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256], shift_short[4][256];
static int have_sse42;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

/* shift[k][b] = the register `len` zero bytes take (b << 8k) to. */
__attribute__((target("sse4.2"))) static void build_shift(uint32_t shift[4][256], size_t len)
{
    uint32_t basis[32];
    for (int bit = 0; bit < 32; bit++) {
        uint64_t r = 1u << bit;
        for (size_t i = 0; i < len; i += 8)
            r = _mm_crc32_u64(r, 0);
        basis[bit] = (uint32_t)r;
    }
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t r = 0;
            for (int bit = 0; bit < 8; bit++)
                if (b & (1 << bit))
                    r ^= basis[8 * k + bit];
            shift[k][b] = r;
        }
}

static void choose(void)
{
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
    if (have_sse42) {
        build_shift(shift_long, LONG_BLOCK);
        build_shift(shift_short, SHORT_BLOCK);
    }
}

static inline uint32_t shift(const uint32_t s[4][256], uint32_t r)
{
    return s[0][r & 0xff] ^ s[1][(r >> 8) & 0xff] ^ s[2][(r >> 16) & 0xff] ^ s[3][r >> 24];
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Three chains over the next 3 * n bytes (n a multiple of 8); returns the register after them. */
__attribute__((target("sse4.2"))) static uint32_t three_blocks(uint32_t crc, const unsigned char *p, size_t n,
                                                               const uint32_t s[4][256])
{
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < n; i += 8) {
        a = _mm_crc32_u64(a, load64(p + i));
        b = _mm_crc32_u64(b, load64(p + n + i));
        c = _mm_crc32_u64(c, load64(p + 2 * n + i));
    }
    return shift(s, shift(s, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    for (; len && ((uintptr_t)p & 7); len--)
        crc = _mm_crc32_u8(crc, *p++);
    for (; len >= 3 * LONG_BLOCK; len -= 3 * LONG_BLOCK, p += 3 * LONG_BLOCK)
        crc = three_blocks(crc, p, LONG_BLOCK, shift_long);
    for (; len >= 3 * SHORT_BLOCK; len -= 3 * SHORT_BLOCK, p += 3 * SHORT_BLOCK)
        crc = three_blocks(crc, p, SHORT_BLOCK, shift_short);
    uint64_t r = crc;
    for (; len >= 8; len -= 8, p += 8)
        r = _mm_crc32_u64(r, load64(p));
    crc = (uint32_t)r;
    for (; len; len--)
        crc = _mm_crc32_u8(crc, *p++);
    return ~crc;
}

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&hw_once, choose);
    return have_sse42 ? crc_sse42(crc, data, len) : dt_crc32c_table(crc, data, len);
}

const char *dt_crc32c_impl(void)
{
    pthread_once(&hw_once, choose);
    return have_sse42 ? "sse4.2" : "table";
}

#else

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len)
{
    return dt_crc32c_table(crc, data, len);
}

const char *dt_crc32c_impl(void)
{
    return "table";
}

#endif
