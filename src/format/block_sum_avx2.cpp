// The AVX2 path of block_sum (compiled with -mavx2; called only where the CPU has it).
#include <immintrin.h>

#include "format/block_sum.h"

namespace sparrow::format {

namespace {

inline uint32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return uint32_t(_mm_cvtsi128_si32(s));
}

}  // namespace

uint64_t block_sum_avx2(const uint8_t* p, size_t bytes) {
  using namespace block_sum_detail;
  constexpr size_t kWindowBytes = 2 * kWindowWords;
  const int16_t* wa = weights_a();
  const int16_t* wb = weights_b();
  uint32_t ha = 0, hb = 0;
  size_t off = 0;
  uint64_t w = 0;
  for (; off + kWindowBytes <= bytes; off += kWindowBytes, ++w) {
    __m256i aa = _mm256_setzero_si256(), ab = _mm256_setzero_si256();
    for (size_t i = 0; i < kWindowBytes; i += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + off + i));
      aa = _mm256_add_epi32(aa, _mm256_madd_epi16(x, _mm256_load_si256(reinterpret_cast<const __m256i*>(wa + i / 2))));
      ab = _mm256_add_epi32(ab, _mm256_madd_epi16(x, _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + i / 2))));
    }
    ha += key_a(w) * hsum(aa);
    hb += key_b(w) * hsum(ab);
  }
  if (off < bytes) {  // the last, partial window
    uint32_t sa = 0, sb = 0;
    window_sums(p + off, bytes - off, &sa, &sb);
    ha += key_a(w) * sa;
    hb += key_b(w) * sb;
  }
  return (uint64_t(ha) << 32) | hb;
}

}  // namespace sparrow::format
