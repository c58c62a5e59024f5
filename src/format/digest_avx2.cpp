// The AVX2 content digest (compiled with -mavx2; called only where the CPU has AVX2).
#include <immintrin.h>

#include <cstring>

#include "format/digest.h"

namespace sparrow::format {
namespace {

// AVX2: four elements per vector. For index < 2^40, (index XOR tensor << 40) == index + (tensor << 40),
// so the position keys are an arithmetic progression (one add per element); the 64-bit multiplies
// of fmix64 are built from 32x32->64 ones (AVX2 has no 64-bit low multiply). Bit-identical to the
// scalar digest (a test compares them).
inline __m256i mul64(__m256i a, __m256i b_lo, __m256i b_hi) {
  __m256i lo = _mm256_mul_epu32(a, b_lo);
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

template <uint32_t ES>
inline __m256i load4(const uint8_t* p) {
  if constexpr (ES == 1) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(v));
  } else if constexpr (ES == 2) {
    return _mm256_cvtepu16_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (ES == 4) {
    return _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
}

// The constants of H, each split into 32-bit halves for mul64.
struct HashConsts {
  __m256i k1l, k1h, k2l, k2h, c1l, c1h, c2l, c2h;
  HashConsts() {
    split(kHashK1, &k1l, &k1h);
    split(kHashK2, &k2l, &k2h);
    split(0xff51afd7ed558ccdULL, &c1l, &c1h);
    split(0xc4ceb9fe1a85ec53ULL, &c2l, &c2h);
  }
  static void split(uint64_t k, __m256i* lo, __m256i* hi) {
    *lo = _mm256_set1_epi64x(int64_t(k & 0xffffffffu));
    *hi = _mm256_set1_epi64x(int64_t(k >> 32));
  }
};

// H of four elements with position keys `key` and bits `v` (element_hash_keyed, lane by lane).
template <uint32_t ES>
inline __m256i hash4(const HashConsts& c, __m256i key, __m256i v) {
  __m256i vk = ES == 8 ? mul64(v, c.k2l, c.k2h)
                       : _mm256_add_epi64(_mm256_mul_epu32(v, c.k2l), _mm256_slli_epi64(_mm256_mul_epu32(v, c.k2h), 32));
  __m256i x = _mm256_xor_si256(key, vk);
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
  x = mul64(x, c.c1l, c.c1h);
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
  x = mul64(x, c.c2l, c.c2h);
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 33));
}

inline uint64_t sum_lanes(__m256i acc) {
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

template <uint32_t ES>
uint64_t digest_avx2(uint32_t tensor, const uint8_t* p, uint64_t first, uint64_t count) {
  const HashConsts c;
  const uint64_t key0 = position_key(tensor, first);
  __m256i key = _mm256_set_epi64x(int64_t(key0 + 3 * kHashK1), int64_t(key0 + 2 * kHashK1), int64_t(key0 + kHashK1),
                                  int64_t(key0));
  const __m256i step = _mm256_set1_epi64x(int64_t(4 * kHashK1));
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  uint64_t i = 0;
  auto one = [&](const uint8_t* q) {
    __m256i x = hash4<ES>(c, key, load4<ES>(q));
    key = _mm256_add_epi64(key, step);
    return x;
  };
  for (; i + 8 <= count; i += 8) {
    acc0 = _mm256_add_epi64(acc0, one(p + i * ES));
    acc1 = _mm256_add_epi64(acc1, one(p + (i + 4) * ES));
  }
  for (; i + 4 <= count; i += 4) acc0 = _mm256_add_epi64(acc0, one(p + i * ES));
  uint64_t d = sum_lanes(_mm256_add_epi64(acc0, acc1));
  for (; i < count; ++i) d += element_hash(tensor, first + i, load_elem(p + i * ES, ES));
  return d;
}

// Four changes at a time: the position keys (index + tensor << 40) * K1 from the positions, then H of
// the new bits minus H of the old ones.
template <uint32_t ES>
uint64_t deltas_avx2(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, const uint8_t* oldv,
                     const uint8_t* newv) {
  const HashConsts c;
  const __m256i base = _mm256_set1_epi64x(int64_t(first + (uint64_t(tensor) << 40)));
  __m256i acc = _mm256_setzero_si256();
  size_t j = 0;
  for (; j + 4 <= k; j += 4) {
    const __m256i idx = _mm256_add_epi64(base, _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pos + j))));
    const __m256i key = mul64(idx, c.k1l, c.k1h);
    acc = _mm256_add_epi64(acc, _mm256_sub_epi64(hash4<ES>(c, key, load4<ES>(newv + j * ES)),
                                                 hash4<ES>(c, key, load4<ES>(oldv + j * ES))));
  }
  uint64_t d = sum_lanes(acc);
  for (; j < k; ++j)
    d += element_hash_delta(tensor, first + pos[j], load_elem(oldv + j * ES, ES), load_elem(newv + j * ES, ES));
  return d;
}

}  // namespace

uint64_t digest_range_avx2(uint32_t tensor, const uint8_t* p, uint64_t first, uint64_t count, uint32_t elem_size) {
  switch (elem_size) {
    case 1: return digest_avx2<1>(tensor, p, first, count);
    case 2: return digest_avx2<2>(tensor, p, first, count);
    case 4: return digest_avx2<4>(tensor, p, first, count);
    default: return digest_avx2<8>(tensor, p, first, count);
  }
}

uint64_t digest_deltas_avx2(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                            const uint8_t* oldv, const uint8_t* newv) {
  switch (elem_size) {
    case 1: return deltas_avx2<1>(tensor, first, pos, k, oldv, newv);
    case 2: return deltas_avx2<2>(tensor, first, pos, k, oldv, newv);
    case 4: return deltas_avx2<4>(tensor, first, pos, k, oldv, newv);
    default: return deltas_avx2<8>(tensor, first, pos, k, oldv, newv);
  }
}

}  // namespace sparrow::format
