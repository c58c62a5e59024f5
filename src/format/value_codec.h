// Value codecs: how a chunk carries the new bits of its changed elements.
//
//   overwrite      : the new bits, packed little-endian. Idempotent; needs nothing from the receiver.
//   overwrite_zstd : the new bits split into byte planes (all byte 0s, then all byte 1s, ...), zstd.
//   xor_zstd       : new XOR old per element, byte planes, zstd.
//   sub_zstd       : (new - old) of the bit patterns as unsigned integers modulo 2^(8*size), zigzag
//                    coded, byte planes, zstd. A one-ulp step of a float is +-1 here, whatever the
//                    exponent, so Adam-sized updates cost a few bits.
// None of them does floating-point arithmetic: every codec reproduces the new bits exactly (NaN
// payloads, -0, denormals included). xor/sub need the old bits, which a receiver at the base version
// holds; the content digest rejects a receiver that is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace sparrow::format {

enum class ValueCodec : uint8_t { kOverwrite = 0, kOverwriteZstd = 1, kXorZstd = 2, kSubZstd = 3 };
constexpr int kNumValueCodecs = 4;
const char* value_codec_name(ValueCodec c);
inline bool value_codec_needs_old(ValueCodec c) { return c == ValueCodec::kXorZstd || c == ValueCodec::kSubZstd; }

// Appends the encoding of k values to out. old_vals may be null for codecs that do not need it.
// `scratch` is reused between calls to avoid allocation.
Status encode_values(ValueCodec c, const uint8_t* old_vals, const uint8_t* new_vals, size_t k, uint32_t elem_size,
                     int zstd_level, std::vector<uint8_t>& scratch, std::vector<uint8_t>& out);

// Decodes k values into new_vals (k * elem_size bytes). old_vals: the receiver's current bits at the
// same positions (needed by xor/sub). The input must be exactly one well-formed encoding.
Status decode_values(ValueCodec c, std::span<const uint8_t> in, const uint8_t* old_vals, size_t k,
                     uint32_t elem_size, std::vector<uint8_t>& scratch, uint8_t* new_vals);

}  // namespace sparrow::format
