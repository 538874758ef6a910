/*
 * dctjpeg: read dequantized DCT coefficients from an in-memory JPEG with libjpeg.
 *
 * Pure C (no Python), so the same code serves the extension module, the raw-floor timer and the
 * fuzz harness. A decoder object is reusable and owns its libjpeg state; one decoder per thread.
 *
 * Output layout: one int16 plane per component, stored back to back,
 * each (blocks_h, blocks_w, 64) in natural (row-major, k = 8*v + u) coefficient order, where
 * blocks_h = mcu_rows * v_samp and blocks_w = mcu_cols * h_samp ("MCU-aligned"), so the grid of
 * every component is an exact multiple of the others. Blocks beyond a component's coded size
 * (coded_h x coded_w, libjpeg's height/width_in_blocks) hold the encoder's dummy blocks when the
 * component was coded in an interleaved scan, and zeros otherwise.
 */
#ifndef DCTJPEG_H
#define DCTJPEG_H

#include <stddef.h>
#include <stdint.h>

#define DCTJ_MAX_COMPONENTS 10 /* libjpeg's MAX_COMPONENTS */
/* What dctnet reads: gray (1), YCbCr/RGB (3), CMYK/YCCK (4) components. Other counts (2, 5-10)
 * have no colour space libjpeg or Pillow can convert, and the data pipeline holds <= 4 planes. */
#define DCTJ_READABLE_COMPONENTS(n) ((n) == 1 || (n) == 3 || (n) == 4)
#define DCTJ_MAX_WARNINGS 8    /* distinct warning texts kept; all are counted */
#define DCTJ_MSG_LEN 200       /* libjpeg's JMSG_LENGTH_MAX */
#define DCTJ_MAX_SCANS 500     /* same bound as TurboJPEG's scan limit: stops scan-flood DoS */

typedef struct {
  int id;          /* component identifier from the SOF marker */
  int h_samp;      /* sampling factors */
  int v_samp;
  int quant_index; /* which DQT slot the component uses */
  int blocks_h;    /* MCU-aligned plane size in blocks */
  int blocks_w;
  int coded_h; /* libjpeg's height_in_blocks / width_in_blocks */
  int coded_w;
  size_t offset; /* start of this plane in the output, in int16 elements */
} dctj_component;

typedef struct {
  int width;
  int height;
  int num_components;
  int color_space;     /* libjpeg's J_COLOR_SPACE guess for the file */
  int saw_jfif;
  int saw_adobe;
  int adobe_transform; /* valid when saw_adobe */
  int sof;             /* SOF marker number 0..15 (0xC0 + sof), -1 if not seen */
  int precision;
  int progressive;
  int arithmetic;
  int restart_interval; /* in MCUs, 0 = none */
  int exif_orientation; /* 1..8, 0 = absent */
  int max_h_samp;
  int max_v_samp;
  int mcu_rows;
  int mcu_cols;
  dctj_component comp[DCTJ_MAX_COMPONENTS];
  /* Quantization table per component, natural order. After dctj_read these are the tables
   * libjpeg latched for the component's first scan, i.e. the ones its coefficients use. */
  uint16_t quant[DCTJ_MAX_COMPONENTS][64];
  size_t total_coefs; /* int16 elements needed for all planes */
} dctj_header;

typedef struct dctj_decoder dctj_decoder;

/*
 * Which libjpeg warnings fail a read. libjpeg warns and goes on in two kinds of cases:
 *  - the image lost data: the file ends early (JWRN_JPEG_EOF), or the entropy-coded data is
 *    corrupt and libjpeg fills the rest of the segment with zeros or resynchronises
 *    (JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE, JWRN_ARITH_BAD_CODE, JWRN_MUST_RESYNC);
 *  - nothing was lost: junk between segments or before EOI (JWRN_EXTRANEOUS_DATA: real
 *    ImageNet files carry it), an unknown JFIF revision, Adobe transform code or a bad ICC marker,
 *    odd SOS parameters, an inconsistent progression (the scans present are still decoded).
 * DCTJ_WARN_LOST fails on the first kind (and on a file without EOI after its first scan, found
 * from the bytes at dctj_begin, so that a windowed read that stops early still sees truncation);
 * DCTJ_WARN_ALL fails on any warning; DCTJ_WARN_ACCEPT fails on none. Warnings that do not fail
 * are recorded (dctj_warning) and counted (dctj_num_warnings, dctj_num_lost).
 */
#define DCTJ_WARN_ACCEPT 0
#define DCTJ_WARN_LOST 1
#define DCTJ_WARN_ALL 2

