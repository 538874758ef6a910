/*
 * Batch planning in C (dctnet/data/plan.py: plan_batch): from each sample's layout, size and crop
 * box to its MCU window, each plane's window in blocks, the valid size and relative box the
 * device step needs, and its layout group. Exists because as a few dozen numpy calls it cost more
 * than decoding several images. No Python here.
 */
#ifndef DCTNET_PLAN_H
#define DCTNET_PLAN_H

#include <stdint.h>

#define PLAN_SLOTS 4 /* component slots of a plan row */

/* One sample's row of plan_windows' table (dctnet.data.plan.PLAN_ROW mirrors it; the module
 * exports its layout and Python checks the two at import). */
typedef struct {
  int64_t win[4];              /* the MCU window (r0, r1, c0, c1): the box plus `margin` pixels, inside the image */
  int64_t pwin[4][PLAN_SLOTS]; /* each plane's window in blocks: pwin[k][c], k = r0, r1, c0, c1, c = component slot */
  int64_t valid[2];            /* image content in the window (height, width), pixels */
  int64_t rel[4];              /* the box (top, left, height, width) relative to the window */
  int64_t group;               /* the sample's layout group, numbered in order of first appearance */
} plan_row;

/* For image i of colour code color[i], ncomp[i] components with sampling factors
 * sampling[8i .. 8i+8) = (h, v) per component slot (slots past ncomp are ignored), true size
 * heights[i] x widths[i] and crop box boxes[4i .. 4i+4) (top, left, height, width): out[i].
 * group_first[g] is the first sample of group g, group_need[2g..2g+2) its largest window (R, C) in
 * MCUs; *ngroups their count. Returns 0, or 1 + the first sample whose fields are out of range
 * (components not 1, 3 or 4, sampling factors not 1..4, sizes not 1..65535, boxes beyond 2^31,
 * boxes empty or outside the image) or a margin outside 0..64. */
int64_t plan_windows(const int64_t *color, const int64_t *ncomp, const int64_t *sampling, const int64_t *heights,
                     const int64_t *widths, const int64_t *boxes, int64_t n, int64_t margin, plan_row *out,
                     int64_t *group_first, int64_t *group_need, int64_t *ngroups);

#endif
