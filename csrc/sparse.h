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

/* Returns 0, or -1 when the streams are inconsistent (more values/escapes consumed than given) or a
 * block's table index is not below ntables. */
int sparse_expand(const uint64_t *masks, size_t nblocks, const int8_t *values, size_t nvalues, const int16_t *escapes,
                  size_t nescapes, const uint16_t *tables, size_t ntables, const uint8_t *table_of_block,
                  int16_t *out);


/*
 * Batch gather from a coefficient cache, for one layout group of a batch: for each sample, the
 * blocks of each component's window are copied (dense records) or expanded (sparse records)
 * straight into that component's zero-padded output, (n, out_h[c], out_w[c], 64) int16. Every
 * sample of a call has the same number of components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK) and any
 * sampling factors: the caller gives each plane's size and window in blocks.
 *
 * Nothing here trusts the caller or the cache files: each item names its record by part file,
 * offset and size, and gather_planes checks every field against the part's extent, the table
 * count and the output grids (with overflow-free arithmetic) before it reads or writes a byte.
 */
#define GATHER_MAX_COMPONENTS 4

typedef struct {
  const uint8_t *data; /* a part file's bytes (a memory map) */
  int64_t len;
} gather_part;

/* One sample's row of a gather (dctnet.data.plan.GATHER_ITEM mirrors it; the module exports its
 * layout and Python checks the two at import). */
typedef struct {
  int64_t part;            /* index into the parts */
  int64_t offset, nbytes;  /* the record: part bytes [offset, offset + nbytes) */
  int64_t table;           /* row of the (ntables, 4, 64) uint16 table array (sparse) */
  int64_t ncomp;           /* 1..4, equal to the call's number of outputs */
  int64_t bh[GATHER_MAX_COMPONENTS], bw[GATHER_MAX_COMPONENTS];  /* plane sizes in blocks */
  int64_t nvalues, nescapes;
  int64_t r0[GATHER_MAX_COMPONENTS], r1[GATHER_MAX_COMPONENTS];  /* each plane's window, in blocks */
  int64_t c0[GATHER_MAX_COMPONENTS], c1[GATHER_MAX_COMPONENTS];
} gather_item;

#define GATHER_MAX_BLOCKS_SIDE ((int64_t)1 << 16) /* a plane side in blocks: JPEG sizes are < 2^16 px */

/* Whether an item's plane windows are well-formed (0 <= r0 <= r1, 0 <= c0 <= c1, sides within
 * GATHER_MAX_BLOCKS_SIDE) and fit the output grids out_h x out_w, for ncomp components. */
int gather_window_fits(const gather_item *it, int64_t ncomp, const int64_t *out_h, const int64_t *out_w);

/* fmt: 0 dense, 1 sparse. outs[c] has room for n * out_h[c] * out_w[c] blocks (checked by the
 * binding). Returns 0, -1 when the arguments themselves are inconsistent (format, grids), or
 * 1 + the index of the first sample whose record is out of bounds or inconsistent.
 *
 * Checksums: with sums (n expected values; NULL: no check), each item's whole record — its nbytes
 * bytes at offset, once they have passed the checks above — is hashed (checksum.h, seeded with
 * its tables row, item->table, which must then be below ntables for dense records too) right
 * after it is copied or expanded, so the hash reads bytes the walk has just brought into cache.
 * An item whose record does not give its sum has failed[i] set to 1 (0 otherwise) and its outputs
 * zeroed (also when its walk found it inconsistent), and the gather goes on with the next item. */
int64_t gather_planes(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                      const uint16_t *tables, int64_t ntables, int fmt, int64_t ncomp, int16_t *const *outs,
                      const int64_t *out_h, const int64_t *out_w, const uint64_t *sums, uint8_t *failed);

/* The same windows without padding, for building the padded batch on the device: component c of
 * item i (its window's r1 - r0 rows by c1 - c0 columns, zero outside the plane) goes to blocks
 * [offsets[i * ncomp + c], + its size) of out, which has out_blocks blocks. Every window must lie
 * inside out (regions may overlap; that is the caller's business). Returns as gather_planes. */
int64_t gather_packed(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                      const uint16_t *tables, int64_t ntables, int fmt, int64_t ncomp, int16_t *out,
                      int64_t out_blocks, const int64_t *offsets, const uint64_t *sums, uint8_t *failed);

/* One row of copy_ranges: size bytes of part `part` from offset src go to offset dst of the
 * output (dctnet.data.plan.COPY_RANGE mirrors it, checked at import). */
typedef struct {
  int64_t part, src, size, dst;
} copy_range;

/* Copy every range of parts into out (out_len bytes), after checking them all: returns 0, or
 * 1 + the first range that lies outside its part or the output (then nothing is copied). */
int64_t copy_ranges(const gather_part *parts, int64_t nparts, const copy_range *ranges, int64_t k, uint8_t *out,
                    int64_t out_len);

/* copy_ranges for whole records, each checked as it is copied: the k ranges are n groups of k / n
 * (n > 0 and k a multiple of n, or n = k = 0), group j holding ranges of item j's record only
 * (its part, inside [offset, offset + nbytes)); item j's ranges are copied, then its record (part,
 * offset, nbytes and table are the fields read) is hashed, from cache, and compared with sums[j]
 * (failed[j] = 1 when they differ, 0 otherwise). Everything is checked before the first
 * byte is read: returns 0, -1 when the counts do not fit, or 1 + the first item whose record lies
 * outside its part, whose table is not below ntables, or one of whose ranges lies outside its
 * record or the output (then nothing is copied). */
int64_t copy_records(const gather_part *parts, int64_t nparts, const copy_range *ranges, int64_t k, uint8_t *out,
                     int64_t out_len, const uint16_t *tables, int64_t ntables, const gather_item *items, int64_t n,
                     const uint64_t *sums, uint8_t *failed);

/* Each item's record checksum (checksum.h) into sums[i], after checking its part, offset, nbytes
 * against the parts and its table against ntables: returns 0, or 1 + the first item that does not
 * fit (then sums is not written). */
int64_t record_checksums(const gather_item *items, int64_t n, const gather_part *parts, int64_t nparts,
                         const uint16_t *tables, int64_t ntables, uint64_t *sums);

/* Where the streams of a sparse record of nblocks blocks, nvalues values and nescapes escapes lie:
 * the masks at 0 (8 bytes a block), the values at *values_at (a byte each), the escapes at
 * *escapes_at (2-byte aligned, 2 bytes each). Returns the record's size in bytes. Counts up to
 * 2^32 blocks and values cannot overflow. (dctnet.data.sparse.record_layout is the same in Python.) */
uint64_t sparse_record_layout(uint64_t nblocks, uint64_t nvalues, uint64_t nescapes, uint64_t *values_at,
                              uint64_t *escapes_at);

#endif
