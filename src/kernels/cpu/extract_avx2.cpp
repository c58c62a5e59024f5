// AVX2 extraction: 256 bytes per step; a step with no difference costs 8 loads, 4 xors and a test.
#include <immintrin.h>

#include "kernels/cpu/extract.h"

namespace sparrow::kernels::cpu {

namespace {
inline uint64_t diff_mask(__m256i c, __m256i s, uint32_t es) {
  switch (es) {
    case 1: return uint32_t(~_mm256_movemask_epi8(_mm256_cmpeq_epi8(c, s)));
    case 2: return _pext_u32(uint32_t(~_mm256_movemask_epi8(_mm256_cmpeq_epi16(c, s))), 0x55555555u);
    case 4: return uint32_t(~_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, s)))) & 0xffu;
    default: return uint32_t(~_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c, s)))) & 0xfu;
  }
}
}  // namespace

size_t extract_avx2(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* oldv,
                    uint8_t* newv) {
  const uint32_t per_vec = 32 / s;
  const uint32_t per_step = 4 * per_vec;
  size_t k = 0;
  uint32_t i = 0;
  for (; i + per_step <= n; i += per_step) {
    const uint8_t* c = cur + size_t(i) * s;
    const uint8_t* sh = shadow + size_t(i) * s;
    __m256i c0 = _mm256_loadu_si256((const __m256i*)c), s0 = _mm256_loadu_si256((const __m256i*)sh);
    __m256i c1 = _mm256_loadu_si256((const __m256i*)(c + 32)), s1 = _mm256_loadu_si256((const __m256i*)(sh + 32));
    __m256i c2 = _mm256_loadu_si256((const __m256i*)(c + 64)), s2 = _mm256_loadu_si256((const __m256i*)(sh + 64));
    __m256i c3 = _mm256_loadu_si256((const __m256i*)(c + 96)), s3 = _mm256_loadu_si256((const __m256i*)(sh + 96));
    __m256i any = _mm256_or_si256(_mm256_or_si256(_mm256_xor_si256(c0, s0), _mm256_xor_si256(c1, s1)),
                                  _mm256_or_si256(_mm256_xor_si256(c2, s2), _mm256_xor_si256(c3, s3)));
    if (_mm256_testz_si256(any, any)) continue;
    uint64_t m0 = diff_mask(c0, s0, s), m1 = diff_mask(c1, s1, s), m2 = diff_mask(c2, s2, s), m3 = diff_mask(c3, s3, s);
    k = record_mask(m0, i, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m1, i + per_vec, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m2, i + 2 * per_vec, cur, shadow, s, pos, oldv, newv, k);
    k = record_mask(m3, i + 3 * per_vec, cur, shadow, s, pos, oldv, newv, k);
  }
  return extract_tail(cur, shadow, i, n, s, pos, oldv, newv, k);
}

}  // namespace sparrow::kernels::cpu
