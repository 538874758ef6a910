/*
 * dctjpeg: libjpeg coefficient reader. See dctjpeg.h for the contract.
 *
 * Error handling follows libjpeg's example.c: a custom error manager longjmps back to the
 * entry point, which aborts the decompressor (freeing everything libjpeg allocated for the
 * image) and reports the formatted message. Nothing in here calls exit() or prints.
 */
#include "dctjpeg.h"
#include "dequant.h"
#include "markers.h"

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t */
#include <stdlib.h>
#include <string.h>

/* jpeglib.h first: jerror.h declares some message codes only under jconfig.h's settings (as
 * libjpeg itself is built), and a code missing here would shift every later JWRN_ code. */
#include <jpeglib.h>
#include <jerror.h>

struct dctj_decoder {
  /* First member, so a j_common_ptr from a libjpeg callback is also a dctj_decoder*. */
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  struct jpeg_source_mgr src;
  struct jpeg_progress_mgr progress;
  jmp_buf jump;
  /* libjpeg's own virtual-array methods, wrapped by ours (see "decoding in place"). */
  jvirt_barray_ptr (*orig_request_virt_barray)(j_common_ptr, int, boolean, JDIMENSION, JDIMENSION, JDIMENSION);
  void (*orig_realize_virt_arrays)(j_common_ptr);
  JBLOCKARRAY (*orig_access_virt_barray)(j_common_ptr, jvirt_barray_ptr, JDIMENSION, JDIMENSION, boolean);
  const dctj_header *target_hdr; /* set during dctj_read */
  int16_t *target;
  int num_virt;
  struct dctj_virt {
    JDIMENSION blocks_w, blocks_h;
    boolean pre_zero;
    JBLOCKROW *rows;
    int16_t *base;
    /* streaming (dctj_read_window): one iMCU row of scratch, handed to libjpeg row by row */
    int16_t *scratch;    /* v_samp rows of blocks_w blocks */
    JBLOCKROW srow[4];   /* the scratch rows (sampling factors are 1..4) */
    JDIMENSION cur_row;  /* first block row now in the scratch, when have_cur */
    JDIMENSION next_row; /* the block row the next new access must start at */
    int cur_n, have_cur;
    int64_t done_rows; /* plane rows [0, done_rows) have gone to the window */
  } virt[DCTJ_MAX_COMPONENTS];
  int warn_mode; /* DCTJ_WARN_* */
  int stop_rows; /* > 0: stop a single-scan decode after this many iMCU rows (dctj_set_stop_rows) */
  /* dctj_read_window: the windows being written, and the iMCU rows they need (the stop) */
  const dctj_window *windows;
  int window_stop;
  int clipped; /* a streamed value saturated */
  int16_t *scratch;
  size_t scratch_cap; /* int16 elements */
  int active; /* a libjpeg decompressor exists: between dctj_begin and dctj_read/dctj_abort */
  int num_warnings;
  int num_lost; /* warnings that meant lost data */
  int num_texts;
  char error[DCTJ_MSG_LEN];
  char warnings[DCTJ_MAX_WARNINGS][DCTJ_MSG_LEN];
};

/* ---------------------------------------------------------------- libjpeg callbacks */

static void set_unsupported_message(char *buf, int sof) {
  if (sof == 3 || sof == 7 || sof == 11 || sof == 15)
    snprintf(buf, DCTJ_MSG_LEN, "unsupported JPEG: lossless (SOF%d) files cannot be read as DCT coefficients", sof);
  else if (sof == 5 || sof == 6 || sof == 13 || sof == 14)
    snprintf(buf, DCTJ_MSG_LEN, "unsupported JPEG: hierarchical (SOF%d) files are not supported by libjpeg", sof);
  else
    snprintf(buf, DCTJ_MSG_LEN, "unsupported JPEG process (SOF%d)", sof);
}

static void on_error_exit(j_common_ptr cinfo) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  int code = cinfo->err->msg_code;
  if (code == JERR_BAD_PRECISION)
    snprintf(dec->error, DCTJ_MSG_LEN,
             "unsupported JPEG: %d-bit samples (dctnet reads 8-bit JPEG only)", cinfo->err->msg_parm.i[0]);
  else if (code == JERR_SOF_UNSUPPORTED)
    set_unsupported_message(dec->error, cinfo->err->msg_parm.i[0] - 0xC0);
  else
    (*cinfo->err->format_message)(cinfo, dec->error);
  longjmp(dec->jump, 1);
}

