// Index codecs: how a chunk says which of its elements changed.
//
// Positions are relative to the chunk, strictly increasing, and coded as gaps g0 = p0,
// gi = pi - p(i-1) - 1 (so every gap is >= 0).
//   dense  : no index; every element of the chunk is present (raw chunks, first sync).
//   leb128 : gaps as unsigned LEB128 bytes (SparrowRL's format; kept as the baseline).
//   golomb : LEB128 parameter m, then per gap q = g / m in unary (q zero bits, then a one bit) and
//            r = g % m in truncated binary, LSB-first. Near the entropy bound for random positions.
//   bitmap : one bit per element of the chunk, LSB-first. Chosen when changes are dense.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace sparrow::format {

enum class IndexCodec : uint8_t { kDense = 0, kLeb128 = 1, kGolomb = 2, kBitmap = 3 };
constexpr int kNumIndexCodecs = 4;
const char* index_codec_name(IndexCodec c);

size_t leb128_index_size(const uint32_t* pos, size_t k);
inline size_t bitmap_index_size(uint32_t n) { return (size_t(n) + 7) / 8; }
// Golomb parameter that minimises the expected size for geometric gaps of the observed mean.
uint32_t golomb_parameter(const uint32_t* pos, size_t k);
// Exact encoded size with parameter m (payload bytes including the parameter).
size_t golomb_index_size(const uint32_t* pos, size_t k, uint32_t m);

// Appends the encoding of positions pos[0..k) (all < n) to out. golomb_m is used by kGolomb only.
void encode_index(IndexCodec c, const uint32_t* pos, size_t k, uint32_t n, uint32_t golomb_m,
                  std::vector<uint8_t>& out);

// Decodes exactly k positions < n from `in` into pos (capacity k). The encoding must use all of `in`
// (trailing padding bits zero); anything else is kCorruptData.
Status decode_index(IndexCodec c, std::span<const uint8_t> in, uint32_t n, uint32_t k, uint32_t* pos);

// log2(C(n, k)): bits needed to name k of n positions (the entropy bound for one chunk).
double index_entropy_bits(uint64_t n, uint64_t k);

}  // namespace sparrow::format
