#include "checksum.h"

/* xxHash, every function static (XXH_INLINE_ALL): nothing of it leaves the extension. On x86 the
 * dispatcher picks SSE2, AVX2 or AVX-512 at run time (the build itself targets plain x86-64). */
#if defined(__x86_64__) || defined(__i386__)
#include "xxhash/xxh_x86dispatch.c"
#define XXH3_SEEDED XXH3_64bits_withSeed_dispatch
#else
#define XXH_INLINE_ALL
#include "xxhash/xxhash.h"
#define XXH3_SEEDED XXH3_64bits_withSeed
#endif

void checksum_init(void) {
  static const uint8_t probe[CHECKSUM_TABLE_BYTES];
  (void)XXH3_SEEDED(probe, sizeof probe, 0);
}

uint64_t record_checksum(const uint8_t *data, size_t nbytes, const void *table_row) {
  return (uint64_t)XXH3_SEEDED(data, nbytes, XXH3_SEEDED(table_row, CHECKSUM_TABLE_BYTES, 0));
}
