#include "format/block_sum.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "format/digest.h"

namespace sparrow::format {

namespace block_sum_detail {
namespace {

alignas(64) constexpr std::array<int16_t, kWindowWords> kA = make_weights(kSeedA);
alignas(64) constexpr std::array<int16_t, kWindowWords> kB = make_weights(kSeedB);

// Word q of a block of `bytes` bytes, signed (an odd last byte has a zero high byte).
inline int32_t word_at(const uint8_t* p, size_t bytes, size_t q) {
  uint16_t v = p[2 * q];
  if (2 * q + 1 < bytes) v = uint16_t(v | uint16_t(p[2 * q + 1]) << 8);
  return int16_t(v);
}

}  // namespace

const int16_t* weights_a() { return kA.data(); }
const int16_t* weights_b() { return kB.data(); }

void window_sums(const uint8_t* p, size_t bytes, uint32_t* sa, uint32_t* sb) {
  const size_t words = (bytes + 1) / 2;
  uint32_t a = 0, b = 0;
  for (size_t q = 0; q < words; ++q) {
    const int32_t x = word_at(p, bytes, q);
    a += uint32_t(int32_t(kA[q]) * x);
    b += uint32_t(int32_t(kB[q]) * x);
  }
  *sa = a;
  *sb = b;
}

}  // namespace block_sum_detail

namespace {

using namespace block_sum_detail;

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace

uint64_t block_sum_scalar(const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const size_t words = (bytes + 1) / 2;
  uint32_t ha = 0, hb = 0;
  for (size_t w0 = 0; w0 < words; w0 += kWindowWords) {
    uint32_t sa = 0, sb = 0;
    window_sums(p + 2 * w0, std::min<size_t>(bytes - 2 * w0, 2 * kWindowWords), &sa, &sb);
    ha += key_a(w0 / kWindowWords) * sa;
    hb += key_b(w0 / kWindowWords) * sb;
  }
  return (uint64_t(ha) << 32) | hb;
}

uint64_t block_sum(const void* p, size_t bytes) {
  if (bytes >= 2 * kWindowWords && have_avx2()) return block_sum_avx2(static_cast<const uint8_t*>(p), bytes);
  return block_sum_scalar(p, bytes);
}

namespace {

// The change of both lanes when word q's signed value changes by d.
inline uint64_t word_delta(uint64_t q, int32_t d) {
  const uint64_t w = q / kWindowWords;
  const unsigned j = unsigned(q % kWindowWords);
  const uint32_t a = key_a(w) * uint32_t(int32_t(kA[j]) * d);
  const uint32_t b = key_b(w) * uint32_t(int32_t(kB[j]) * d);
  return (uint64_t(a) << 32) | b;
}

// A byte's share of its word's signed value: the low byte counts as itself, the high one as the
// two's-complement high half.
inline int32_t byte_share(uint64_t byte_index, uint32_t b) {
  return (byte_index & 1) ? int32_t(b << 8) - (b >= 128 ? 65536 : 0) : int32_t(b);
}

}  // namespace

uint64_t block_sum_delta(uint64_t index, uint32_t elem_size, uint64_t old_bits, uint64_t new_bits) {
  if (old_bits == new_bits) return 0;
  if (elem_size == 1)
    return word_delta(index / 2, byte_share(index, uint32_t(new_bits & 0xff)) - byte_share(index, uint32_t(old_bits & 0xff)));
  const uint32_t per = elem_size / 2;
  uint64_t d = 0;
  for (uint32_t k = 0; k < per; ++k) {
    const int32_t n = int16_t(uint16_t(new_bits >> (16 * k))), o = int16_t(uint16_t(old_bits >> (16 * k)));
    if (n != o) d = block_sum_add(d, word_delta(index * per + k, n - o));
  }
  return d;
}

uint64_t block_sum_deltas(const uint32_t* pos, size_t k, uint32_t elem_size, const uint8_t* oldv, const uint8_t* newv) {
  if (elem_size != 2) {
    uint64_t d = 0;
    for (size_t j = 0; j < k; ++j)
      d = block_sum_add(d, block_sum_delta(pos[j], elem_size, load_elem(oldv + j * elem_size, elem_size),
                                           load_elem(newv + j * elem_size, elem_size)));
    return d;
  }
  // One word per element: each change adds K(w) * c[j] * (new - old) to both lanes, and mod 2^32 the
  // window's key can multiply the sum of its changes' c[j] * (new - old) once.
  uint32_t sa = 0, sb = 0, wa = 0, wb = 0;
  uint64_t w = k ? pos[0] / kWindowWords : 0;
  for (size_t j = 0; j < k; ++j) {
    const uint64_t q = pos[j];
    if (q / kWindowWords != w) {
      sa += key_a(w) * wa;
      sb += key_b(w) * wb;
      wa = wb = 0;
      w = q / kWindowWords;
    }
    int16_t o, n;
    memcpy(&o, oldv + 2 * j, 2);
    memcpy(&n, newv + 2 * j, 2);
    const int32_t d = int32_t(n) - int32_t(o);
    const unsigned i = unsigned(q % kWindowWords);
    wa += uint32_t(int32_t(kA[i]) * d);
    wb += uint32_t(int32_t(kB[i]) * d);
  }
  sa += key_a(w) * wa;
  sb += key_b(w) * wb;
  return (uint64_t(sa) << 32) | sb;
}

}  // namespace sparrow::format
