/*
 * dctnet sparse coefficient format: expansion to dense int16 planes.
 *
 * A record holds, for nblocks blocks in order: a uint64 nonzero mask per block (bit k = natural
 * coefficient k), the nonzero quantized values in block order as int8 with -128 as an escape, and
 * for each escape the real value as int16 (in order). Each block is dequantized with a table of 64
 * uint16 (table_of_block[b] selects it), multiplied exactly; encoders use a table of ones where
 * the product would not fit int16, so expansion is bit-identical to the reader's planes.
 */
#ifndef DCTNET_SPARSE_H
#define DCTNET_SPARSE_H

#include <stddef.h>
#include <stdint.h>

/* Returns 0, or -1 when the streams are inconsistent (more values/escapes consumed than given). */
int sparse_expand(const uint64_t *masks, size_t nblocks, const int8_t *values, size_t nvalues, const int16_t *escapes,
                  size_t nescapes, const uint16_t *tables, const uint8_t *table_of_block, int16_t *out);

#endif
