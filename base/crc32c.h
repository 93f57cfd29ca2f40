/* crc32c.h - CRC-32C (Castagnoli), the checksum of TFRecord framing.
 *
 * Reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF:
 * crc32c("123456789") = 0xE3069283.  TFRecord stores the *masked* CRC,
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2^32, so that a CRC computed
 * over bytes that themselves hold CRCs does not degenerate.
 *
 * Not for general hashing: the table walk is byte-at-a-time, plenty for the
 * few hundred bytes per record the event writer checksums.
 */
#ifndef DT_CRC32C_H
#define DT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of len bytes, continuing from crc (pass 0 to start). */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t len);

/* TFRecord's mask of a finished CRC. */
static inline uint32_t dt_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