int dctj_warning_loses_data(int msg_code) {
  switch (msg_code) {
  case JWRN_JPEG_EOF:       /* "Premature end of JPEG file": the rest is filled in */
  case JWRN_HIT_MARKER:     /* "premature end of data segment": the segment's rest is zero */
  case JWRN_HUFF_BAD_CODE:  /* the segment's rest is zero */
#if JPEG_LIB_VERSION >= 70 || defined(C_ARITH_CODING_SUPPORTED) || defined(D_ARITH_CODING_SUPPORTED)
  case JWRN_ARITH_BAD_CODE: /* likewise (jerror.h declares it under these conditions) */
#endif
  case JWRN_MUST_RESYNC:    /* a restart marker missing: MCUs skipped or zero-filled */
    return 1;
  default:
    return 0;
  }
}

static void on_emit_message(j_common_ptr cinfo, int msg_level) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  char text[JMSG_LENGTH_MAX];
  int lost;
  if (msg_level >= 0) return; /* trace messages */
  cinfo->err->num_warnings++;
  dec->num_warnings++;
  lost = dctj_warning_loses_data(cinfo->err->msg_code);
  dec->num_lost += lost;
  (*cinfo->err->format_message)(cinfo, text);
  if (dec->warn_mode == DCTJ_WARN_ALL) {
    snprintf(dec->error, DCTJ_MSG_LEN, "%.150s (strict mode turns warnings into errors)", text);
    longjmp(dec->jump, 1);
  }
  if (lost && dec->warn_mode == DCTJ_WARN_LOST) {
    snprintf(dec->error, DCTJ_MSG_LEN, "%.120s: the image lost data (warnings='accept' reads what libjpeg recovers)",
             text);
    longjmp(dec->jump, 1);
  }
  for (int i = 0; i < dec->num_texts; i++)
    if (strcmp(dec->warnings[i], text) == 0) return;
  if (dec->num_texts < DCTJ_MAX_WARNINGS) {
    memcpy(dec->warnings[dec->num_texts], text, DCTJ_MSG_LEN);
    dec->num_texts++;
  } else if (lost && dec->num_lost == 1) {
    /* the list is full of harmless ones: the first text saying data was lost takes the last slot */
    memcpy(dec->warnings[DCTJ_MAX_WARNINGS - 1], text, DCTJ_MSG_LEN);
  }
}

static void on_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* Scan-flood guard: a crafted progressive file can hold thousands of tiny scans, each one a
 * full pass over the coefficient arrays. libjpeg calls the monitor once per input step. */
static void on_progress(j_common_ptr cinfo) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  if (dec->cinfo.input_scan_number > DCTJ_MAX_SCANS) {
    snprintf(dec->error, DCTJ_MSG_LEN, "more than %d scans: refusing a likely malicious file", DCTJ_MAX_SCANS);
    longjmp(dec->jump, 1);
  }
  /* Called before each iMCU row is entropy-decoded: a single scan holding every component has
   * then decoded input_iMCU_row full rows, all a crop ending above them needs. */
  int stop = dec->windows ? dec->window_stop : dec->stop_rows;
  if (stop > 0 && dec->target_hdr && !dec->cinfo.progressive_mode &&
      dec->cinfo.comps_in_scan == dec->cinfo.num_components && dec->cinfo.input_scan_number == 1 &&
      dec->cinfo.input_iMCU_row >= (JDIMENSION)stop)
    longjmp(dec->jump, 2);
}

/* In-memory source. At the end of the data it does what libjpeg's own sources do: warn
 * "Premature end of JPEG file" and feed a fake EOI, so a truncated file decodes to what it has. */
static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};

static void src_init(j_decompress_ptr cinfo) { (void)cinfo; }

static boolean src_fill(j_decompress_ptr cinfo) {
  WARNMS(cinfo, JWRN_JPEG_EOF);
  cinfo->src->next_input_byte = fake_eoi;
  cinfo->src->bytes_in_buffer = 2;
  return TRUE;
}

static void src_skip(j_decompress_ptr cinfo, long num_bytes) {
  struct jpeg_source_mgr *src = cinfo->src;
  if (num_bytes <= 0) return;
  if ((size_t)num_bytes > src->bytes_in_buffer) {
    /* Skipping past the end: one warning and the fake EOI (not one warning per 2 bytes). */
    src_fill(cinfo);
    return;
  }
  src->next_input_byte += num_bytes;
  src->bytes_in_buffer -= (size_t)num_bytes;
}

static void src_term(j_decompress_ptr cinfo) { (void)cinfo; }

static void setup_source(struct jpeg_source_mgr *src) {
  src->init_source = src_init;
  src->fill_input_buffer = src_fill;
  src->skip_input_data = src_skip;
  src->resync_to_restart = jpeg_resync_to_restart;
  src->term_source = src_term;
}


