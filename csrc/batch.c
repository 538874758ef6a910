/* The folder loader's batch path (see batch.h). */
#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"

static void fill_header_row(header_row *row, const dctj_header *hdr) {
  row->status = 0;
  row->height = hdr->height;
  row->width = hdr->width;
  row->ncomp = hdr->num_components;
  row->color = hdr->color_space >= 0 && hdr->color_space <= 5 ? hdr->color_space : 0;
  row->exif = hdr->exif_orientation;
  row->progressive = hdr->progressive;
  row->nbytes = (int64_t)(hdr->total_coefs * sizeof(int16_t));
  for (int c = 0; c < hdr->num_components && c < HEADER_SLOTS; c++) { /* read components are 1, 3 or 4 */
    row->sampling[c][0] = hdr->comp[c].h_samp;
    row->sampling[c][1] = hdr->comp[c].v_samp;
    row->blocks[c][0] = hdr->comp[c].blocks_h;
    row->blocks[c][1] = hdr->comp[c].blocks_w;
  }
}

/* Read file i of fs into the arena at *used when it fits (growing the pool buffer), else leave
 * fd open. Returns 0 or an errno value; *data and *got: the kept bytes (data NULL when not kept). */
static int keep_file(file_set *fs, int64_t i, int *fd, size_t size, size_t *used, const uint8_t **data, size_t *got) {
  int e = 0;
  if (!fs->arena || *used + size > FILES_MAX_BYTES) return 0;
  if (*used + size > fs->arena_cap) { /* grow the pool buffer (pool memory is plain malloc memory) */
    size_t cap = 2 * fs->arena_cap > *used + size ? 2 * fs->arena_cap : *used + size;
    if (cap > FILES_MAX_BYTES + 8) cap = FILES_MAX_BYTES + 8; /* >= used + size, checked above */
    char *grown = (char *)realloc(fs->arena, cap);
    if (grown) {
      fs->arena = grown;
      fs->arena_cap = cap;
    }
  }
  if (*used + size <= fs->arena_cap) {
    e = read_all(*fd, (uint8_t *)fs->arena + *used, size, got);
    *fd = -1;
    if (!e) {
      *data = (const uint8_t *)fs->arena + *used;
      fs->off[i] = (int64_t)*used;
      fs->len[i] = (int64_t)*got;
      *used += (*got + 7) & ~(size_t)7;
    }
  }
  return e;
}

void read_file_batch(reader_state *ts, file_set *fs, const read_limits *lim, header_row *rows, image_status *st) {
  size_t used = 0;
  /* the last batch's size on this thread: batches are alike, so one pool buffer usually fits */
  fs->arena = pool_take(ts->files_hint > 4096 ? ts->files_hint : 4096, &fs->arena_cap);
  for (int64_t i = 0; i < fs->n; i++) {
    int fd, e;
    size_t size, got = 0;
    const uint8_t *data = NULL;
    dctj_header hdr;
    fs->len[i] = -1;
    rows[i].status = 1;
    e = open_regular(fs->paths[i], &fd, &size);
    if (!e) e = keep_file(fs, i, &fd, size, &used, &data, &got);
    if (!e && !data) { /* not kept: parse from the thread's buffer; decode_windows reads it again */
      if (fd >= 0) close(fd);
      e = read_file(ts, fs->paths[i], &got);
      data = ts->file_buf;
    }
    if (e) {
      file_failure(&st[i], e);
      fs->len[i] = -1;
      continue;
    }
    if (dctj_begin(ts->dec, data, got, lim->warn_mode, lim->max_pixels, lim->max_bytes, &hdr) != 0) {
      jpeg_failure(&st[i], ts->dec);
      continue;
    }
    dctj_abort(ts->dec);
    fill_header_row(&rows[i], &hdr);
  }
  ts->files_hint = used + used / 4;
}

/* ---------------------------------------------------------------- decoding into windows */

/* Whether hdr describes the planes the item was planned for. */
static int planes_match(const dctj_header *hdr, const gather_item *it) {
  if (hdr->num_components != it->ncomp) return 0;
  for (int c = 0; c < hdr->num_components; c++)
    if (hdr->comp[c].blocks_h != it->bh[c] || hdr->comp[c].blocks_w != it->bw[c]) return 0;
  return 1;
}

/* Stream a single-scan image begun on ts->dec into the item's windows o[c]. As dctj_read_window. */
static int stream_item(reader_state *ts, dctj_header *hdr, const gather_item *it, const group_outputs *out,
                       int16_t *const *o) {
  dctj_window win[GATHER_MAX_COMPONENTS];
  int saturated;
  for (int64_t c = 0; c < out->nout; c++) {
    win[c].r0 = it->r0[c];
    win[c].r1 = it->r1[c];
    win[c].c0 = it->c0[c];
    win[c].c1 = it->c1[c];
    win[c].dst = o[c];
    win[c].dst_h = out->oh[c];
    win[c].dst_w = out->ow[c];
  }
  return dctj_read_window(ts->dec, hdr, win, &saturated);
}

