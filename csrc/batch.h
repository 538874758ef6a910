/*
 * The folder loader's batch path, below the binding: read a batch's files once into one pool
 * buffer while their headers fill one table (read_file_batch), then decode each file straight
 * into its crop windows of the collated batch (decode_windows). No Python here.
 */
#ifndef DCTNET_BATCH_H
#define DCTNET_BATCH_H

#include <stdint.h>

#include "reader.h"
#include "sparse.h"

#define FILES_MAX_BYTES ((size_t)256 << 20) /* bytes a file set keeps; later files are read again */
#define HEADER_SLOTS 4                      /* component slots of a header row (read: 1, 3 or 4) */

/* One file's row of read_file_batch's table (dctnet.data.plan.HEADER_ROW mirrors it; the module
 * exports its layout and Python checks the two at import). */
typedef struct {
  int64_t status;      /* 0 read; 1 failed (why: the file's image_status) */
  int64_t height, width;
  int64_t ncomp;
  int64_t color;       /* libjpeg's colour code: 0 unknown, 1 gray, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK */
  int64_t exif;        /* EXIF orientation 1..8, 0 when absent */
  int64_t progressive;
  int64_t nbytes;      /* bytes of the int16 planes */
  int64_t sampling[HEADER_SLOTS][2]; /* (h, v) per component slot, zero past ncomp */
  int64_t blocks[HEADER_SLOTS][2];   /* (blocks_h, blocks_w) per component slot, zero past ncomp */
} header_row;

/* A batch's files: file i is arena[off[i] : off[i] + len[i]] when kept (len[i] >= 0), else read
 * again from paths[i] when decoded. */
typedef struct {
  int64_t n;
  const char *const *paths; /* fs-encoded, owned by the caller */
  char *arena;              /* pool memory (pool_give it with arena_cap) */
  size_t arena_cap;
  int64_t *off, *len;       /* n each, owned by the caller */
} file_set;

/* Read each file of fs once and parse its header into rows[i] (zeroed by the caller), keeping
 * the bytes in fs->arena while they fit in FILES_MAX_BYTES. st[i] (zeroed by the caller) says
 * why a file failed (row status 1). */
void read_file_batch(reader_state *ts, file_set *fs, const read_limits *lim, header_row *rows, image_status *st);

/* Where decode_windows finds image i: the file at path (when not NULL) or data[0:len). */
typedef struct {
  const char *path;
  const uint8_t *data;
  size_t len;
} image_source;

/* The outputs of one layout group: nout planes, plane c holding n items of oh[c] x ow[c] blocks. */
typedef struct {
  int64_t nout;
  int16_t *outs[GATHER_MAX_COMPONENTS];
  int64_t oh[GATHER_MAX_COMPONENTS], ow[GATHER_MAX_COMPONENTS];
} group_outputs;

/* Decode item i's source (srcs[items[i].part]) into its windows of the outputs (slot i), for the
 * n items. Single-scan files stream into the windows one MCU row at a time and stop after the
 * last row a window needs; others are decoded into a reused per-thread buffer and copied. An
 * image that fails (unreadable, bad JPEG data, a header other than its item's) gets its reason
 * in st[i] and zero windows, and the next item goes on. Returns 0, or 1 + the first item that is
 * malformed for the call (part out of range, component count other than nout, windows that do
 * not fit the outputs), checked for every item before anything is decoded. */
int64_t decode_windows(reader_state *ts, const image_source *srcs, int64_t nsrc, const gather_item *items, int64_t n,
                       const group_outputs *out, const read_limits *lim, image_status *st);

#endif
