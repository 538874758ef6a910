#include "crop.h"

#include <math.h>

static uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Uniform k of a sample whose stream starts at base (crop.py: uniforms). */
static double uniform(uint64_t base, uint64_t k) {
  return (double)(splitmix64(base + k * 0x9E3779B97F4A7C15ULL) >> 11) * (1.0 / 9007199254740992.0);
}

void rrc_boxes(uint64_t seed, uint64_t epoch, const int64_t *index, const int64_t *heights, const int64_t *widths,
               int64_t n, double scale_lo, double scale_hi, double ratio_lo, double ratio_hi, double log_ratio_lo,
               double log_ratio_hi, int64_t *boxes) {
  uint64_t key = splitmix64(splitmix64(seed) ^ (epoch & 0xFFFFFFFFULL));
  double rmin = ratio_lo < ratio_hi ? ratio_lo : ratio_hi, rmax = ratio_lo < ratio_hi ? ratio_hi : ratio_lo;
  for (int64_t i = 0; i < n; i++) {
    int64_t H = heights[i], W = widths[i], *out = boxes + 4 * i;
    uint64_t base = splitmix64(key ^ ((uint64_t)index[i] * 0xD1B54A32D192ED03ULL));
    double area = (double)(H * W);
    int found = 0;
    for (int t = 0; t < 10 && !found; t++) {
      double u0 = uniform(base, 4 * t), u1 = uniform(base, 4 * t + 1);
      double target = area * (scale_lo + (scale_hi - scale_lo) * u0);
      double aspect = exp(log_ratio_lo + (log_ratio_hi - log_ratio_lo) * u1);
      double wf = rint(sqrt(target * aspect)), hf = rint(sqrt(target / aspect));
      int64_t w, h;
      if (!(wf >= 1 && wf <= (double)W && hf >= 1 && hf <= (double)H)) continue; /* also NaN: no try */
      w = (int64_t)wf, h = (int64_t)hf;
      {
        out[0] = (int64_t)floor(uniform(base, 4 * t + 2) * (double)(H - h + 1));
        out[1] = (int64_t)floor(uniform(base, 4 * t + 3) * (double)(W - w + 1));
        out[2] = h;
        out[3] = w;
        found = 1;
      }
    }
    if (!found) { /* centre crop, aspect ratio clamped to the range */
      double in_ratio = (double)W / (double)H;
      int64_t w = W, h = H;
      if (in_ratio < rmin && (double)W / rmin <= (double)H) h = (int64_t)rint((double)W / rmin);
      else if (in_ratio > rmax && (double)H * rmax <= (double)W) w = (int64_t)rint((double)H * rmax);
      out[0] = (H - h) / 2;
      out[1] = (W - w) / 2;
      out[2] = h;
      out[3] = w;
    }
  }
}

/* ---------------------------------------------------------------- batch planning */

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0; Python's // */
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

#define PLAN_MAX_SIDE 65535            /* JPEG sizes are 16-bit */
#define PLAN_MAX_BOX ((int64_t)1 << 31) /* boxes far outside any image are a caller's bug */

