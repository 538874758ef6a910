#include "sparse.h"

#include <string.h>

int sparse_expand(const uint64_t *masks, size_t nblocks, const int8_t *values, size_t nvalues, const int16_t *escapes,
                  size_t nescapes, const uint16_t *tables, const uint8_t *table_of_block, int16_t *out) {
  size_t vi = 0, ei = 0;
  memset(out, 0, nblocks * 64 * sizeof(int16_t));
  for (size_t b = 0; b < nblocks; b++, out += 64) {
    uint64_t m = masks[b];
    const uint16_t *q = tables + 64 * (size_t)table_of_block[b];
    while (m) {
      int k = __builtin_ctzll(m);
      int32_t v;
      m &= m - 1;
      if (vi >= nvalues) return -1;
      v = values[vi++];
      if (v == -128) {
        if (ei >= nescapes) return -1;
        v = escapes[ei++];
      }
      out[k] = (int16_t)(v * (int32_t)q[k]); /* fits by construction (encoder's choice of table) */
    }
  }
  return (vi == nvalues && ei == nescapes) ? 0 : -1;
}
