/* Host crop sampling in C: torchvision's RandomResizedCrop on counter-based uniforms.
 *
 * The same numbers as dctnet/data/crop.py (RandomResizedCrop.boxes / .box): the uniforms are
 * splitmix64 of (seed, epoch, index, draw) and the arithmetic is the same IEEE double sequence
 * (exp from the same libm as Python's math.exp; sqrt exact; rint = round half to even = Python's
 * round; this file is compiled with -ffp-contract=off so no multiply-add is fused). Exists because
 * drawing a batch's boxes in numpy costs more than copying the batch out of a dense cache. */
#ifndef DCTNET_CROP_H
#define DCTNET_CROP_H

#include <stdint.h>

/* boxes[i] = (top, left, height, width) for image i of heights[i] x widths[i], index[i].
 * log_ratio_lo/hi are log(ratio[0]), log(ratio[1]) computed by the caller (Python's math.log). */
void rrc_boxes(uint64_t seed, uint64_t epoch, const int64_t *index, const int64_t *heights, const int64_t *widths,
               int64_t n, double scale_lo, double scale_hi, double ratio_lo, double ratio_hi, double log_ratio_lo,
               double log_ratio_hi, int64_t *boxes);

#endif
