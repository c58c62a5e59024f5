// AVX2 extraction: 256 bytes of each array per step; a step with no difference costs 16 loads, 8
// xors and a test. Lines kPrefetchAhead bytes ahead are requested explicitly: with two streams read
// and one written back the hardware prefetchers alone left this loop at 0.64-0.8x of the single-core
// read bandwidth (docs/codec.md).
#include <immintrin.h>

#include "kernels/cpu/extract.h"

namespace sparrow::kernels::cpu {

namespace {
// Bit j set: element j of the two vectors' elements (c0 then c1) differs.
inline uint64_t pair_mask(__m256i c0, __m256i s0, __m256i c1, __m256i s1, uint32_t es) {
  switch (es) {
    case 1:
      return uint64_t(uint32_t(~_mm256_movemask_epi8(_mm256_cmpeq_epi8(c0, s0)))) |
             uint64_t(uint32_t(~_mm256_movemask_epi8(_mm256_cmpeq_epi8(c1, s1)))) << 32;
    case 2: {
      // Narrow the two 16-bit compare results to bytes (packs works per 128-bit lane: put the
      // lanes back in element order), one mask bit per element.
      __m256i p = _mm256_packs_epi16(_mm256_cmpeq_epi16(c0, s0), _mm256_cmpeq_epi16(c1, s1));
      return uint32_t(~_mm256_movemask_epi8(_mm256_permute4x64_epi64(p, 0xD8)));
    }
    case 4:
      return (uint32_t(~_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c0, s0)))) & 0xffu) |
             (uint32_t(~_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c1, s1)))) & 0xffu) << 8;
    default:
      return (uint32_t(~_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c0, s0)))) & 0xfu) |
             (uint32_t(~_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c1, s1)))) & 0xfu) << 4;
  }
}
inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
}  // namespace

size_t extract_avx2(const uint8_t* cur, uint8_t* shadow, uint32_t n, uint32_t s, uint32_t* pos, uint8_t* oldv,
                    uint8_t* newv) {
  const uint32_t per_pair = 64 / s;  // elements in two vectors
  const uint32_t per_step = 4 * per_pair;
  size_t k = 0;
  uint32_t i = 0;
  for (; i + per_step <= n; i += per_step) {
    const uint8_t* c = cur + size_t(i) * s;
    const uint8_t* sh = shadow + size_t(i) * s;
    prefetch_step(c);
    prefetch_step(sh);
    __m256i cv[8], sv[8];
    for (int v = 0; v < 8; ++v) {
      cv[v] = load(c + 32 * v);
      sv[v] = load(sh + 32 * v);
    }
    __m256i any = _mm256_setzero_si256();
    for (int v = 0; v < 8; ++v) any = _mm256_or_si256(any, _mm256_xor_si256(cv[v], sv[v]));
    if (_mm256_testz_si256(any, any)) continue;
    for (int p = 0; p < 4; ++p)
      k = record_mask(pair_mask(cv[2 * p], sv[2 * p], cv[2 * p + 1], sv[2 * p + 1], s), i + p * per_pair, cur, shadow, s,
                      pos, oldv, newv, k);
  }
  return extract_tail(cur, shadow, i, n, s, pos, oldv, newv, k);
}

}  // namespace sparrow::kernels::cpu
