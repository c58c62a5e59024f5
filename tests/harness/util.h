// Shared test helpers.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace sparrow::test {

inline uint64_t rng_next(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(rng_next(seed));
  return v;
}

// Sorted distinct positions in [0, n), each present with probability p.
inline std::vector<uint32_t> random_positions(uint32_t n, double p, uint64_t seed) {
  std::vector<uint32_t> pos;
  for (uint32_t i = 0; i < n; ++i)
    if (double(rng_next(seed) >> 11) * 0x1.0p-53 < p) pos.push_back(i);
  return pos;
}

}  // namespace sparrow::test
