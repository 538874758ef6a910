/*
 * Record checksums of the coefficient cache (format version 2; dctnet/data/cache/format.py
 * record_checksum is the definition, written at build time by the Python xxhash package): XXH3-64
 * of a record's bytes, seeded with the XXH3-64 (seed 0) of its row of tables.npy, the 4 x 64
 * uint16 quantization tables as stored (little-endian, 512 bytes). xxHash is vendored in
 * csrc/xxhash/ (VENDORED.md).
 */
#ifndef DCTNET_CHECKSUM_H
#define DCTNET_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define CHECKSUM_TABLE_BYTES 512 /* one row of tables.npy: 4 components x 64 uint16 */

/* Select the vector unit (SSE2, AVX2, AVX-512 on x86) before any thread hashes: the choice is
 * made once, here, at module init, not lazily by the first GIL-free call. */
void checksum_init(void);

/* The checksum of nbytes bytes at data whose tables row is the CHECKSUM_TABLE_BYTES bytes at
 * table_row. */
uint64_t record_checksum(const uint8_t *data, size_t nbytes, const void *table_row);

#endif
