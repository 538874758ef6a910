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

/* Batch planning (dctnet/data/plan.py: plan_batch): for image i of colour code color[i],
 * ncomp[i] components with sampling factors sampling[8i .. 8i+8) = (h, v) per component slot
 * (zero past ncomp), true size heights[i] x widths[i] and crop box boxes[4i .. 4i+4)
 * (top, left, height, width), one row of PLAN_FIELDS int64:
 *   [0:4)   the MCU window (r0, r1, c0, c1): the box plus `margin` pixels, inside the image;
 *   [4:20)  each plane's window in blocks, as (r0 x4, r1 x4, c0 x4, c1 x4) over component slots;
 *   [20:22) image content in the window (height, width) in pixels;
 *   [22:26) the box relative to the window;
 *   [26]    the sample's layout group: groups are numbered in order of first appearance.
 * group_first[g] is the first sample of group g, group_need[2g..2g+2) its largest window (R, C) in
 * MCUs; *ngroups their count. Returns 0, or 1 + the first sample whose fields are out of range
 * (components not 1, 3 or 4, sampling factors not 1..4, sizes not 1..65535, boxes beyond 2^31). */
#define PLAN_FIELDS 27
int64_t plan_windows(const int64_t *color, const int64_t *ncomp, const int64_t *sampling, const int64_t *heights,
                     const int64_t *widths, const int64_t *boxes, int64_t n, int64_t margin, int64_t *out,
                     int64_t *group_first, int64_t *group_need, int64_t *ngroups);

#endif