static void fill_header(dctj_decoder *dec, dctj_header *hdr) {
  struct jpeg_decompress_struct *c = &dec->cinfo;
  size_t offset = 0;
  hdr->width = (int)c->image_width;
  hdr->height = (int)c->image_height;
  hdr->num_components = c->num_components;
  hdr->color_space = (int)c->jpeg_color_space;
  hdr->saw_jfif = c->saw_JFIF_marker;
  hdr->saw_adobe = c->saw_Adobe_marker;
  hdr->adobe_transform = c->Adobe_transform;
  hdr->progressive = c->progressive_mode;
  hdr->arithmetic = c->arith_code;
  hdr->restart_interval = (int)c->restart_interval;
  hdr->max_h_samp = c->max_h_samp_factor;
  hdr->max_v_samp = c->max_v_samp_factor;
  hdr->mcu_cols = (int)((c->image_width + 8 * c->max_h_samp_factor - 1) / (8 * c->max_h_samp_factor));
  hdr->mcu_rows = (int)((c->image_height + 8 * c->max_v_samp_factor - 1) / (8 * c->max_v_samp_factor));
  for (int ci = 0; ci < c->num_components; ci++) {
    jpeg_component_info *cp = &c->comp_info[ci];
    dctj_component *out = &hdr->comp[ci];
    JQUANT_TBL *qt = cp->quant_tbl_no >= 0 && cp->quant_tbl_no < NUM_QUANT_TBLS ? c->quant_tbl_ptrs[cp->quant_tbl_no] : NULL;
    out->id = cp->component_id;
    out->h_samp = cp->h_samp_factor;
    out->v_samp = cp->v_samp_factor;
    out->quant_index = cp->quant_tbl_no;
    out->blocks_h = hdr->mcu_rows * cp->v_samp_factor;
    out->blocks_w = hdr->mcu_cols * cp->h_samp_factor;
    out->coded_h = (int)cp->height_in_blocks;
    out->coded_w = (int)cp->width_in_blocks;
    out->offset = offset;
    offset += (size_t)out->blocks_h * (size_t)out->blocks_w * 64;
    /* The table defined so far; dctj_read replaces it with the latched one. */
    if (qt) memcpy(hdr->quant[ci], qt->quantval, sizeof(hdr->quant[ci]));
    else memset(hdr->quant[ci], 0, sizeof(hdr->quant[ci]));
  }
  hdr->total_coefs = offset;
  hdr->exif_orientation = 0;
  for (jpeg_saved_marker_ptr m = c->marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) {
      int o = markers_exif_orientation(m->data, m->data_length);
      if (o) {
        hdr->exif_orientation = o;
        break;
      }
    }
  }
}


/* ---------------------------------------------------------------- decoding in place
 *
 * jpeg_read_coefficients makes libjpeg allocate one zeroed whole-image array per component,
 * decode into it, and free it again at the end of the image. For 0.1-1 MB images that is a
 * fresh mmap, page faults and a munmap per image: about a fifth of the raw read, in the kernel.
 * Our plane layout is exactly libjpeg's array layout (rows of blocks_w JBLOCKs, JCOEF = int16),
 * so while dctj_read runs we answer libjpeg's virtual-array requests with rows of the output
 * buffer itself: libjpeg decodes straight into the planes, and dequantization is one in-place
 * pass. These are libjpeg's public memory-manager methods (jpeglib.h, struct jpeg_memory_mgr);
 * requests we do not expect are passed on to the original methods. */

static jvirt_barray_ptr hook_request_virt_barray(j_common_ptr cinfo, int pool_id, boolean pre_zero,
                                                 JDIMENSION blocksperrow, JDIMENSION numrows, JDIMENSION maxaccess) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  const dctj_header *hdr = dec->target_hdr;
  if (hdr && pool_id == JPOOL_IMAGE && dec->num_virt < hdr->num_components) {
    int ci = dec->num_virt;
    struct dctj_virt *v = &dec->virt[ci];
    if (blocksperrow != (JDIMENSION)hdr->comp[ci].blocks_w || numrows != (JDIMENSION)hdr->comp[ci].blocks_h) {
      snprintf(dec->error, DCTJ_MSG_LEN, "internal: libjpeg asked for a %ux%u block array, expected %dx%d",
               numrows, blocksperrow, hdr->comp[ci].blocks_h, hdr->comp[ci].blocks_w);
      longjmp(dec->jump, 1);
    }
    v->blocks_w = blocksperrow;
    v->blocks_h = numrows;
    v->pre_zero = pre_zero;
    v->rows = NULL;
    v->base = NULL;
    v->scratch = NULL;
    v->have_cur = v->cur_n = 0;
    v->cur_row = v->next_row = 0;
    v->done_rows = 0;
    if (dec->windows) { /* streaming: this component's slice of the scratch (sized by dctj_read_window) */
      size_t off = 0;
      for (int k = 0; k < ci; k++) off += (size_t)hdr->comp[k].v_samp * (size_t)hdr->comp[k].blocks_w * 64;
      v->scratch = dec->scratch + off;
    } else {
      v->base = dec->target + hdr->comp[ci].offset;
    }
    dec->num_virt++;
    return (jvirt_barray_ptr)v;
  }
  return dec->orig_request_virt_barray(cinfo, pool_id, pre_zero, blocksperrow, numrows, maxaccess);
}

