/*
 * Dequantization of coefficient blocks: out = saturate_int16(in * q), in SSE2 / AVX2 / AVX-512BW
 * where the CPU has them, and the stores that write batch windows. Pure C, no libjpeg.
 */
#include "dequant.h"

#include <string.h>

/* out = saturate_int16(in * q) for n blocks; returns whether anything was clamped.
 *
 * This pass runs over every coefficient of every image, so it is vectorised by hand: baseline
 * x86-64 (SSE2) has no 32-bit multiply or min/max, and gcc's autovectorised int32 version costs
 * a third of the decode. In 16-bit lanes: mullo/mulhi give the low and high halves of the 32-bit
 * product, a signed-saturating pack clamps it, and the product fitted in int16 exactly when the
 * high half is the sign extension of the low half. Valid for tables with entries <= 32767
 * (every 8-bit table; 16-bit DQT entries above that take the scalar path). */
static int dequantize_scalar(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks) {
  int32_t clipped = 0;
  for (size_t b = 0; b < nblocks; b++, in += 64, out += 64) {
    for (int k = 0; k < 64; k++) {
      int32_t v = (int32_t)in[k] * (int32_t)q[k];
      int32_t s = v < -32768 ? -32768 : (v > 32767 ? 32767 : v);
      clipped |= v ^ s;
      out[k] = (int16_t)s;
    }
  }
  return clipped != 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SIMD_DEQUANT 1

/* stream != 0 (a compile-time constant at each call): non-temporal stores, out 16-byte aligned. */
static inline int dequantize_sse2_to(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks, int stream) {
  __m128i qv[8], acc = _mm_setzero_si128();
  for (int i = 0; i < 8; i++) qv[i] = _mm_loadu_si128((const __m128i *)(q + 8 * i));
  for (size_t b = 0; b < nblocks; b++, in += 64, out += 64) {
    for (int i = 0; i < 8; i++) {
      __m128i a = _mm_loadu_si128((const __m128i *)(in + 8 * i));
      __m128i lo = _mm_mullo_epi16(a, qv[i]), hi = _mm_mulhi_epi16(a, qv[i]);
      __m128i r = _mm_packs_epi32(_mm_unpacklo_epi16(lo, hi), _mm_unpackhi_epi16(lo, hi));
      acc = _mm_or_si128(acc, _mm_xor_si128(hi, _mm_srai_epi16(lo, 15)));
      if (stream) _mm_stream_si128((__m128i *)(out + 8 * i), r);
      else _mm_storeu_si128((__m128i *)(out + 8 * i), r);
    }
  }
  return _mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) != 0xFFFF;
}

static int dequantize_sse2(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks) {
  return dequantize_sse2_to(in, out, q, nblocks, 0);
}

__attribute__((target("avx2"))) static int dequantize_avx2(const int16_t *in, int16_t *out, const uint16_t *q,
                                                            size_t nblocks) {
  __m256i qv[4], acc = _mm256_setzero_si256();
  for (int i = 0; i < 4; i++) qv[i] = _mm256_loadu_si256((const __m256i *)(q + 16 * i));
  for (size_t b = 0; b < nblocks; b++, in += 64, out += 64) {
    for (int i = 0; i < 4; i++) {
      __m256i a = _mm256_loadu_si256((const __m256i *)(in + 16 * i));
      __m256i lo = _mm256_mullo_epi16(a, qv[i]), hi = _mm256_mulhi_epi16(a, qv[i]);
      /* unpack/pack work within 128-bit lanes, so the element order comes back unchanged */
      __m256i r = _mm256_packs_epi32(_mm256_unpacklo_epi16(lo, hi), _mm256_unpackhi_epi16(lo, hi));
      acc = _mm256_or_si256(acc, _mm256_xor_si256(hi, _mm256_srai_epi16(lo, 15)));
      _mm256_storeu_si256((__m256i *)(out + 16 * i), r);
    }
  }
  return !_mm256_testz_si256(acc, acc);
}

__attribute__((target("avx512bw"))) static int dequantize_avx512(const int16_t *in, int16_t *out, const uint16_t *q,
                                                                  size_t nblocks) {
  __m512i q0 = _mm512_loadu_si512((const void *)q), q1 = _mm512_loadu_si512((const void *)(q + 32));
  __m512i acc = _mm512_setzero_si512();
  for (size_t b = 0; b < nblocks; b++, in += 64, out += 64) {
    for (int i = 0; i < 2; i++) {
      __m512i qv = i ? q1 : q0;
      __m512i a = _mm512_loadu_si512((const void *)(in + 32 * i));
      __m512i lo = _mm512_mullo_epi16(a, qv), hi = _mm512_mulhi_epi16(a, qv);
      __m512i r = _mm512_packs_epi32(_mm512_unpacklo_epi16(lo, hi), _mm512_unpackhi_epi16(lo, hi));
      acc = _mm512_or_si512(acc, _mm512_xor_si512(hi, _mm512_srai_epi16(lo, 15)));
      _mm512_storeu_si512((void *)(out + 32 * i), r);
    }
  }
  return _mm512_test_epi16_mask(acc, acc) != 0;
}

/* Writing a batch window: the batch (tens of MB) is not read again on this core, so non-temporal
 * stores send it to memory without first reading each line in (half the memory traffic). */
static int dequantize_nt(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks) {
  return dequantize_sse2_to(in, out, q, nblocks, 1);
}

static void zero_nt(int16_t *out, size_t nblocks) {
  __m128i z = _mm_setzero_si128();
  for (size_t i = 0; i < nblocks * 8; i++) _mm_stream_si128((__m128i *)out + i, z);
}
#endif

void zero_out(int16_t *out, size_t nblocks) {
#ifdef HAVE_SIMD_DEQUANT
  if (((uintptr_t)out & 15) == 0) {
    zero_nt(out, nblocks);
    return;
  }
#endif
  memset(out, 0, nblocks * 64 * sizeof(int16_t));
}

int dequantize(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks) {
#ifdef HAVE_SIMD_DEQUANT
  static int cached = -1; /* 0 SSE2, 1 AVX2, 2 AVX-512BW: every thread computes the same, relaxed atomics */
  int small = 1, level;
  for (int k = 0; k < 64; k++) small &= q[k] <= 32767;
  if (small) {
    level = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (level < 0) {
      level = __builtin_cpu_supports("avx512bw") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
      __atomic_store_n(&cached, level, __ATOMIC_RELAXED);
    }
    if (level == 2) return dequantize_avx512(in, out, q, nblocks);
    if (level == 1) return dequantize_avx2(in, out, q, nblocks);
    return dequantize_sse2(in, out, q, nblocks);
  }
#endif
  return dequantize_scalar(in, out, q, nblocks);
}

int dequantize_out(const int16_t *in, int16_t *out, const uint16_t *q, size_t nblocks) {
#ifdef HAVE_SIMD_DEQUANT
  int small = 1;
  for (int k = 0; k < 64; k++) small &= q[k] <= 32767;
  if (small && ((uintptr_t)out & 15) == 0) return dequantize_nt(in, out, q, nblocks);
#endif
  return dequantize(in, out, q, nblocks);
}


void dequantize_fence(void) {
#ifdef HAVE_SIMD_DEQUANT
  _mm_sfence();
#endif
}
