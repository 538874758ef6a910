/* Batch planning (see plan.h). */
#include "plan.h"

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0; Python's // */
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

#define PLAN_MAX_SIDE 65535            /* JPEG sizes are 16-bit */
#define PLAN_MAX_BOX ((int64_t)1 << 31) /* boxes far outside any image are a caller's bug */

/* What samples of one layout group share: colour code, component count and sampling factors
 * (slots past nc count as zero, whatever they hold). */
static uint64_t layout_key(int64_t color, int64_t nc, const int64_t *samp) {
  uint64_t key = (uint64_t)color * 16 + (uint64_t)nc;
  for (int c = 0; c < PLAN_SLOTS; c++) key = key * 64 + (c < nc ? (uint64_t)(samp[2 * c] * 8 + samp[2 * c + 1]) : 0);
  return key;
}

/* Whether a sample's fields are in range (see plan_windows). */
static int sample_ok(int64_t color, int64_t nc, const int64_t *samp, int64_t H, int64_t W, const int64_t *box,
                     int64_t margin) {
  if (!(nc == 1 || nc == 3 || nc == 4) || color < 0 || color > 15 || H < 1 || W < 1 || H > PLAN_MAX_SIDE ||
      W > PLAN_MAX_SIDE || margin < 0 || margin > 64)
    return 0;
  for (int k = 0; k < 4; k++)
    if (box[k] < -PLAN_MAX_BOX || box[k] > PLAN_MAX_BOX) return 0;
  /* a box must be non-empty and overlap the image: then r0 < r1 and c0 < c1 below */
  if (box[2] < 1 || box[3] < 1 || box[0] >= H || box[1] >= W || box[0] + box[2] <= 0 || box[1] + box[3] <= 0)
    return 0;
  for (int c = 0; c < nc; c++)
    if (samp[2 * c] < 1 || samp[2 * c] > 4 || samp[2 * c + 1] < 1 || samp[2 * c + 1] > 4) return 0;
  return 1;
}

/* One sample's windows (every field of row but its group). */
static void plan_one(int64_t nc, const int64_t *samp, int64_t H, int64_t W, const int64_t *box, int64_t margin,
                     plan_row *row) {
  int64_t vmax = 0, hmax = 0;
  for (int c = 0; c < nc; c++) {
    if (samp[2 * c] > hmax) hmax = samp[2 * c];
    if (samp[2 * c + 1] > vmax) vmax = samp[2 * c + 1];
  }
  int64_t mh = 8 * vmax, mw = 8 * hmax, top = box[0], left = box[1], bh = box[2], bw = box[3];
  int64_t rows = ceil_div(H, mh), cols = ceil_div(W, mw);
  int64_t r0 = floor_div(top - margin, mh), c0 = floor_div(left - margin, mw);
  int64_t r1 = ceil_div(top + bh + margin, mh), c1 = ceil_div(left + bw + margin, mw);
  if (r0 < 0) r0 = 0;
  if (c0 < 0) c0 = 0;
  if (r1 > rows) r1 = rows;
  if (c1 > cols) c1 = cols;
  row->win[0] = r0, row->win[1] = r1, row->win[2] = c0, row->win[3] = c1;
  for (int c = 0; c < PLAN_SLOTS; c++) {
    int64_t h = c < nc ? samp[2 * c] : 0, v = c < nc ? samp[2 * c + 1] : 0;
    row->pwin[0][c] = r0 * v, row->pwin[1][c] = r1 * v, row->pwin[2][c] = c0 * h, row->pwin[3][c] = c1 * h;
  }
  row->valid[0] = H - mh * r0 < mh * (r1 - r0) ? H - mh * r0 : mh * (r1 - r0);
  row->valid[1] = W - mw * c0 < mw * (c1 - c0) ? W - mw * c0 : mw * (c1 - c0);
  row->rel[0] = top - mh * r0, row->rel[1] = left - mw * c0, row->rel[2] = bh, row->rel[3] = bw;
}

int64_t plan_windows(const int64_t *color, const int64_t *ncomp, const int64_t *sampling, const int64_t *heights,
                     const int64_t *widths, const int64_t *boxes, int64_t n, int64_t margin, plan_row *out,
                     int64_t *group_first, int64_t *group_need, int64_t *ngroups) {
  int64_t groups = 0, last_group = -1;
  uint64_t last_key = 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t *samp = sampling + 8 * i, *box = boxes + 4 * i;
    plan_row *row = &out[i];
    int64_t g = -1;
    uint64_t key;
    if (!sample_ok(color[i], ncomp[i], samp, heights[i], widths[i], box, margin)) return i + 1;
    plan_one(ncomp[i], samp, heights[i], widths[i], box, margin, row);
    key = layout_key(color[i], ncomp[i], samp);
    /* the layout group: batches hold a handful of layouts, so a scan of the groups is enough */
    if (last_group >= 0 && key == last_key) g = last_group;
    for (int64_t k = 0; k < groups && g < 0; k++) {
      int64_t j = group_first[k];
      if (layout_key(color[j], ncomp[j], sampling + 8 * j) == key) g = k;
    }
    if (g < 0) {
      g = groups++;
      group_first[g] = i;
      group_need[2 * g] = group_need[2 * g + 1] = 0;
    }
    last_group = g;
    last_key = key;
    row->group = g;
    if (row->win[1] - row->win[0] > group_need[2 * g]) group_need[2 * g] = row->win[1] - row->win[0];
    if (row->win[3] - row->win[2] > group_need[2 * g + 1]) group_need[2 * g + 1] = row->win[3] - row->win[2];
  }
  *ngroups = groups;
  return 0;
}
