/* The reading engine below the binding (see reader.h). */
#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool.h"

static pthread_key_t tls_key;

static void reader_free(void *p) {
  reader_state *ts = (reader_state *)p;
  if (!ts) return;
  dctj_free(ts->dec);
  free(ts->file_buf);
  free(ts->planes);
  free(ts->scratch);
  free(ts);
}

int reader_init(void) { return pthread_key_create(&tls_key, reader_free) == 0 ? 0 : -1; }

reader_state *reader_get(void) {
  reader_state *ts = (reader_state *)pthread_getspecific(tls_key);
  if (ts) return ts;
  ts = (reader_state *)calloc(1, sizeof(reader_state));
  if (!ts) return NULL;
  ts->dec = dctj_new();
  ts->scratch = (read_result *)malloc(sizeof(read_result));
  if (!ts->dec || !ts->scratch || pthread_setspecific(tls_key, ts) != 0) {
    reader_free(ts);
    return NULL;
  }
  return ts;
}

int open_regular(const char *path, int *fd_out, size_t *size) {
  struct stat st;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer for ever. It has no
   * effect on reads of regular files, the only kind read below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size > MAX_FILE_BYTES) {
    close(fd);
    return S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? ERR_NOT_REGULAR : EFBIG;
  }
  *fd_out = fd;
  *size = (size_t)st.st_size;
  return 0;
}

int read_all(int fd, uint8_t *dst, size_t size, size_t *got) {
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, dst + n, size - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return e;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  *got = n;
  return 0;
}

int read_file(reader_state *ts, const char *path, size_t *len) {
  int fd;
  size_t size;
  int e = open_regular(path, &fd, &size);
  if (e) return e;
  if (size > ts->file_cap || (ts->file_cap > KEEP_FILE_BUFFER && size < KEEP_FILE_BUFFER)) {
    uint8_t *nb = (uint8_t *)malloc(size ? size : 1);
    if (!nb) {
      close(fd);
      return ENOMEM;
    }
    free(ts->file_buf);
    ts->file_buf = nb;
    ts->file_cap = size ? size : 1;
  }
  return read_all(fd, ts->file_buf, size, len);
}

void file_failure(image_status *st, int err) {
  st->status = err == ERR_NOT_REGULAR ? ST_NOT_REGULAR : ST_IO_ERROR;
  st->io_err = err;
}

void jpeg_failure(image_status *st, const dctj_decoder *dec) {
  st->status = ST_JPEG_ERROR;
  snprintf(st->error, DCTJ_MSG_LEN, "%s", dctj_error(dec));
}

void read_image(reader_state *ts, const char *path, const uint8_t *data, size_t len, const read_limits *lim,
                int header_only, void *out, size_t out_bytes, read_result *r) {
  int rc;
  r->st.status = ST_OK;
  r->mem = NULL;
  r->saturated = 0;
  r->num_warnings = r->num_texts = r->num_lost = 0;
  if (path) {
    int e = read_file(ts, path, &len);
    if (e) {
      file_failure(&r->st, e);
      return;
    }
    data = ts->file_buf;
  }
  rc = dctj_begin(ts->dec, data, len, lim->warn_mode, lim->max_pixels, lim->max_bytes, &r->hdr);
  if (rc == 0 && header_only) {
    dctj_abort(ts->dec);
  } else if (rc == 0 && out) {
    if (out_bytes < r->hdr.total_coefs * sizeof(int16_t)) {
      dctj_abort(ts->dec);
      r->st.status = ST_OUT_TOO_SMALL;
      return;
    }
    rc = dctj_read(ts->dec, &r->hdr, (int16_t *)out, out_bytes / sizeof(int16_t), &r->saturated);
  } else if (rc == 0) {
    r->mem = pool_take(r->hdr.total_coefs * sizeof(int16_t), &r->mem_cap);
    if (!r->mem) {
      dctj_abort(ts->dec);
      r->st.status = ST_NO_MEMORY;
      return;
    }
    rc = dctj_read(ts->dec, &r->hdr, (int16_t *)r->mem, r->hdr.total_coefs, &r->saturated);
  }
  if (rc != 0) {
    jpeg_failure(&r->st, ts->dec);
    return;
  }
  /* The decoder is reused by the next image: keep its warnings with this one. */
  r->num_warnings = dctj_num_warnings(ts->dec);
  r->num_texts = dctj_num_warning_texts(ts->dec);
  r->num_lost = dctj_num_lost(ts->dec);
  for (int i = 0; i < r->num_texts; i++) snprintf(r->warnings[i], DCTJ_MSG_LEN, "%s", dctj_warning(ts->dec, i));
}
