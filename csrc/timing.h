/*
 * Benchmark-only timers (benchmarks/decode.py, benchmarks/below_floor.py and dctnet bench's
 * libjpeg floor call them through _jpeg.time_raw / _jpeg.time_read). No Python here.
 */
#ifndef DCTNET_TIMING_H
#define DCTNET_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "reader.h"

#define TIME_MAX_BYTES ((uint64_t)1 << 30) /* the reader's default max_bytes */

/* Time `repeat` decodes of data[0:len), ns[i] nanoseconds each (monotonic clock). raw: the libjpeg
 * floor (dctj_raw_read: create, header, jpeg_read_coefficients, destroy); otherwise dctnet's path
 * (ts's decoder, dequantize into a reused buffer), stopped after stop_rows MCU rows when > 0.
 * Returns 0, or -1 at the first failed decode with its reason in err (DCTJ_MSG_LEN bytes). */
int time_decodes(reader_state *ts, const uint8_t *data, size_t len, int64_t repeat, int raw, int stop_rows,
                 int64_t *ns, char *err);

#endif
