/* crc32c.c - table-driven CRC-32C (see crc32c.h).
 *
 * The 256-entry table is built once (pthread_once), so no thread pays for it
 * twice and nothing is allocated: table[n] is the CRC of the byte n with a
 * zero register, e.g. table[1] = 0xF26B8303.
 */
#include "base/crc32c.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[n] = c;
    }
}

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&table_once, build_table);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}