static int is_ours(dctj_decoder *dec, jvirt_barray_ptr ptr) {
  return (const char *)ptr >= (const char *)dec->virt && (const char *)ptr < (const char *)(dec->virt + dec->num_virt);
}

static void hook_realize_virt_arrays(j_common_ptr cinfo) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  dec->orig_realize_virt_arrays(cinfo);
  for (int ci = 0; ci < dec->num_virt; ci++) {
    struct dctj_virt *v = &dec->virt[ci];
    if (!v->base) continue; /* streaming: rows are handed out one iMCU row at a time */
    v->rows = (JBLOCKROW *)(*cinfo->mem->alloc_small)(cinfo, JPOOL_IMAGE, sizeof(JBLOCKROW) * v->blocks_h);
    for (JDIMENSION r = 0; r < v->blocks_h; r++) v->rows[r] = (JBLOCKROW)(v->base + (size_t)r * v->blocks_w * 64);
    if (v->pre_zero) memset(v->base, 0, sizeof(JBLOCK) * (size_t)v->blocks_w * v->blocks_h);
  }
}

/* ---------------------------------------------------------------- streaming into windows
 *
 * A single-scan file (every component in one interleaved, sequential scan) is entropy-decoded
 * top to bottom, one iMCU row at a time, each row written once: libjpeg's consume_data asks for
 * rows [k*v, (k+1)*v) of every component for iMCU row k. So instead of whole planes, each
 * component gets one iMCU row of scratch: when libjpeg moves on to the next row, the finished
 * row's window part is dequantized straight into the caller's zero-padded window and the scratch
 * is reused. Nothing image-sized is allocated, zeroed or dequantized; the scratch stays in cache.
 * Any other access pattern (a malformed extra scan revisiting rows) abandons the stream
 * (DCTJ_RESTART), and the caller decodes the file in full instead. */

static const uint16_t zero_table[64];

/* Write the scratch rows of component ci to its window (those inside it) and note them done. */
static void stream_flush(dctj_decoder *dec, int ci) {
  struct dctj_virt *v = &dec->virt[ci];
  const dctj_window *w = &dec->windows[ci];
  jpeg_component_info *cp = &dec->cinfo.comp_info[ci];
  const uint16_t *q = cp->quant_table ? (const uint16_t *)cp->quant_table->quantval : zero_table;
  int64_t pw = (int64_t)v->blocks_w;
  int64_t pre = w->c0 < pw ? w->c0 : pw, end = w->c1 < pw ? w->c1 : pw;
  int64_t have = end > pre ? end - pre : 0;
  if (have > w->dst_w) have = w->dst_w; /* never write past the destination row */
  for (int k = 0; k < v->cur_n; k++) {
    int64_t pr = (int64_t)v->cur_row + k, r = pr - w->r0;
    if (pr < w->r0 || pr >= w->r1 || r >= w->dst_h) continue;
    int16_t *row = w->dst + (size_t)r * (size_t)w->dst_w * 64;
    dec->clipped |= dequantize_out(v->srow[k][pre], row, q, (size_t)have);
    zero_out(row + have * 64, (size_t)(w->dst_w - have));
  }
  v->done_rows = (int64_t)v->cur_row + v->cur_n;
  v->have_cur = 0;
}

static JBLOCKARRAY stream_access(dctj_decoder *dec, struct dctj_virt *v, JDIMENSION start_row, JDIMENSION num_rows) {
  int ci = (int)(v - dec->virt);
  if (v->have_cur && start_row == v->cur_row && (int)num_rows <= v->cur_n) return v->srow; /* the same row again */
  if (start_row != v->next_row || num_rows == 0 || (int)num_rows > dec->target_hdr->comp[ci].v_samp ||
      start_row + num_rows > v->blocks_h)
    longjmp(dec->jump, 3); /* not a single top-to-bottom pass: decode in full instead */
  if (v->have_cur) stream_flush(dec, ci);
  memset(v->scratch, 0, (size_t)num_rows * v->blocks_w * sizeof(JBLOCK)); /* libjpeg's pre-zeroed arrays */
  for (JDIMENSION k = 0; k < num_rows; k++) v->srow[k] = (JBLOCKROW)(v->scratch + (size_t)k * v->blocks_w * 64);
  v->cur_row = start_row;
  v->cur_n = (int)num_rows;
  v->have_cur = 1;
  v->next_row = start_row + num_rows;
  return v->srow;
}

