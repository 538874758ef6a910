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
