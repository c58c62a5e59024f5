// Block sums: the receiver-local checksum that base verification keeps for each block of a tensor.
//
// A receiver checks before every delta that its buffers still hold the version it committed (a user
// who wrote to them is refused, not told success with wrong bits). It does that by summing every
// block of its buffers and comparing with the sums recorded at the last commit. Those sums must then
// be brought up to date for the blocks the delta wrote. A hash like XXH3 can only be recomputed over
// the whole block (a pass over every changed block, i.e. nearly the whole model at 1% density); this
// sum is linear, so a changed element moves it by an amount computed from its old and new bits alone,
// and the commit costs O(changes).
//
// Definition. The block's bytes are read as little-endian 16-bit words x_q, signed (an odd last byte
// is a word with a zero high byte). Words are grouped in windows of 512 (1 KiB). Two independent
// 32-bit lanes L in {a, b}:
//   sum_L = sum over windows w of K_L(w) * (sum over j < 512 of c_L[j] * x_{512w + j})   (mod 2^32)
// with fixed odd weights c_L[j] (|c| < 2^15) and odd window keys K_L(w). The 64-bit block sum is
// (sum_a << 32) | sum_b. Because every weight and key is odd and |c * delta| < 2^31, any change of a
// single word changes both lanes: one flipped bit anywhere is always found; a random multi-word
// scribble escapes with probability about 2^-64. It is a check against accidents, not an adversary.
// The word layout and weights are local to one receiver (never on the wire).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

// Device code (src/kernels/cuda) computes the same sums: the window keys are usable there too.
#if defined(__CUDACC__)
#define SPARROW_BLOCK_SUM_HD __host__ __device__
#else
#define SPARROW_BLOCK_SUM_HD
#endif

namespace sparrow::format {

// Sum of `bytes` bytes at `p` (a whole block; positions count from p). Uses AVX2 where the CPU has it.
uint64_t block_sum(const void* p, size_t bytes);
// The portable implementation (equal results).
uint64_t block_sum_scalar(const void* p, size_t bytes);
// The AVX2 implementation (the CPU must have AVX2).
uint64_t block_sum_avx2(const uint8_t* p, size_t bytes);

// The change of a block's sum when element `index` (counted from the block's first element) of size
// `elem_size` (1, 2, 4 or 8) goes from `old_bits` to `new_bits`. Add changes with block_sum_add.
uint64_t block_sum_delta(uint64_t index, uint32_t elem_size, uint64_t old_bits, uint64_t new_bits);
// The change of a block's sum when k of its elements change: block_sum_add over block_sum_delta of
// each (positions pos[j], counted from the block's first element; the old and new bits at oldv and
// newv + j * elem_size). For 2-byte elements the window keys multiply once per window touched.
uint64_t block_sum_deltas(const uint32_t* pos, size_t k, uint32_t elem_size, const uint8_t* oldv, const uint8_t* newv);
// Lane-wise addition mod 2^32 of two sums or changes.
inline uint64_t block_sum_add(uint64_t x, uint64_t y) {
  const uint32_t a = uint32_t(x >> 32) + uint32_t(y >> 32), b = uint32_t(x) + uint32_t(y);
  return (uint64_t(a) << 32) | b;
}

namespace block_sum_detail {
constexpr unsigned kWindowWords = 512;
// Weights of the two lanes for the words of a window: odd, in [-16383, 16383], from a fixed LCG, so
// the same everywhere (host and device).
constexpr uint64_t kSeedA = 0x5350524f57ULL, kSeedB = 0x424c4f434bULL;
constexpr std::array<int16_t, kWindowWords> make_weights(uint64_t seed) {
  std::array<int16_t, kWindowWords> w{};
  uint64_t s = seed;
  for (auto& v : w) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v = int16_t((int32_t((s >> 33) & 0x7fff) - 0x4000) | 1);
  }
  return w;
}
const int16_t* weights_a();
const int16_t* weights_b();
// The inner sums of one window of at most 2 * kWindowWords bytes at p (its first word is word 0).
void window_sums(const uint8_t* p, size_t bytes, uint32_t* sa, uint32_t* sb);
// Odd keys of window w.
SPARROW_BLOCK_SUM_HD inline uint32_t key_a(uint64_t w) { return uint32_t(((w + 1) * 0x9E3779B97F4A7C15ULL) >> 32) | 1u; }
SPARROW_BLOCK_SUM_HD inline uint32_t key_b(uint64_t w) { return uint32_t(((w + 1) * 0xC2B2AE3D27D4EB4FULL) >> 29) | 1u; }
}  // namespace block_sum_detail

}  // namespace sparrow::format