static JBLOCKARRAY hook_access_virt_barray(j_common_ptr cinfo, jvirt_barray_ptr ptr, JDIMENSION start_row,
                                          JDIMENSION num_rows, boolean writable) {
  dctj_decoder *dec = (dctj_decoder *)cinfo;
  if (is_ours(dec, ptr)) {
    struct dctj_virt *v = (struct dctj_virt *)ptr;
    if (dec->windows) return stream_access(dec, v, start_row, num_rows);
    if (!v->rows || start_row + num_rows > v->blocks_h || start_row + num_rows < start_row) {
      snprintf(dec->error, DCTJ_MSG_LEN, "internal: bad coefficient array access");
      longjmp(dec->jump, 1);
    }
    return v->rows + start_row;
  }
  return dec->orig_access_virt_barray(cinfo, ptr, start_row, num_rows, writable);
}

static void install_hooks(dctj_decoder *dec) {
  struct jpeg_memory_mgr *mem = dec->cinfo.mem;
  dec->orig_request_virt_barray = mem->request_virt_barray;
  dec->orig_realize_virt_arrays = mem->realize_virt_arrays;
  dec->orig_access_virt_barray = mem->access_virt_barray;
  mem->request_virt_barray = hook_request_virt_barray;
  mem->realize_virt_arrays = hook_realize_virt_arrays;
  mem->access_virt_barray = hook_access_virt_barray;
}

/* ---------------------------------------------------------------- public API */

dctj_decoder *dctj_new(void) { return (dctj_decoder *)calloc(1, sizeof(dctj_decoder)); }

void dctj_free(dctj_decoder *dec) {
  if (!dec) return;
  dctj_abort(dec);
  free(dec->scratch);
  free(dec);
}

/* Every image gets a fresh libjpeg decompressor. Reusing one is not only unnecessary (creating
 * one costs well under a microsecond) but wrong: libjpeg keeps quantization and Huffman tables
 * across images on purpose (abbreviated streams), so a file that lacks its tables would
 * silently decode with the previous image's. */
static void create_decompressor(dctj_decoder *dec) {
  dec->cinfo.err = jpeg_std_error(&dec->err);
  dec->err.error_exit = on_error_exit;
  dec->err.emit_message = on_emit_message;
  dec->err.output_message = on_output_message;
  jpeg_create_decompress(&dec->cinfo);
  dec->active = 1;
  install_hooks(dec);
  setup_source(&dec->src);
  dec->cinfo.src = &dec->src;
  dec->progress.progress_monitor = on_progress;
  dec->cinfo.progress = &dec->progress;
}

static void destroy_decompressor(dctj_decoder *dec) {
  jpeg_destroy_decompress(&dec->cinfo);
  dec->active = 0;
  dec->target_hdr = NULL;
  dec->windows = NULL;
}


