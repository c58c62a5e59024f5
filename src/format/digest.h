// Checksums and content digests.
//
// checksum(): XXH3-64 over bytes; protects each frame of a checkpoint against corruption in transit
// or at rest.
//
// Content digest: the acceptance predicate a receiver checks before it commits a version. It is an
// additive (multiset) hash: digest(tensor) = sum over elements i of H(tensor, i, bits_i) mod 2^64. Its
// value depends only on the contents, yet it can be updated in O(changes) when elements change:
//   digest' = digest - H(t, i, old) + H(t, i, new)   for each changed i.
// So neither the root nor a receiver has to re-read a whole model per step; a full recomputation is
// the same function (used for the first version and for optional full verification).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sparrow::format {

uint64_t checksum(const void* data, size_t len, uint64_t seed = 0);

inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// H(tensor, index, bits) = fmix64(((index ^ tensor << 40) * K1) ^ (bits * K2)), with odd K1, K2: one
// 64-bit finaliser per element, and bijective in `bits` for a fixed (tensor, index) since every step is.
constexpr uint64_t kHashK1 = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kHashK2 = 0xD6E8FEB86659FD93ULL;
inline uint64_t position_key(uint32_t tensor, uint64_t index) { return (index ^ (uint64_t(tensor) << 40)) * kHashK1; }
inline uint64_t element_hash_keyed(uint64_t key, uint64_t bits) { return fmix64(key ^ (bits * kHashK2)); }
inline uint64_t element_hash(uint32_t tensor, uint64_t index, uint64_t bits) {
  return element_hash_keyed(position_key(tensor, index), bits);
}
// The digest change when one element goes from `old_bits` to `new_bits`.
inline uint64_t element_hash_delta(uint32_t tensor, uint64_t index, uint64_t old_bits, uint64_t new_bits) {
  uint64_t key = position_key(tensor, index);
  return element_hash_keyed(key, new_bits) - element_hash_keyed(key, old_bits);
}

// Loads one element (1, 2, 4 or 8 bytes, little-endian) zero-extended to 64 bits.
inline uint64_t load_elem(const uint8_t* p, uint32_t elem_size) {
  switch (elem_size) {
    case 1: return p[0];
    case 2: { uint16_t v; __builtin_memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; __builtin_memcpy(&v, p, 4); return v; }
    default: { uint64_t v; __builtin_memcpy(&v, p, 8); return v; }
  }
}
inline void store_elem(uint8_t* p, uint32_t elem_size, uint64_t v) { __builtin_memcpy(p, &v, elem_size); }

// Sum of H over elements [first, first+count) of a tensor; `data` points at element `first`.
uint64_t digest_range(uint32_t tensor, const void* data, uint64_t first, uint64_t count, uint32_t elem_size);
// The portable implementation (digest_range uses AVX2 where the CPU has it; the results are equal).
uint64_t digest_range_scalar(uint32_t tensor, const void* data, uint64_t first, uint64_t count, uint32_t elem_size);
// The AVX2 implementation behind digest_range (index + count < 2^40; the CPU must have AVX2).
uint64_t digest_range_avx2(uint32_t tensor, const uint8_t* p, uint64_t first, uint64_t count, uint32_t elem_size);
// The digest change of k changes of a tensor: the sum over j < k of element_hash_delta(tensor,
// first + pos[j], old_j, new_j), where old_j and new_j are the elements at oldv and newv + j *
// elem_size. What a chunk's changes do to its tensor's digest (the encoder and apply both need it).
// Uses AVX2 where the CPU has it.
uint64_t digest_deltas(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                       const uint8_t* oldv, const uint8_t* newv);
// The portable implementation (equal results).
uint64_t digest_deltas_scalar(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                              const uint8_t* oldv, const uint8_t* newv);
// The AVX2 implementation (first + 2^32 <= 2^40; the CPU must have AVX2).
uint64_t digest_deltas_avx2(uint32_t tensor, uint64_t first, const uint32_t* pos, size_t k, uint32_t elem_size,
                            const uint8_t* oldv, const uint8_t* newv);
// Digest of a whole tensor, computed on `threads` threads.
uint64_t digest_tensor(uint32_t tensor, const void* data, uint64_t count, uint32_t elem_size, int threads);

}  // namespace sparrow::format
