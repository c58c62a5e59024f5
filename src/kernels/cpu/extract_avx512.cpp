// AVX-512 (BW) extraction: 256 bytes of each array per step, per-element difference masks straight
// from the compare instructions; lines kPrefetchAhead bytes ahead are requested explicitly.
#include <immintrin.h>

#include "kernels/cpu/extract.h"

namespace sparrow::kernels::cpu {

namespace {
inline uint64_t diff_mask(__m512i c, __m512i s, uint32_t es) {
  switch (es) {
    case 1: return _mm512_cmpneq_epi8_mask(c, s);
    case 2: return _mm512_cmpneq_epi16_mask(c, s);
    case 4: return _mm512_cmpneq_epi32_mask(c, s);
    default: return _mm512_cmpneq_epi64_mask(c, s);
  }
}
}  // namespace

size_t extract_avx512(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* oldv,
                      uint8_t* newv) {
  const uint32_t per_vec = 64 / s;
  const uint32_t per_step = 4 * per_vec;
  size_t k = 0;
  uint32_t i = 0;
  for (; i + per_step <= n; i += per_step) {
    const uint8_t* c = cur + size_t(i) * s;
    const uint8_t* sh = shadow + size_t(i) * s;
    prefetch_step(c);
    prefetch_step(sh);
    __m512i c0 = _mm512_loadu_si512(c), s0 = _mm512_loadu_si512(sh);
    __m512i c1 = _mm512_loadu_si512(c + 64), s1 = _mm512_loadu_si512(sh + 64);
    __m512i c2 = _mm512_loadu_si512(c + 128), s2 = _mm512_loadu_si512(sh + 128);
    __m512i c3 = _mm512_loadu_si512(c + 192), s3 = _mm512_loadu_si512(sh + 192);
    __m512i any = _mm512_or_si512(_mm512_or_si512(_mm512_xor_si512(c0, s0), _mm512_xor_si512(c1, s1)),
                                  _mm512_or_si512(_mm512_xor_si512(c2, s2), _mm512_xor_si512(c3, s3)));
    if (_mm512_test_epi64_mask(any, any) == 0) continue;
    uint64_t m0 = diff_mask(c0, s0, s), m1 = diff_mask(c1, s1, s), m2 = diff_mask(c2, s2, s), m3 = diff_mask(c3, s3, s);
    k = record_mask(m0, i, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m1, i + per_vec, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m2, i + 2 * per_vec, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m3, i + 3 * per_vec, cur, shadow, s, pos, oldv, newv, k);
  }
  return extract_tail(cur, shadow, i, n, s, pos, oldv, newv, k);
}

}  // namespace sparrow::kernels::cpu
