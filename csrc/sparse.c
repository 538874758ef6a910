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

/* ---------------------------------------------------------------- batch gather from a cache */

typedef struct {
  const uint64_t *masks;
  const int8_t *values;
  const int16_t *escapes;
  size_t nvalues, nescapes, vi, ei;
} stream;

static size_t count_escapes(const int8_t *v, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += v[i] == -128;
  return c;
}

/* Skip nb blocks of the stream starting at block index b. */
static int skip_blocks(stream *s, size_t b, size_t nb) {
  size_t nv = 0;
  for (size_t i = 0; i < nb; i++) nv += (size_t)__builtin_popcountll(s->masks[b + i]);
  if (s->vi + nv > s->nvalues) return -1;
  s->ei += count_escapes(s->values + s->vi, nv);
  s->vi += nv;
  return s->ei <= s->nescapes ? 0 : -1;
}

/* Expand one block into out (64 int16). */
static int expand_block(stream *s, size_t b, const uint16_t *q, int16_t *out) {
  uint64_t m = s->masks[b];
  memset(out, 0, 64 * sizeof(int16_t));
  while (m) {
    int k = __builtin_ctzll(m);
    int32_t v;
    m &= m - 1;
    if (s->vi >= s->nvalues) return -1;
    v = s->values[s->vi++];
    if (v == -128) {
      if (s->ei >= s->nescapes) return -1;
      v = s->escapes[s->ei++];
    }
    out[k] = (int16_t)(v * (int32_t)q[k]);
  }
  return 0;
}

/* One plane: write its window rows [wr0, wr1) x cols [wc0, wc1) into dst (dst_h x dst_w blocks,
 * zero outside the window and outside the plane). Sparse records are walked block by block over
 * the whole plane, expanding window blocks and skipping the others, so the stream ends at the
 * plane's end, ready for the next plane. */
static int plane_window(const gather_item *it, stream *s, const int16_t *dense, size_t base, int64_t ph, int64_t pw,
                        const uint16_t *q, int64_t wr0, int64_t wr1, int64_t wc0, int64_t wc1, int16_t *dst,
                        int64_t dst_h, int64_t dst_w) {
  int64_t pre = wc0 < pw ? wc0 : pw;
  int64_t end = wc1 < pw ? wc1 : pw;
  int64_t have = end > pre ? end - pre : 0;
  for (int64_t pr = 0; pr < ph; pr++) {
    int64_t r = pr - wr0;
    int in_window = pr >= wr0 && pr < wr1 && r < dst_h;
    size_t rb = base + (size_t)pr * pw;
    if (!in_window) {
      if (it->fmt == 1 && skip_blocks(s, rb, (size_t)pw) != 0) return -1;
      continue;
    }
    int16_t *row = dst + (size_t)r * dst_w * 64;
    if (it->fmt == 0) {
      memcpy(row, dense + ((size_t)pr * pw + pre) * 64, (size_t)have * 64 * sizeof(int16_t));
    } else {
      if (skip_blocks(s, rb, (size_t)pre) != 0) return -1;
      for (int64_t c = 0; c < have; c++)
        if (expand_block(s, rb + pre + c, q, row + c * 64) != 0) return -1;
      if (skip_blocks(s, rb + pre + have, (size_t)(pw - pre - have)) != 0) return -1;
    }
    memset(row + have * 64, 0, (size_t)(dst_w - have) * 64 * sizeof(int16_t));
  }
  /* destination rows the plane does not reach */
  for (int64_t r = 0; r < dst_h; r++) {
    int64_t pr = wr0 + r;
    if (!(pr < ph && pr < wr1)) memset(dst + (size_t)r * dst_w * 64, 0, (size_t)dst_w * 64 * sizeof(int16_t));
  }
  return 0;
}

int64_t gather_420(const gather_item *items, int64_t n, int16_t *out_y, int16_t *out_c, int64_t Hb, int64_t Wb) {
  size_t ysz = (size_t)Hb * Wb * 64, csz = (size_t)(Hb / 2) * (Wb / 2) * 64;
  for (int64_t i = 0; i < n; i++) {
    const gather_item *it = &items[i];
    size_t nblocks = 0, base[3] = {0, 0, 0};
    const int16_t *dense[3] = {NULL, NULL, NULL};
    stream s = {0};
    for (int64_t c = 0; c < it->ncomp; c++) {
      base[c] = nblocks;
      nblocks += (size_t)(it->bh[c] * it->bw[c]);
    }
    if (it->fmt == 0) {
      for (int64_t c = 0; c < it->ncomp; c++) dense[c] = (const int16_t *)it->data + base[c] * 64;
    } else {
      size_t vbytes = nblocks * 8 + (size_t)it->nvalues;
      s.masks = (const uint64_t *)it->data;
      s.values = (const int8_t *)(it->data + nblocks * 8);
      s.escapes = (const int16_t *)(it->data + vbytes + (vbytes % 2));
      s.nvalues = (size_t)it->nvalues;
      s.nescapes = (size_t)it->nescapes;
    }
    if (plane_window(it, &s, dense[0], base[0], it->bh[0], it->bw[0], it->tables, 2 * it->r0, 2 * it->r1, 2 * it->c0,
                     2 * it->c1, out_y + i * ysz, Hb, Wb) != 0)
      return i + 1;
    for (int64_t c = 1; c <= 2; c++) {
      int16_t *dst = out_c + (size_t)(2 * i + c - 1) * csz;
      if (it->ncomp == 1) {
        memset(dst, 0, csz * sizeof(int16_t));
        continue;
      }
      if (plane_window(it, &s, dense[c], base[c], it->bh[c], it->bw[c], it->tables + 64 * c, it->r0, it->r1, it->c0,
                       it->c1, dst, Hb / 2, Wb / 2) != 0)
        return i + 1;
    }
    if (it->fmt == 1 && (s.vi != s.nvalues || s.ei != s.nescapes)) return i + 1;
  }
  return 0;
}
