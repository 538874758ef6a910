/*
 * JPEG marker parsing on raw bytes, for what libjpeg does not report: the SOF marker and its
 * precision (before libjpeg refuses a file), the EXIF orientation tag, and whether the file
 * ends with EOI. Pure C, no libjpeg.
 */
#include "markers.h"

#include <string.h>

/* Find the SOF marker and its sample precision by walking marker segments, since libjpeg
 * does not tell SOF0 from SOF1 and refuses 12-bit/lossless files before reporting anything. */
void markers_find_sof(const uint8_t *p, size_t n, int *sof, int *precision) {
  size_t i = 2;
  *sof = -1;
  *precision = 0;
  if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return;
  while (i + 1 < n) {
    uint8_t m;
    size_t len;
    if (p[i] != 0xFF) { /* junk between segments; libjpeg skips it too (with a warning) */
      i++;
      continue;
    }
    m = p[i + 1];
    if (m == 0xFF) {
      i++;
      continue;
    }
    i += 2;
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue; /* no length field */
    if (m == 0xD9 || m == 0xDA) return;                                /* EOI/SOS before any SOF */
    if (i + 2 > n) return;
    len = ((size_t)p[i] << 8) | p[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (i + 2 < n) {
        *sof = m - 0xC0;
        *precision = p[i + 2];
      }
      return;
    }
    if (len < 2) return;
    i += len;
  }
}

static unsigned rd16(const uint8_t *p, int le) { return le ? (unsigned)(p[0] | p[1] << 8) : (unsigned)(p[0] << 8 | p[1]); }

static uint32_t rd32(const uint8_t *p, int le) {
  return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
            : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Orientation tag (0x0112) of IFD0 in an APP1 "Exif" payload; 0 when absent or malformed. */
int markers_exif_orientation(const uint8_t *p, size_t n) {
  int le;
  size_t ifd, count;
  if (n < 6 + 8 || memcmp(p, "Exif\0\0", 6) != 0) return 0;
  p += 6;
  n -= 6;
  if (p[0] == 'I' && p[1] == 'I') le = 1;
  else if (p[0] == 'M' && p[1] == 'M') le = 0;
  else return 0;
  if (rd16(p + 2, le) != 42) return 0;
  ifd = rd32(p + 4, le);
  if (ifd < 8 || ifd + 2 > n) return 0;
  count = rd16(p + ifd, le);
  for (size_t i = 0; i < count; i++) {
    size_t e = ifd + 2 + 12 * i;
    if (e + 12 > n) break;
    if (rd16(p + e, le) == 0x0112) {
      unsigned v;
      if (rd16(p + e + 2, le) != 3 /* SHORT */) return 0;
      v = rd16(p + e + 8, le);
      return (v >= 1 && v <= 8) ? (int)v : 0;
    }
  }
  return 0;
}

/* Whether data[0:len) holds an EOI marker (FF D9). Searched from the end: what follows EOI
 * (trailers, an appended gain map) is short, and a truncated file is read once here. Entropy-coded
 * data cannot hold FF D9 (FF is stuffed as FF 00), so after the first SOS an EOI means the file
 * was not cut. */
int markers_have_eoi(const uint8_t *data, size_t len) {
  for (size_t i = len; i >= 2; i--)
    if (data[i - 1] == 0xD9 && data[i - 2] == 0xFF) return 1;
  return 0;
}