int64_t plan_windows(const int64_t *color, const int64_t *ncomp, const int64_t *sampling, const int64_t *heights,
                     const int64_t *widths, const int64_t *boxes, int64_t n, int64_t margin, int64_t *out,
                     int64_t *group_first, int64_t *group_need, int64_t *ngroups) {
  int64_t groups = 0;
  uint64_t keys_seen_last = 0;
  int64_t last_group = -1;
  for (int64_t i = 0; i < n; i++) {
    const int64_t *samp = sampling + 8 * i, *box = boxes + 4 * i;
    int64_t *row = out + (int64_t)PLAN_FIELDS * i;
    int64_t nc = ncomp[i], H = heights[i], W = widths[i], vmax = 0, hmax = 0;
    uint64_t key;
    if (!(nc == 1 || nc == 3 || nc == 4) || color[i] < 0 || color[i] > 15 || H < 1 || W < 1 || H > PLAN_MAX_SIDE ||
        W > PLAN_MAX_SIDE || margin < 0 || margin > 64)
      return i + 1;
    for (int k = 0; k < 4; k++)
      if (box[k] < -PLAN_MAX_BOX || box[k] > PLAN_MAX_BOX) return i + 1;
    /* a box must be non-empty and overlap the image: then r0 < r1 and c0 < c1 below */
    if (box[2] < 1 || box[3] < 1 || box[0] >= H || box[1] >= W || box[0] + box[2] <= 0 || box[1] + box[3] <= 0)
      return i + 1;
    key = (uint64_t)color[i] * 16 + (uint64_t)nc;
    for (int c = 0; c < 4; c++) { /* slots past ncomp count as zero, whatever they hold */
      int64_t h = c < nc ? samp[2 * c] : 0, v = c < nc ? samp[2 * c + 1] : 0;
      if (c < nc && (h < 1 || h > 4 || v < 1 || v > 4)) return i + 1;
      if (h > hmax) hmax = h;
      if (v > vmax) vmax = v;
      key = key * 64 + (uint64_t)(h * 8 + v);
    }
    {
      int64_t mh = 8 * vmax, mw = 8 * hmax, top = box[0], left = box[1], bh = box[2], bw = box[3];
      int64_t rows = ceil_div(H, mh), cols = ceil_div(W, mw);
      int64_t r0 = floor_div(top - margin, mh), c0 = floor_div(left - margin, mw);
      int64_t r1 = ceil_div(top + bh + margin, mh), c1 = ceil_div(left + bw + margin, mw);
      int64_t vh, vw;
      if (r0 < 0) r0 = 0;
      if (c0 < 0) c0 = 0;
      if (r1 > rows) r1 = rows;
      if (c1 > cols) c1 = cols;
      row[0] = r0, row[1] = r1, row[2] = c0, row[3] = c1;
      for (int c = 0; c < 4; c++) {
        int64_t h = c < nc ? samp[2 * c] : 0, v = c < nc ? samp[2 * c + 1] : 0;
        row[4 + c] = r0 * v, row[8 + c] = r1 * v, row[12 + c] = c0 * h, row[16 + c] = c1 * h;
      }
      vh = H - mh * r0 < mh * (r1 - r0) ? H - mh * r0 : mh * (r1 - r0);
      vw = W - mw * c0 < mw * (c1 - c0) ? W - mw * c0 : mw * (c1 - c0);
      row[20] = vh, row[21] = vw;
      row[22] = top - mh * r0, row[23] = left - mw * c0, row[24] = bh, row[25] = bw;
    }
    { /* the layout group: batches hold a handful of layouts, so a scan of the groups is enough */
      int64_t g = -1;
      if (last_group >= 0 && key == keys_seen_last) {
        g = last_group;
      } else {
        for (int64_t k = 0; k < groups && g < 0; k++) {
          const int64_t j = group_first[k];
          uint64_t kk = (uint64_t)color[j] * 16 + (uint64_t)ncomp[j];
          for (int c = 0; c < 4; c++)
            kk = kk * 64 + (c < ncomp[j] ? (uint64_t)(sampling[8 * j + 2 * c] * 8 + sampling[8 * j + 2 * c + 1]) : 0);
          if (kk == key) g = k;
        }
        if (g < 0) {
          g = groups++;
          group_first[g] = i;
          group_need[2 * g] = group_need[2 * g + 1] = 0;
        }
        last_group = g;
        keys_seen_last = key;
      }
      row[26] = g;
      if (row[1] - row[0] > group_need[2 * g]) group_need[2 * g] = row[1] - row[0];
      if (row[3] - row[2] > group_need[2 * g + 1]) group_need[2 * g + 1] = row[3] - row[2];
    }
  }
  *ngroups = groups;
  return 0;
}