int dctj_begin(dctj_decoder *dec, const uint8_t *data, size_t len, int warn_mode, uint64_t max_pixels,
               uint64_t max_bytes, dctj_header *hdr) {
  int sof, precision;
  if (dec->active) dctj_abort(dec);
  dec->warn_mode = warn_mode;
  dec->num_warnings = 0;
  dec->num_lost = 0;
  dec->num_texts = 0;
  dec->error[0] = 0;
  if (len == 0) {
    snprintf(dec->error, DCTJ_MSG_LEN, "empty input (0 bytes)");
    return -1;
  }
  markers_find_sof(data, len, &sof, &precision);
  if (sof == 3 || sof == 5 || sof == 6 || sof == 7 || sof == 11 || sof == 13 || sof == 14 || sof == 15) {
    set_unsupported_message(dec->error, sof);
    return -1;
  }
  if (sof >= 0 && precision != 8) {
    snprintf(dec->error, DCTJ_MSG_LEN, "unsupported JPEG: %d-bit samples (dctnet reads 8-bit JPEG only)", precision);
    return -1;
  }
  if (setjmp(dec->jump)) {
    destroy_decompressor(dec);
    return -1;
  }
  create_decompressor(dec);
  dec->src.next_input_byte = data;
  dec->src.bytes_in_buffer = len;
  jpeg_save_markers(&dec->cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&dec->cinfo, TRUE);
  /* A cut file warns only when the decode reaches the cut, which a windowed read that stops early
   * never does: check the bytes, so that every read of the file agrees. */
  if (warn_mode != DCTJ_WARN_ACCEPT && !markers_have_eoi(dec->src.next_input_byte, dec->src.bytes_in_buffer))
    WARNMS(&dec->cinfo, JWRN_JPEG_EOF);
  if (max_pixels > 0 && (uint64_t)dec->cinfo.image_width * dec->cinfo.image_height > max_pixels) {
    snprintf(dec->error, DCTJ_MSG_LEN, "image is %ux%u = %llu pixels, more than max_pixels=%llu (decompression-bomb guard)",
             dec->cinfo.image_width, dec->cinfo.image_height,
             (unsigned long long)dec->cinfo.image_width * dec->cinfo.image_height, (unsigned long long)max_pixels);
    destroy_decompressor(dec);
    return -1;
  }
  if (!DCTJ_READABLE_COMPONENTS(dec->cinfo.num_components)) {
    snprintf(dec->error, DCTJ_MSG_LEN, "unsupported JPEG: %d components (dctnet reads 1 (gray), 3 (YCbCr/RGB) or "
             "4 (CMYK/YCCK))", dec->cinfo.num_components);
    destroy_decompressor(dec);
    return -1;
  }
  fill_header(dec, hdr);
  /* max_pixels alone does not bound memory: the planes cost components x sampling x MCU padding. */
  if (max_bytes > 0 && (uint64_t)hdr->total_coefs * sizeof(int16_t) > max_bytes) {
    snprintf(dec->error, DCTJ_MSG_LEN, "image is %ux%u with %d components and needs %llu bytes of coefficient planes, "
             "more than max_bytes=%llu (decompression-bomb guard)", dec->cinfo.image_width, dec->cinfo.image_height,
             dec->cinfo.num_components, (unsigned long long)hdr->total_coefs * sizeof(int16_t),
             (unsigned long long)max_bytes);
    destroy_decompressor(dec);
    return -1;
  }
  hdr->sof = sof;
  hdr->precision = sof >= 0 ? precision : dec->cinfo.data_precision;
  return 0;
}

int dctj_read(dctj_decoder *dec, dctj_header *hdr, int16_t *out, size_t out_len, int *saturated) {
  struct jpeg_decompress_struct *c = &dec->cinfo;
  volatile int clipped = 0; /* volatile: live across the setjmp below */
  if (!dec->active) {
    snprintf(dec->error, DCTJ_MSG_LEN, "dctj_read without a successful dctj_begin");
    return -1;
  }
  if (out_len < hdr->total_coefs) {
    snprintf(dec->error, DCTJ_MSG_LEN, "output holds %zu coefficients, the image needs %zu", out_len, hdr->total_coefs);
    dctj_abort(dec);
    return -1;
  }
  dec->target_hdr = hdr;
  dec->target = out;
  dec->num_virt = 0;
  switch (setjmp(dec->jump)) {
  case 0:
    break;
  case 2: { /* stopped early (dctj_set_stop_rows): rows past the stop are zero, the rest as decoded */
    JDIMENSION rows = c->input_iMCU_row;
    for (int ci = 0; ci < c->num_components; ci++) {
      dctj_component *comp = &hdr->comp[ci];
      size_t keep = (size_t)rows * comp->v_samp * comp->blocks_w;
      size_t all = (size_t)comp->blocks_w * comp->blocks_h;
      int16_t *plane = out + comp->offset;
      if (keep > all) keep = all;
      memset(plane + keep * 64, 0, (all - keep) * 64 * sizeof(int16_t));
      if (c->comp_info[ci].quant_table) memcpy(hdr->quant[ci], c->comp_info[ci].quant_table->quantval,
                                               sizeof(hdr->quant[ci]));
      clipped |= dequantize(plane, plane, hdr->quant[ci], keep);
    }
    destroy_decompressor(dec);
    *saturated = clipped;
    return 0;
  }
  default:
    destroy_decompressor(dec);
    return -1;
  }
  jpeg_read_coefficients(c); /* decodes into out (see hook_request_virt_barray) */
  if (dec->num_virt != c->num_components) {
    snprintf(dec->error, DCTJ_MSG_LEN, "internal: libjpeg set up %d coefficient arrays for %d components",
             dec->num_virt, c->num_components);
    longjmp(dec->jump, 1);
  }
  for (int ci = 0; ci < c->num_components; ci++) {
    jpeg_component_info *cp = &c->comp_info[ci];
    dctj_component *comp = &hdr->comp[ci];
    int16_t *plane = out + comp->offset;
    /* libjpeg latches a component's table when its first scan starts (tables may be redefined
     * later). A component that no scan reached (truncated file) has none and stays all zero. */
    if (cp->quant_table) memcpy(hdr->quant[ci], cp->quant_table->quantval, sizeof(hdr->quant[ci]));
    clipped |= dequantize(plane, plane, hdr->quant[ci], (size_t)comp->blocks_w * comp->blocks_h);
  }
  jpeg_finish_decompress(c);
  destroy_decompressor(dec);
  *saturated = clipped;
  return 0;
}

