#include "format/digest.h"

#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "core/parallel.h"

namespace sparrow::format {

uint64_t checksum(const void* data, size_t len, uint64_t seed) { return XXH3_64bits_withSeed(data, len, seed); }

namespace {
template <typename T>
inline uint64_t at(const uint8_t* p, uint64_t i) {  // data may be unaligned (e.g. inside a checkpoint)
  T v;
  memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
uint64_t digest_typed(uint32_t tensor, const uint8_t* p, uint64_t first, uint64_t count) {
  // Four independent accumulators let the multiplies of neighbouring elements overlap.
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  uint64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    a0 += element_hash(tensor, first + i, at<T>(p, i));
    a1 += element_hash(tensor, first + i + 1, at<T>(p, i + 1));
    a2 += element_hash(tensor, first + i + 2, at<T>(p, i + 2));
    a3 += element_hash(tensor, first + i + 3, at<T>(p, i + 3));
  }
  for (; i < count; ++i) a0 += element_hash(tensor, first + i, at<T>(p, i));
  return a0 + a1 + a2 + a3;
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace

uint64_t digest_range_scalar(uint32_t tensor, const void* data, uint64_t first, uint64_t count, uint32_t elem_size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (elem_size) {
    case 1: return digest_typed<uint8_t>(tensor, p, first, count);
    case 2: return digest_typed<uint16_t>(tensor, p, first, count);
    case 4: return digest_typed<uint32_t>(tensor, p, first, count);
    default: return digest_typed<uint64_t>(tensor, p, first, count);
  }
}

uint64_t digest_range(uint32_t tensor, const void* data, uint64_t first, uint64_t count, uint32_t elem_size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (count >= 16 && first + count < (uint64_t(1) << 40) && have_avx2()) {
    switch (elem_size) {
      case 1: case 2: case 4: case 8: return digest_range_avx2(tensor, p, first, count, elem_size);
    }
  }
  switch (elem_size) {
    case 1: return digest_typed<uint8_t>(tensor, p, first, count);
    case 2: return digest_typed<uint16_t>(tensor, p, first, count);
    case 4: return digest_typed<uint32_t>(tensor, p, first, count);
    default: return digest_typed<uint64_t>(tensor, p, first, count);
  }
}

namespace {
template <typename T>
uint64_t deltas_typed(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, const uint8_t* oldv,
                      const uint8_t* newv) {
  uint64_t d = 0;
  for (size_t j = 0; j < k; ++j) d += element_hash_delta(tensor, first + pos[j], at<T>(oldv, j), at<T>(newv, j));
  return d;
}
}  // namespace

uint64_t digest_deltas_scalar(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                              const uint8_t* oldv, const uint8_t* newv) {
  switch (elem_size) {
    case 1: return deltas_typed<uint8_t>(tensor, first, pos, k, oldv, newv);
    case 2: return deltas_typed<uint16_t>(tensor, first, pos, k, oldv, newv);
    case 4: return deltas_typed<uint32_t>(tensor, first, pos, k, oldv, newv);
    default: return deltas_typed<uint64_t>(tensor, first, pos, k, oldv, newv);
  }
}

uint64_t digest_deltas(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                       const uint8_t* oldv, const uint8_t* newv) {
  // (Positions are 32-bit: first + pos < 2^40 then holds for all of them, as the AVX2 keys need.)
  if (k >= 8 && first + (uint64_t(1) << 32) <= (uint64_t(1) << 40) && have_avx2()) {
    switch (elem_size) {
      case 1: case 2: case 4: case 8: return digest_deltas_avx2(tensor, first, pos, k, elem_size, oldv, newv);
    }
  }
  return digest_deltas_scalar(tensor, first, pos, k, elem_size, oldv, newv);
}

uint64_t digest_tensor(uint32_t tensor, const void* data, uint64_t count, uint32_t elem_size, int threads) {
  constexpr uint64_t kBlock = 1 << 20;
  uint64_t nblocks = (count + kBlock - 1) / kBlock;
  if (nblocks <= 1) return digest_range(tensor, data, 0, count, elem_size);
  std::vector<uint64_t> part(nblocks);
  const uint8_t* base = static_cast<const uint8_t*>(data);
  parallel_for(nblocks, threads, [&](size_t b, int) {
    uint64_t first = b * kBlock, n = std::min(kBlock, count - first);
    part[b] = digest_range(tensor, base + first * elem_size, first, n, elem_size);
  });
  uint64_t d = 0;
  for (uint64_t v : part) d += v;
  return d;
}

}  // namespace sparrow::format
