/* crc32c.h - CRC-32C (Castagnoli), the checksum of TFRecord framing.
 *
 * Reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF:
 * crc32c("123456789") = 0xE3069283.  TFRecord stores the *masked* CRC,
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2^32, so that a CRC computed
 * over bytes that themselves hold CRCs does not degenerate.
 *
 * Checkpoints checksum every tensor (GPT-2 124M with its AdamW moments is
 * 1.5 GB), so dt_crc32c uses the SSE4.2 crc32 instruction where the CPU has
 * it (several GB/s) and a byte-at-a-time table (about 230 MB/s) elsewhere;
 * both give the same values.
 */
#ifndef DT_CRC32C_H
#define DT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of len bytes, continuing from crc (pass 0 to start). */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len);

/* The same with the table only, whatever the CPU: what dt_crc32c is checked against. */
uint32_t dt_crc32c_table(uint32_t crc, const void *data, size_t len);

/* Which one dt_crc32c uses here: "sse4.2" or "table". */
const char *dt_crc32c_impl(void);

/* TFRecord's mask of a finished CRC. */
static inline uint32_t dt_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