int dctj_single_scan(const dctj_decoder *dec) {
  return dec->active && !dec->cinfo.progressive_mode && dec->cinfo.comps_in_scan == dec->cinfo.num_components;
}

/* After the stream: the rows still in scratch go out, and every destination row that no decoded
 * plane row reached (past a stop, past the end of a truncated file, outside the plane) is zeroed. */
static void stream_finish(dctj_decoder *dec, dctj_header *hdr, const dctj_window *win) {
  struct jpeg_decompress_struct *c = &dec->cinfo;
  for (int ci = 0; ci < c->num_components; ci++) {
    const dctj_window *w = &win[ci];
    struct dctj_virt *v = &dec->virt[ci];
    int64_t written = 0;
    if (ci < dec->num_virt) {
      if (v->have_cur) stream_flush(dec, ci);
      written = v->done_rows;
    }
    if (written > w->r1) written = w->r1;
    if (written > hdr->comp[ci].blocks_h) written = hdr->comp[ci].blocks_h;
    for (int64_t r = 0; r < w->dst_h; r++)
      if (w->r0 + r >= written) zero_out(w->dst + (size_t)r * (size_t)w->dst_w * 64, (size_t)w->dst_w);
    if (c->comp_info[ci].quant_table) memcpy(hdr->quant[ci], c->comp_info[ci].quant_table->quantval, sizeof(hdr->quant[ci]));
  }
  dequantize_fence(); /* the non-temporal stores are visible before anyone is told the window is done */
}

int dctj_read_window(dctj_decoder *dec, dctj_header *hdr, const dctj_window *win, int *saturated) {
  struct jpeg_decompress_struct *c = &dec->cinfo;
  size_t need = 0;
  int stop = 1;
  if (!dctj_single_scan(dec)) {
    snprintf(dec->error, DCTJ_MSG_LEN, "dctj_read_window without a successful dctj_begin of a single-scan file");
    dctj_abort(dec);
    return -1;
  }
  for (int ci = 0; ci < hdr->num_components; ci++) {
    const dctj_window *w = &win[ci];
    int vs = hdr->comp[ci].v_samp;
    if (w->r0 < 0 || w->r1 < w->r0 || w->c0 < 0 || w->c1 < w->c0 || w->dst_h < 0 || w->dst_w < 0 ||
        (!w->dst && w->dst_h > 0 && w->dst_w > 0)) {
      snprintf(dec->error, DCTJ_MSG_LEN, "dctj_read_window: bad window for component %d", ci);
      dctj_abort(dec);
      return -1;
    }
    need += (size_t)vs * (size_t)hdr->comp[ci].blocks_w * 64;
    { /* iMCU rows the window needs: its last plane row, in rows of v_samp */
      int64_t last = w->r1 < hdr->comp[ci].blocks_h ? w->r1 : hdr->comp[ci].blocks_h;
      int64_t rows = (last + vs - 1) / vs;
      if (rows > stop) stop = (int)rows;
    }
  }
  if (need > dec->scratch_cap) {
    int16_t *grown = (int16_t *)malloc(need * sizeof(int16_t));
    if (!grown) {
      snprintf(dec->error, DCTJ_MSG_LEN, "out of memory (%zu bytes of row scratch)", need * sizeof(int16_t));
      dctj_abort(dec);
      return -1;
    }
    free(dec->scratch);
    dec->scratch = grown;
    dec->scratch_cap = need;
  }
  dec->target_hdr = hdr;
  dec->target = NULL;
  dec->num_virt = 0;
  dec->windows = win;
  /* windows reaching the last row decode to the end of the file, so the file's own errors after
   * the image data are reported as by dctj_read */
  dec->window_stop = (JDIMENSION)stop >= c->total_iMCU_rows ? 0 : stop;
  dec->clipped = 0;
  switch (setjmp(dec->jump)) {
  case 0:
    break;
  case 2: /* stopped after the rows the windows need */
    stream_finish(dec, hdr, win);
    *saturated = dec->clipped;
    destroy_decompressor(dec);
    return 0;
  case 3:
    destroy_decompressor(dec);
    return DCTJ_RESTART;
  default:
    destroy_decompressor(dec);
    return -1;
  }
  jpeg_read_coefficients(c); /* streams into the windows (see stream_access) */
  if (dec->num_virt != c->num_components) {
    snprintf(dec->error, DCTJ_MSG_LEN, "internal: libjpeg set up %d coefficient arrays for %d components",
             dec->num_virt, c->num_components);
    longjmp(dec->jump, 1);
  }
  stream_finish(dec, hdr, win); /* before finishing: that frees the quantization tables it reads */
  jpeg_finish_decompress(c);
  *saturated = dec->clipped;
  destroy_decompressor(dec);
  return 0;
}

