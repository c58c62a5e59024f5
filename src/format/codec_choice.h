// Codec choice for one chunk: which index codec and which value codec carry a chunk's changes in
// the fewest bytes. Policy of the format, used by the encoder (kernels/cpu) for every chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "format/index_codec.h"
#include "format/value_codec.h"

namespace sparrow::format {

struct IndexChoice {
  IndexCodec codec = IndexCodec::kLeb128;
  size_t bytes = 0;          // encoded size of the index with `codec`
  size_t leb128_bytes = 0;   // the same with leb128 gaps (SparrowRL's format; for the ablation figure)
  uint32_t golomb_m = 1;     // the Golomb parameter (used when codec is kGolomb)
};
// The smallest index codec for k sorted positions in a chunk of n elements; leb128 only with
// `paper_only` (SparrowRL's format).
IndexChoice choose_index(const uint32_t* pos, size_t k, uint32_t n, bool paper_only);

struct ValueChoiceOptions {
  bool paper_only = false;  // raw (overwrite) values only
  bool try_xor = true;      // also try xor_zstd
  int zstd_level = 1;
  // With more than 2x this many values, the zstd codecs are compared on the first `sample` values
  // and only the one that packs them best encodes the whole chunk (one full compression instead of
  // three); 0: always compare on everything.
  size_t sample = 1024;
  // The rate (bytes/s) at which this chunk's bytes leave for the wire; 0: judge on bytes alone.
  // Otherwise a chunk judged on a sample (see above) takes the codec with the least estimated time:
  // its bytes at this rate plus the CPU time of encoding and of decoding its values (each codec's
  // cost per value, measured once per process), raw values included. A codec that saves a few bytes but costs more CPU
  // than they take to send loses (on a fast link, raw values usually win).
  double link_Bps = 0;
  // Chunks encoded at once (the encoder's worker threads; the receiver decodes as many in parallel):
  // a chunk's CPU time holds the step back by 1/threads of itself, its bytes by all of theirs.
  int threads = 1;
};
// CPU seconds per value to encode and then decode with codec `c` (elements of `elem_size` bytes),
// measured once per process on 65,536 one-ulp changes: the CPU side of the choice by time.
double value_codec_cpu_s(ValueCodec c, uint32_t elem_size);
// Reused between calls (no allocation in steady state).
struct CodecScratch {
  std::vector<uint8_t> val, zs;
};
// Encodes k changed values (old and new, elem_size bytes each) with the smallest allowed codec into
// `best` (judged on a sample for large k, see ValueChoiceOptions::sample, and there by estimated
// time when link_Bps is set; never larger than the raw values); returns the codec. `with_old`: the old values are known (codecs relative to them allowed).
Result<ValueCodec> choose_values(const uint8_t* oldv, const uint8_t* newv, size_t k, uint32_t elem_size, bool with_old,
                                 const ValueChoiceOptions& opt, CodecScratch& s, std::vector<uint8_t>& best);
// A dense chunk's values: the raw bytes, or zstd on byte planes when `compress` and smaller.
// `*vals` points into `cur` or into s.val.
Result<ValueCodec> dense_values(const uint8_t* cur, uint32_t n, uint32_t elem_size, bool compress, int zstd_level,
                                CodecScratch& s, std::span<const uint8_t>* vals);

}  // namespace sparrow::format
