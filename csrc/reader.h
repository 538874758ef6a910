/*
 * The reading engine below the binding: each OS thread's reader state (a libjpeg decoder and
 * buffers, reused across calls), file I/O, and one image's read. No Python here: the binding
 * (module.c, bind_*.c) turns requests and results into Python objects around these calls.
 */
#ifndef DCTNET_READER_H
#define DCTNET_READER_H

#include <stddef.h>
#include <stdint.h>

#include "dctjpeg.h"

#define MAX_FILE_BYTES ((size_t)1 << 31)    /* 2 GiB: far above any JPEG libjpeg can describe */
#define KEEP_FILE_BUFFER ((size_t)64 << 20) /* per-thread file buffer kept between calls */

/* How an image's read went. */
enum { ST_OK, ST_JPEG_ERROR, ST_IO_ERROR, ST_OUT_TOO_SMALL, ST_NO_MEMORY, ST_NOT_REGULAR };

/* io_err value of the file functions for a path that is not a regular file (FIFO, socket, device). */
#define ERR_NOT_REGULAR (-1)

/* The guards of a read: which libjpeg warnings are errors (DCTJ_WARN_*), and size limits (0: none). */
typedef struct {
  int warn_mode;
  uint64_t max_pixels, max_bytes;
} read_limits;

/* Why an image failed: status ST_*, the errno value of ST_IO_ERROR, libjpeg's (or dctnet's)
 * reason for ST_JPEG_ERROR. */
typedef struct {
  int status;
  int io_err;
  char error[DCTJ_MSG_LEN];
} image_status;

/* Everything one image's read produced. */
typedef struct {
  image_status st;
  int saturated;
  dctj_header hdr;
  char *mem; /* pool memory holding the planes (when no output was given) */
  size_t mem_cap;
  int num_warnings, num_texts, num_lost;
  char warnings[DCTJ_MAX_WARNINGS][DCTJ_MSG_LEN];
} read_result;

typedef struct {
  dctj_decoder *dec;
  uint8_t *file_buf; /* read_file's buffer */
  size_t file_cap;
  int16_t *planes;   /* decode_windows: one image's planes, reused (cache-hot) */
  size_t planes_cap; /* in int16 elements */
  size_t files_hint; /* read_file_batch: bytes the last batch's files took */
  read_result *scratch; /* one read's result (several KB), while scratch_busy is 0 */
  int scratch_busy;     /* a read on this thread is using scratch: a re-entrant call takes its own */
} reader_state;

/* Once per process, before reader_get. Returns 0, or -1 when out of resources. */
int reader_init(void);

/* This thread's reader state, created on first use; NULL when out of memory. */
reader_state *reader_get(void);

/* Open a regular file for reading and learn its size. Returns 0 (*fd open), an errno value
 * (EFBIG for files over MAX_FILE_BYTES), or ERR_NOT_REGULAR. Never blocks on a FIFO. */
int open_regular(const char *path, int *fd, size_t *size);

/* Read up to size bytes of fd into dst and close it; *got: what was there (a file that shrank
 * under us decodes what it has). Returns 0 or an errno value. */
int read_all(int fd, uint8_t *dst, size_t size, size_t *got);

/* Read a whole file into the thread's buffer (ts->file_buf, *len bytes). Returns as open_regular. */
int read_file(reader_state *ts, const char *path, size_t *len);

/* Record an error of the file functions (an errno value or ERR_NOT_REGULAR) in st. */
void file_failure(image_status *st, int err);

/* Record the decoder's error in st. */
void jpeg_failure(image_status *st, const dctj_decoder *dec);

/* Read one image: the file at path (when not NULL) or data[0:len), its header, then (unless
 * header_only) its planes into out (out_bytes bytes, 2-byte aligned) when out is not NULL, or
 * into pool memory (r->mem, then the caller's). The result, warnings or failure go to r. */
void read_image(reader_state *ts, const char *path, const uint8_t *data, size_t len, const read_limits *lim,
                int header_only, void *out, size_t out_bytes, read_result *r);

#endif