/* Returns NULL only when out of memory. */
dctj_decoder *dctj_new(void);
void dctj_free(dctj_decoder *dec);

/*
 * Parse the header of data[0:len). max_pixels > 0 refuses images with width*height above it,
 * max_bytes > 0 images whose planes need more bytes than that (both before anything large is
 * allocated); component counts other than DCTJ_READABLE_COMPONENTS are refused too. warn_mode
 * (DCTJ_WARN_*) says which libjpeg warnings become errors. Returns 0 on success, -1 on error
 * (dctj_error() says why). After success, call either dctj_read() or dctj_abort(). data must stay
 * valid until then.
 */
int dctj_begin(dctj_decoder *dec, const uint8_t *data, size_t len, int warn_mode,
               uint64_t max_pixels, uint64_t max_bytes, dctj_header *hdr);

/*
 * Decode all coefficients, dequantize (saturating to int16) into out (out_len int16 elements,
 * at least hdr->total_coefs) and finish. Sets *saturated when any value was clamped.
 * Returns 0 on success, -1 on error. The decoder is ready for the next dctj_begin either way.
 */
int dctj_read(dctj_decoder *dec, dctj_header *hdr, int16_t *out, size_t out_len, int *saturated);

/* Make the following dctj_read calls on this decoder stop a single-scan (baseline or
 * sequential, all components interleaved) decode after `rows` iMCU rows, leaving the rest of every
 * plane zero — all a crop window ending above them needs; 0 decodes everything. Progressive and
 * multi-scan files always decode in full. */
void dctj_set_stop_rows(dctj_decoder *dec, int rows);

/* One component's window for dctj_read_window: plane block rows [r0, r1) x columns [c0, c1)
 * (clipped to the plane) go, dequantized, to the top left of dst (dst_h x dst_w blocks of 64
 * int16); every other block of dst is zeroed. The same contract as the cache gather's. */
typedef struct {
  int64_t r0, r1, c0, c1;
  int16_t *dst;
  int64_t dst_h, dst_w;
} dctj_window;

/* After dctj_begin: whether the file is single-scan (every component in one interleaved,
 * sequential scan), the case dctj_read_window streams. */
int dctj_single_scan(const dctj_decoder *dec);

#define DCTJ_RESTART 1
/*
 * Decode a single-scan image begun by dctj_begin straight into one window per component
 * (win[num_components]), one iMCU row at a time through a small reused scratch: no image-sized
 * buffer, and the entropy decode stops after the last row any window needs (so damage further
 * down the file goes unseen; windows reaching the last row decode to the end). Equal to
 * dctj_read followed by copying the windows. Returns 0, -1 on error (dctj_error() says why; dst contents
 * are then unspecified), or DCTJ_RESTART when the file turned out to revisit rows (a malformed
 * extra scan): call dctj_begin again and dctj_read. The decoder is ready for the next dctj_begin.
 */
int dctj_read_window(dctj_decoder *dec, dctj_header *hdr, const dctj_window *win, int *saturated);

/* Release the current image after dctj_begin without decoding it. */
void dctj_abort(dctj_decoder *dec);

const char *dctj_error(const dctj_decoder *dec);
/* Warnings of the last image: total count and up to DCTJ_MAX_WARNINGS distinct texts. */
int dctj_num_warnings(const dctj_decoder *dec);
int dctj_num_warning_texts(const dctj_decoder *dec);
/* How many of them said the image lost data (non-zero only under DCTJ_WARN_ACCEPT). */
int dctj_num_lost(const dctj_decoder *dec);
/* Whether a libjpeg warning code means the image lost data (see DCTJ_WARN_LOST). */
int dctj_warning_loses_data(int msg_code);
const char *dctj_warning(const dctj_decoder *dec, int i);

/* libjpeg version the reader was built against (JPEG_LIB_VERSION) and libjpeg-turbo's, if known. */
int dctj_lib_version(void);
const char *dctj_color_space_name(int color_space);
const char *dctj_process_name(int sof);

/*
 * The raw floor: jpeg_create_decompress + header + jpeg_read_coefficients + destroy, exactly
 * what a plain libjpeg program does, with no dequantization or copy. Returns 0 or -1 (error
 * text in err, DCTJ_MSG_LEN bytes).
 */
#define DCTJ_RAW_MAX_BYTES ((uint64_t)1 << 30) /* dctj_raw_read refuses images needing more */
int dctj_raw_read(const uint8_t *data, size_t len, char *err);

#endif
