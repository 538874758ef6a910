/* Benchmark-only timers (see timing.h). */
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* dctnet's C path on one image: header, then planes into *buf (grown to fit). */
static int read_once(reader_state *ts, const uint8_t *data, size_t len, int16_t **buf, size_t *cap, char *err) {
  dctj_header hdr;
  int sat;
  if (dctj_begin(ts->dec, data, len, 0, 0, TIME_MAX_BYTES, &hdr) != 0) {
    snprintf(err, DCTJ_MSG_LEN, "%s", dctj_error(ts->dec));
    return -1;
  }
  if (hdr.total_coefs > *cap) {
    free(*buf);
    *cap = hdr.total_coefs;
    *buf = (int16_t *)malloc(*cap * sizeof(int16_t));
    if (!*buf) {
      *cap = 0;
      dctj_abort(ts->dec);
      snprintf(err, DCTJ_MSG_LEN, "out of memory");
      return -1;
    }
  }
  if (dctj_read(ts->dec, &hdr, *buf, *cap, &sat) != 0) {
    snprintf(err, DCTJ_MSG_LEN, "%s", dctj_error(ts->dec));
    return -1;
  }
  return 0;
}

int time_decodes(reader_state *ts, const uint8_t *data, size_t len, int64_t repeat, int raw, int stop_rows,
                 int64_t *ns, char *err) {
  int16_t *buf = NULL;
  size_t cap = 0;
  int failed = 0;
  err[0] = 0;
  if (!raw) dctj_set_stop_rows(ts->dec, stop_rows);
  for (int64_t i = 0; i < repeat && !failed; i++) {
    int64_t t0 = now_ns();
    failed = raw ? dctj_raw_read(data, len, err) != 0 : read_once(ts, data, len, &buf, &cap, err) != 0;
    ns[i] = now_ns() - t0;
  }
  if (!raw) dctj_set_stop_rows(ts->dec, 0);
  free(buf);
  return failed ? -1 : 0;
}
