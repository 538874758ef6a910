#include "sparse.h"

#include <string.h>

#include "checksum.h"

/* Records live in memory maps at any offset: load masks and escapes without assuming alignment. */
static inline uint64_t load_u64(const uint64_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline int16_t load_i16(const int16_t *p) {
  int16_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

int sparse_expand(const uint64_t *masks, size_t nblocks, const int8_t *values, size_t nvalues, const int16_t *escapes,
                  size_t nescapes, const uint16_t *tables, size_t ntables, const uint8_t *table_of_block,
                  int16_t *out) {
  size_t vi = 0, ei = 0;
  memset(out, 0, nblocks * 64 * sizeof(int16_t));
  for (size_t b = 0; b < nblocks; b++, out += 64) {
    uint64_t m = load_u64(masks + b);
    size_t t = table_of_block[b]; /* loaded once, checked where used */
    const uint16_t *q;
    if (t >= ntables) return -1;
    q = tables + 64 * t;
    while (m) {
      int k = __builtin_ctzll(m);
      int32_t v;
      m &= m - 1;
      if (vi >= nvalues) return -1;
      v = values[vi++];
      if (v == -128) {
        if (ei >= nescapes) return -1;
        v = load_i16(escapes + ei++);
      }
      out[k] = (int16_t)(v * (int32_t)q[k]); /* fits by construction (encoder's choice of table) */
    }
  }
  return (vi == nvalues && ei == nescapes) ? 0 : -1;
}

/* ---------------------------------------------------------------- batch gather from a cache */

uint64_t sparse_record_layout(uint64_t nblocks, uint64_t nvalues, uint64_t nescapes, uint64_t *values_at,
                              uint64_t *escapes_at) {
  uint64_t values_end = 8 * nblocks + nvalues;
  *values_at = 8 * nblocks;
  *escapes_at = values_end + values_end % 2;
  return *escapes_at + 2 * nescapes;
}

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

/* Skip nb blocks of the stream starting at block index b (b + nb <= the record's blocks). */
static int skip_blocks(stream *s, size_t b, size_t nb) {
  size_t nv = 0;
  for (size_t i = 0; i < nb; i++) nv += (size_t)__builtin_popcountll(load_u64(s->masks + b + i));
  if (nv > s->nvalues - s->vi) return -1;
  s->ei += count_escapes(s->values + s->vi, nv);
  s->vi += nv;
  return s->ei <= s->nescapes ? 0 : -1;
}

/* Expand one block into out (64 int16). */
static int expand_block(stream *s, size_t b, const uint16_t *q, int16_t *out) {
  uint64_t m = load_u64(s->masks + b);
  memset(out, 0, 64 * sizeof(int16_t));
  while (m) {
    int k = __builtin_ctzll(m);
    int32_t v;
    m &= m - 1;
    if (s->vi >= s->nvalues) return -1;
    v = s->values[s->vi++];
    if (v == -128) {
      if (s->ei >= s->nescapes) return -1;
      v = load_i16(s->escapes + s->ei++);
    }
    out[k] = (int16_t)(v * (int32_t)q[k]); /* |v| <= 2^15, q < 2^16: the product fits int32 */
  }
  return 0;
}

/* One plane: write its window rows [wr0, wr1) x cols [wc0, wc1) into dst (dst_h x dst_w blocks,
 * zero outside the window and outside the plane). Sparse records are walked block by block over
 * the whole plane, expanding window blocks and skipping the others, so the stream ends at the
 * plane's end, ready for the next plane. The caller has checked 0 <= wr0 <= wr1, 0 <= wc0 <= wc1
 * and that the plane (base + ph * pw blocks) lies inside the record. */
static int plane_window(int fmt, stream *s, const int16_t *dense, size_t base, int64_t ph, int64_t pw,
                        const uint16_t *q, int64_t wr0, int64_t wr1, int64_t wc0, int64_t wc1, int16_t *dst,
                        int64_t dst_h, int64_t dst_w) {
  int64_t pre = wc0 < pw ? wc0 : pw;
  int64_t end = wc1 < pw ? wc1 : pw;
  int64_t have = end > pre ? end - pre : 0;
  if (have > dst_w) have = dst_w; /* never write past the destination row */
  for (int64_t pr = 0; pr < ph; pr++) {
    int64_t r = pr - wr0;
    int in_window = pr >= wr0 && pr < wr1 && r < dst_h;
    size_t rb = base + (size_t)pr * (size_t)pw;
    if (!in_window) {
      if (fmt == 1 && skip_blocks(s, rb, (size_t)pw) != 0) return -1;
      continue;
    }
    int16_t *row = dst + (size_t)r * (size_t)dst_w * 64;
    if (fmt == 0) {
      memcpy(row, dense + ((size_t)pr * (size_t)pw + (size_t)pre) * 64, (size_t)have * 64 * sizeof(int16_t));
    } else {
      if (skip_blocks(s, rb, (size_t)pre) != 0) return -1;
      for (int64_t c = 0; c < have; c++)
        if (expand_block(s, rb + (size_t)(pre + c), q, row + c * 64) != 0) return -1;
      if (skip_blocks(s, rb + (size_t)(pre + have), (size_t)(pw - pre - have)) != 0) return -1;
    }
    memset(row + have * 64, 0, (size_t)(dst_w - have) * 64 * sizeof(int16_t));
  }
  /* destination rows the plane does not reach */
  for (int64_t r = 0; r < dst_h; r++) {
    int64_t pr = wr0 + r;
    if (!(pr < ph && pr < wr1)) memset(dst + (size_t)r * (size_t)dst_w * 64, 0, (size_t)dst_w * 64 * sizeof(int16_t));
  }
  return 0;
}

int gather_window_fits(const gather_item *it, int64_t ncomp, const int64_t *out_h, const int64_t *out_w) {
  for (int64_t c = 0; c < ncomp; c++) {
    if (it->r0[c] < 0 || it->r1[c] < it->r0[c] || it->c0[c] < 0 || it->c1[c] < it->c0[c] ||
        it->r1[c] > GATHER_MAX_BLOCKS_SIDE || it->c1[c] > GATHER_MAX_BLOCKS_SIDE)
      return 0;
    if (it->r1[c] - it->r0[c] > out_h[c] || it->c1[c] - it->c0[c] > out_w[c]) return 0;
  }
  return 1;
}

/* Every field of one item against the part extents, the tables and the grids. Sets *nblocks. */
static int check_item(const gather_item *it, const gather_part *parts, int64_t nparts, int64_t ntables, int fmt,
                      int64_t ncomp, const int64_t *out_h, const int64_t *out_w, uint64_t *nblocks) {
  uint64_t nb = 0;
  if (it->part < 0 || it->part >= nparts || it->offset < 0 || it->nbytes < 0) return -1;
  if (it->offset > parts[it->part].len || it->nbytes > parts[it->part].len - it->offset) return -1;
  if (it->offset % 8 != 0) return -1; /* records are 8-byte aligned by the builder */
  if (it->ncomp != ncomp) return -1;
  for (int64_t c = 0; c < ncomp; c++) {
    if (it->bh[c] < 0 || it->bw[c] < 0 || it->bh[c] > GATHER_MAX_BLOCKS_SIDE || it->bw[c] > GATHER_MAX_BLOCKS_SIDE)
      return -1;
    nb += (uint64_t)it->bh[c] * (uint64_t)it->bw[c]; /* < 4 * 2^32: no overflow */
  }
  if (!gather_window_fits(it, ncomp, out_h, out_w)) return -1;
  if (fmt == 0) {
    if ((uint64_t)it->nbytes != nb * 128 || it->nvalues != 0 || it->nescapes != 0) return -1;
  } else {
    uint64_t values_at, escapes_at;
    if (it->table < 0 || it->table >= ntables || it->nvalues < 0 || it->nescapes < 0) return -1;
    if ((uint64_t)it->nvalues > nb * 64 || it->nescapes > it->nvalues) return -1;
    if (sparse_record_layout(nb, (uint64_t)it->nvalues, (uint64_t)it->nescapes, &values_at, &escapes_at) >
        (uint64_t)it->nbytes)
      return -1;
  }
  *nblocks = nb;
  return 0;
}

/* The checksum of an item's record, its part, offset, size and table checked by the caller. */
static uint64_t item_checksum(const gather_item *it, const gather_part *parts, const uint16_t *tables) {
  return record_checksum(parts[it->part].data + it->offset, (size_t)it->nbytes,
                         tables + (size_t)it->table * (CHECKSUM_TABLE_BYTES / sizeof(uint16_t)));
}

/* The walk of one checked record (check_item passed; nblocks its block count) into its
 * destinations. Returns 0, or -1 when its streams are inconsistent. */
static int walk_record(const gather_item *it, const gather_part *parts, const uint16_t *tables, int fmt,
                       int64_t ncomp, uint64_t nblocks, int16_t *const *dst, const int64_t *dst_h,
                       const int64_t *dst_w) {
  size_t base = 0;
  const uint8_t *data = parts[it->part].data + it->offset;
  const uint16_t *q = NULL;
  stream s = {0};
  if (fmt == 1) {
    uint64_t values_at, escapes_at;
    sparse_record_layout(nblocks, (uint64_t)it->nvalues, (uint64_t)it->nescapes, &values_at, &escapes_at);
    s.masks = (const uint64_t *)(const void *)data;
    s.values = (const int8_t *)(data + values_at);
    s.escapes = (const int16_t *)(const void *)(data + escapes_at);
    s.nvalues = (size_t)it->nvalues;
    s.nescapes = (size_t)it->nescapes;
    q = tables + (size_t)it->table * 4 * 64;
  }
  /* planes follow each other in the record: component c starts base blocks in */
  for (int64_t c = 0; c < ncomp; c++) {
    const int16_t *dense = fmt == 0 ? (const int16_t *)(const void *)data + base * 64 : NULL;
    if (plane_window(fmt, &s, dense, base, it->bh[c], it->bw[c], q ? q + 64 * c : NULL, it->r0[c], it->r1[c],
                     it->c0[c], it->c1[c], dst[c], dst_h[c], dst_w[c]) != 0)
      return -1;
    base += (size_t)(it->bh[c] * it->bw[c]);
  }
  if (fmt == 1 && (s.vi != s.nvalues || s.ei != s.nescapes)) return -1;
  return 0;
}

/* One item into its destinations: dst[c] holds dst_h[c] x dst_w[c] blocks for component c. With
 * want (non-NULL), the record is also hashed and compared with *want. Returns 0, -1 when the
 * record is out of bounds or inconsistent, or 1 when it does not give its checksum (whatever its
 * walk found: a corrupt record is a checksum failure first; the caller zeroes its outputs).
 *
 * The hash runs right after the walk, not before: the walk has just read the record (a sparse
 * walk reads every mask and value, skipped blocks included; a dense copy the window's rows), so
 * the hash reads it from cache, and the walk's reads from memory stay interleaved with its own
 * work as they are without checksums. Hashed first, the record came from memory in one
 * bandwidth-bound pass that nothing overlapped. */
static int gather_one(const gather_item *it, const gather_part *parts, int64_t nparts, const uint16_t *tables,
                      int64_t ntables, int fmt, int64_t ncomp, int16_t *const *dst, const int64_t *dst_h,
                      const int64_t *dst_w, const uint64_t *want) {
  uint64_t nblocks = 0;
  int walked;
  if (check_item(it, parts, nparts, ntables, fmt, ncomp, dst_h, dst_w, &nblocks) != 0) return -1;
  if (want && (it->table < 0 || it->table >= ntables)) return -1; /* the hash's seed: dense records too */
  walked = walk_record(it, parts, tables, fmt, ncomp, nblocks, dst, dst_h, dst_w);
  if (want && item_checksum(it, parts, tables) != *want) return 1;
  return walked;
}

int64_t gather_planes(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                      const uint16_t *tables, int64_t ntables, int fmt, int64_t ncomp, int16_t *const *outs,
                      const int64_t *out_h, const int64_t *out_w, const uint64_t *sums, uint8_t *failed) {
  size_t osz[GATHER_MAX_COMPONENTS];
  if ((fmt != 0 && fmt != 1) || n < 0 || nparts < 0 || ntables < 0 || ncomp < 1 || ncomp > GATHER_MAX_COMPONENTS)
    return -1;
  for (int64_t c = 0; c < ncomp; c++) {
    if (out_h[c] < 0 || out_w[c] < 0 || out_h[c] > GATHER_MAX_BLOCKS_SIDE || out_w[c] > GATHER_MAX_BLOCKS_SIDE)
      return -1;
    osz[c] = (size_t)out_h[c] * (size_t)out_w[c] * 64;
  }
  for (int64_t i = 0; i < n; i++) {
    int16_t *dst[GATHER_MAX_COMPONENTS];
    for (int64_t c = 0; c < ncomp; c++) dst[c] = outs[c] + (size_t)i * osz[c];
    /* items[i] is the binding's private copy: stable while we read it */
    int rc =
        gather_one(&items[i], parts, nparts, tables, ntables, fmt, ncomp, dst, out_h, out_w, sums ? &sums[i] : NULL);
    if (rc < 0) return i + 1;
    if (sums) failed[i] = (uint8_t)rc;
    if (rc > 0)
      for (int64_t c = 0; c < ncomp; c++) memset(dst[c], 0, osz[c] * sizeof(int16_t));
  }
  return 0;
}

int64_t gather_packed(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                      const uint16_t *tables, int64_t ntables, int fmt, int64_t ncomp, int16_t *out,
                      int64_t out_blocks, const int64_t *offsets, const uint64_t *sums, uint8_t *failed) {
  if ((fmt != 0 && fmt != 1) || n < 0 || nparts < 0 || ntables < 0 || ncomp < 1 || ncomp > GATHER_MAX_COMPONENTS ||
      out_blocks < 0)
    return -1;
  for (int64_t i = 0; i < n; i++) {
    const gather_item *it = &items[i];
    int16_t *dst[GATHER_MAX_COMPONENTS];
    int64_t wh[GATHER_MAX_COMPONENTS], ww[GATHER_MAX_COMPONENTS];
    for (int64_t c = 0; c < ncomp; c++) {
      int64_t off = offsets[i * ncomp + c];
      /* a window's own size is its destination: check it is well-formed before using it */
      if (it->r0[c] < 0 || it->r1[c] < it->r0[c] || it->c0[c] < 0 || it->c1[c] < it->c0[c] ||
          it->r1[c] > GATHER_MAX_BLOCKS_SIDE || it->c1[c] > GATHER_MAX_BLOCKS_SIDE)
        return i + 1;
      wh[c] = it->r1[c] - it->r0[c];
      ww[c] = it->c1[c] - it->c0[c];
      if (off < 0 || off > out_blocks || wh[c] * ww[c] > out_blocks - off) return i + 1; /* < 2^32: no overflow */
      dst[c] = out + (size_t)off * 64;
    }
    int rc = gather_one(it, parts, nparts, tables, ntables, fmt, ncomp, dst, wh, ww, sums ? &sums[i] : NULL);
    if (rc < 0) return i + 1;
    if (sums) failed[i] = (uint8_t)rc;
    if (rc > 0)
      for (int64_t c = 0; c < ncomp; c++) memset(dst[c], 0, (size_t)(wh[c] * ww[c]) * 64 * sizeof(int16_t));
  }
  return 0;
}

int64_t copy_ranges(const gather_part *parts, int64_t nparts, const copy_range *ranges, int64_t k, uint8_t *out,
                    int64_t out_len) {
  for (int64_t i = 0; i < k; i++) {
    const copy_range *r = &ranges[i];
    if (r->part < 0 || r->part >= nparts || r->src < 0 || r->size < 0 || r->dst < 0 || r->src > parts[r->part].len ||
        r->size > parts[r->part].len - r->src || r->dst > out_len || r->size > out_len - r->dst)
      return i + 1;
  }
  for (int64_t i = 0; i < k; i++)
    if (ranges[i].size) memcpy(out + ranges[i].dst, parts[ranges[i].part].data + ranges[i].src, (size_t)ranges[i].size);
  return 0;
}

/* Whether an item's record (part, offset, nbytes) lies inside its part and its table is a row. */
static int record_fits(const gather_item *it, const gather_part *parts, int64_t nparts, int64_t ntables) {
  return it->part >= 0 && it->part < nparts && it->offset >= 0 && it->nbytes >= 0 &&
         it->offset <= parts[it->part].len && it->nbytes <= parts[it->part].len - it->offset && it->table >= 0 &&
         it->table < ntables;
}

int64_t copy_records(const gather_part *parts, int64_t nparts, const copy_range *ranges, int64_t k, uint8_t *out,
                     int64_t out_len, const uint16_t *tables, int64_t ntables, const gather_item *items, int64_t n,
                     const uint64_t *sums, uint8_t *failed) {
  int64_t per;
  if (n < 0 || k < 0 || nparts < 0 || ntables < 0 || out_len < 0 || (n == 0 ? k != 0 : k % n != 0)) return -1;
  per = n ? k / n : 0;
  for (int64_t j = 0; j < n; j++) {
    const gather_item *it = &items[j];
    int64_t end;
    if (!record_fits(it, parts, nparts, ntables)) return j + 1;
    end = it->offset + it->nbytes; /* <= the part's length: no overflow */
    for (int64_t r = j * per; r < (j + 1) * per; r++) {
      const copy_range *g = &ranges[r];
      /* inside the record (so inside its part) and inside the output */
      if (g->part != it->part || g->src < it->offset || g->size < 0 || g->src > end || g->size > end - g->src ||
          g->dst < 0 || g->dst > out_len || g->size > out_len - g->dst)
        return j + 1;
    }
  }
  for (int64_t j = 0; j < n; j++) {
    const gather_item *it = &items[j];
    /* the record's ranges copied, then the record hashed while its bytes are in cache (as the gathers) */
    for (int64_t r = j * per; r < (j + 1) * per; r++)
      if (ranges[r].size)
        memcpy(out + ranges[r].dst, parts[ranges[r].part].data + ranges[r].src, (size_t)ranges[r].size);
    failed[j] = (uint8_t)(item_checksum(it, parts, tables) != sums[j]);
  }
  return 0;
}

int64_t record_checksums(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                         const uint16_t *tables, int64_t ntables, uint64_t *sums) {
  for (int64_t i = 0; i < n; i++)
    if (!record_fits(&items[i], parts, nparts, ntables)) return i + 1;
  for (int64_t i = 0; i < n; i++)
    sums[i] = item_checksum(&items[i], parts, tables);
  return 0;
}