void dctj_set_stop_rows(dctj_decoder *dec, int rows) { dec->stop_rows = rows > 0 ? rows : 0; }

void dctj_abort(dctj_decoder *dec) {
  if (dec->active) destroy_decompressor(dec);
}

const char *dctj_error(const dctj_decoder *dec) { return dec->error; }
int dctj_num_warnings(const dctj_decoder *dec) { return dec->num_warnings; }
int dctj_num_warning_texts(const dctj_decoder *dec) { return dec->num_texts; }
int dctj_num_lost(const dctj_decoder *dec) { return dec->num_lost; }
const char *dctj_warning(const dctj_decoder *dec, int i) { return dec->warnings[i]; }
int dctj_lib_version(void) { return JPEG_LIB_VERSION; }

const char *dctj_color_space_name(int cs) {
  switch (cs) {
  case JCS_GRAYSCALE: return "gray";
  case JCS_RGB: return "RGB";
  case JCS_YCbCr: return "YCbCr";
  case JCS_CMYK: return "CMYK";
  case JCS_YCCK: return "YCCK";
  default: return "unknown";
  }
}

const char *dctj_process_name(int sof) {
  switch (sof) {
  case 0: return "baseline";
  case 1: return "extended";
  case 2: return "progressive";
  case 9: return "extended-arithmetic";
  case 10: return "progressive-arithmetic";
  default: return "unknown";
  }
}

/* ---------------------------------------------------------------- raw floor */

struct raw_ctx {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  jmp_buf jump;
};

static void raw_error_exit(j_common_ptr cinfo) { longjmp(((struct raw_ctx *)cinfo)->jump, 1); }

int dctj_raw_read(const uint8_t *data, size_t len, char *err) {
  struct raw_ctx ctx;
  struct jpeg_source_mgr src;
  ctx.cinfo.err = jpeg_std_error(&ctx.err);
  ctx.err.error_exit = raw_error_exit;
  ctx.err.output_message = on_output_message;
  if (setjmp(ctx.jump)) {
    (*ctx.cinfo.err->format_message)((j_common_ptr)&ctx.cinfo, err);
    jpeg_destroy_decompress(&ctx.cinfo);
    return -1;
  }
  jpeg_create_decompress(&ctx.cinfo);
  setup_source(&src);
  src.next_input_byte = data;
  src.bytes_in_buffer = len;
  ctx.cinfo.src = &src;
  jpeg_read_header(&ctx.cinfo, TRUE);
  {
    /* The same bounds as dctj_begin's defaults: libjpeg would allocate whole-image arrays. */
    uint64_t blocks = 0, hmax = (uint64_t)ctx.cinfo.max_h_samp_factor, vmax = (uint64_t)ctx.cinfo.max_v_samp_factor;
    uint64_t mcu_rows = (ctx.cinfo.image_height + 8 * vmax - 1) / (8 * vmax);
    uint64_t mcu_cols = (ctx.cinfo.image_width + 8 * hmax - 1) / (8 * hmax);
    for (int ci = 0; ci < ctx.cinfo.num_components; ci++) /* libjpeg pads its arrays to whole MCUs */
      blocks += mcu_rows * (uint64_t)ctx.cinfo.comp_info[ci].v_samp_factor * mcu_cols *
                (uint64_t)ctx.cinfo.comp_info[ci].h_samp_factor;
    if (!DCTJ_READABLE_COMPONENTS(ctx.cinfo.num_components) || blocks * 128 > DCTJ_RAW_MAX_BYTES) {
      snprintf(err, DCTJ_MSG_LEN, "refused: %d components, %llu bytes of coefficients", ctx.cinfo.num_components,
               (unsigned long long)(blocks * 128));
      jpeg_destroy_decompress(&ctx.cinfo);
      return -1;
    }
  }
  jpeg_read_coefficients(&ctx.cinfo);
  jpeg_finish_decompress(&ctx.cinfo);
  jpeg_destroy_decompress(&ctx.cinfo);
  return 0;
}
