/* Dequantization of int16 coefficient blocks (64 per block, natural order) by a table of 64. */
#ifndef DCTNET_DEQUANT_H
#define DCTNET_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

/* out = saturate_int16(in * q) for nblocks blocks (in may equal out); returns whether anything
 * was clamped. */
int dequantize(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks);

/* dequantize, for writing a batch window: non-temporal stores where out is 16-byte aligned (the
 * batch is not read again on this core). */
int dequantize_out(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks);

/* Zero whole blocks of a batch window (non-temporal stores where out is 16-byte aligned). */
void zero_out(int16_t *out, size_t nblocks);

/* Make the non-temporal stores above visible before a window is handed on. */
void dequantize_fence(void);

#endif