/* Decode an image begun on ts->dec in full into the thread's planes buffer, then copy the item's
 * windows into o[c]. Returns 0 (a failure recorded in st), or -1 when the windows do not fit. */
static int decode_full_item(reader_state *ts, dctj_header *hdr, const gather_item *it, const group_outputs *out,
                            int16_t *const *o, image_status *st) {
  static const uint16_t no_tables[4 * 64];
  gather_item one = *it;
  gather_part part;
  int saturated;
  if (hdr->total_coefs > ts->planes_cap) {
    int16_t *grown = (int16_t *)realloc(ts->planes, hdr->total_coefs * sizeof(int16_t));
    if (!grown) {
      dctj_abort(ts->dec);
      st->status = ST_NO_MEMORY;
      return 0;
    }
    ts->planes = grown;
    ts->planes_cap = hdr->total_coefs;
  }
  if (dctj_read(ts->dec, hdr, ts->planes, ts->planes_cap, &saturated) != 0) {
    jpeg_failure(st, ts->dec);
    return 0;
  }
  one.part = 0;
  one.offset = 0;
  one.nbytes = (int64_t)(hdr->total_coefs * sizeof(int16_t));
  one.table = 0;
  one.nvalues = one.nescapes = 0;
  part.data = (const uint8_t *)ts->planes;
  part.len = one.nbytes;
  return gather_planes(&one, 1, &part, 1, no_tables, 1, 0, out->nout, o, out->oh, out->ow, NULL, NULL) == 0 ? 0 : -1;
}

/* One item into its windows o[c]. Returns 0 (a failure recorded in st), or -1 when its windows
 * do not fit the outputs. */
static int decode_item(reader_state *ts, const image_source *src, const gather_item *it, const group_outputs *out,
                       int16_t *const *o, const read_limits *lim, image_status *st) {
  const uint8_t *data = src->data;
  size_t len = src->len;
  dctj_header hdr;
  if (src->path) {
    int e = read_file(ts, src->path, &len);
    if (e) {
      file_failure(st, e);
      return 0;
    }
    data = ts->file_buf;
  }
  if (dctj_begin(ts->dec, data, len, lim->warn_mode, lim->max_pixels, lim->max_bytes, &hdr) != 0) {
    jpeg_failure(st, ts->dec);
    return 0;
  }
  /* the item was planned from this file's header: it must describe these very planes */
  if (!planes_match(&hdr, it)) {
    dctj_abort(ts->dec);
    st->status = ST_JPEG_ERROR;
    snprintf(st->error, DCTJ_MSG_LEN, "the file changed while its batch was read: its header no longer matches");
    return 0;
  }
  if (dctj_single_scan(ts->dec)) { /* the common case: stream into the windows */
    int rc = stream_item(ts, &hdr, it, out, o);
    if (rc == 0) return 0;
    if (rc != DCTJ_RESTART || dctj_begin(ts->dec, data, len, lim->warn_mode, lim->max_pixels, lim->max_bytes, &hdr) != 0) {
      jpeg_failure(st, ts->dec);
      return 0;
    }
  }
  return decode_full_item(ts, &hdr, it, out, o, st);
}

int64_t decode_windows(reader_state *ts, const image_source *srcs, int64_t nsrc, const gather_item *items, int64_t n,
                       const group_outputs *out, const read_limits *lim, image_status *st) {
  size_t osz[GATHER_MAX_COMPONENTS];
  int64_t bad = 0;
  for (int64_t c = 0; c < out->nout; c++) osz[c] = (size_t)out->oh[c] * (size_t)out->ow[c] * 64;
  for (int64_t i = 0; i < n; i++) /* items[] is the binding's private copy: stable while we use it */
    if (items[i].part < 0 || items[i].part >= nsrc || items[i].ncomp != out->nout ||
        !gather_window_fits(&items[i], out->nout, out->oh, out->ow))
      return i + 1;
  for (int64_t i = 0; i < n && !bad; i++) {
    int16_t *o[GATHER_MAX_COMPONENTS];
    for (int64_t c = 0; c < out->nout; c++) o[c] = out->outs[c] + (size_t)i * osz[c];
    st[i].status = ST_OK;
    if (decode_item(ts, &srcs[items[i].part], &items[i], out, o, lim, &st[i]) != 0) bad = i + 1;
    else if (st[i].status != ST_OK) /* a failed image leaves zeros, not part of a window */
      for (int64_t c = 0; c < out->nout; c++) memset(o[c], 0, osz[c] * sizeof(int16_t));
  }
  if (ts->planes_cap > (KEEP_FILE_BUFFER / sizeof(int16_t))) { /* do not keep a huge image's buffer */
    free(ts->planes);
    ts->planes = NULL;
    ts->planes_cap = 0;
  }
  return bad;
}
