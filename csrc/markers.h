/* JPEG marker parsing on raw bytes (see markers.c). */
#ifndef DCTNET_MARKERS_H
#define DCTNET_MARKERS_H

#include <stddef.h>
#include <stdint.h>

/* The SOF marker number (0..15, -1 when none comes before SOS/EOI) and its sample precision. */
void markers_find_sof(const uint8_t *p, size_t n, int *sof, int *precision);

/* Orientation tag (1..8) of IFD0 in an APP1 "Exif" payload; 0 when absent or malformed. */
int markers_exif_orientation(const uint8_t *p, size_t n);

/* Whether data[0:len) holds an EOI marker (FF D9) (see markers.c). */
int markers_have_eoi(const uint8_t *data, size_t len);

#endif
