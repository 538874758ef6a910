/* The raw libjpeg floor against the SYSTEM's libjpeg, for benchmarks/decode.py to put beside the
 * floor of the libjpeg vendored in the extension (csrc/dctjpeg.c's dctj_raw_read, the same calls):
 * jpeg_create_decompress, jpeg_read_header, jpeg_read_coefficients, jpeg_finish/destroy, from
 * memory. Built at benchmark time with `gcc -O3 -shared -fPIC system_floor.c -ljpeg` where the
 * system has libjpeg's header; benchmark input only (trusted files). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <jpeglib.h>

struct ctx {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  jmp_buf jump;
};

static void on_error(j_common_ptr c) { longjmp(((struct ctx *)c)->jump, 1); }
static void quiet(j_common_ptr c) { (void)c; }

int system_floor_version(void) {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
  return LIBJPEG_TURBO_VERSION_NUMBER;
#else
  return 0;
#endif
}

/* nanoseconds of one read of data[0:len], or -1 when libjpeg refuses it */
int64_t system_floor_ns(const uint8_t *data, unsigned long len) {
  struct ctx c;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  c.cinfo.err = jpeg_std_error(&c.err);
  c.err.error_exit = on_error;
  c.err.output_message = quiet;
  if (setjmp(c.jump)) {
    jpeg_destroy_decompress(&c.cinfo);
    return -1;
  }
  jpeg_create_decompress(&c.cinfo);
  jpeg_mem_src(&c.cinfo, data, len);
  jpeg_read_header(&c.cinfo, TRUE);
  jpeg_read_coefficients(&c.cinfo);
  jpeg_finish_decompress(&c.cinfo);
  jpeg_destroy_decompress(&c.cinfo);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
}
