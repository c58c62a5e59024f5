#include "format/codec_choice.h"

#include <chrono>
#include <cstdint>
#include <vector>

namespace sparrow::format {

IndexChoice choose_index(const uint32_t* pos, size_t k, uint32_t n, bool paper_only) {
  IndexChoice c;
  c.leb128_bytes = c.bytes = leb128_index_size(pos, k);
  if (paper_only) return c;
  c.golomb_m = golomb_parameter(pos, k);
  if (size_t g = golomb_index_size(pos, k, c.golomb_m); g < c.bytes) {
    c.codec = IndexCodec::kGolomb;
    c.bytes = g;
  }
  if (size_t bm = bitmap_index_size(n); bm < c.bytes) {
    c.codec = IndexCodec::kBitmap;
    c.bytes = bm;
  }
  return c;
}

namespace {

// The zstd codecs allowed for these values, in the order they are tried.
std::vector<ValueCodec> zstd_candidates(bool with_old, const ValueChoiceOptions& opt) {
  std::vector<ValueCodec> v;
  for (ValueCodec c : {ValueCodec::kSubZstd, ValueCodec::kXorZstd, ValueCodec::kOverwriteZstd}) {
    if (value_codec_needs_old(c) && !with_old) continue;
    if (c == ValueCodec::kXorZstd && !opt.try_xor) continue;
    v.push_back(c);
  }
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A candidate's cost on the sample: its bytes, and (when timed) its CPU seconds to encode and decode.
struct SampleCost {
  size_t bytes = 0;
  double cpu_s = 0;
};

Result<SampleCost> cost_on_sample(ValueCodec c, const uint8_t* oldv, const uint8_t* newv, size_t n, uint32_t elem_size,
                                  int level, bool timed, CodecScratch& s) {
  s.val.clear();
  const auto t0 = std::chrono::steady_clock::now();
  SPARROW_RETURN_IF_ERROR(encode_values(c, oldv, newv, n, elem_size, level, s.zs, s.val));
  SampleCost k{s.val.size(), 0};
  if (!timed) return k;
  s.decoded.resize(n * elem_size);
  SPARROW_RETURN_IF_ERROR(decode_values(c, s.val, oldv, n, elem_size, s.zs, s.decoded.data()));
  k.cpu_s = seconds_since(t0);
  return k;
}

// The candidate that packs the first `n` values smallest, or with link_Bps the one whose bytes at
// that rate plus its CPU time is least, raw values (kOverwrite, no CPU to speak of) among them.
Result<ValueCodec> best_on_sample(const std::vector<ValueCodec>& cands, const uint8_t* oldv, const uint8_t* newv,
                                  size_t n, uint32_t elem_size, const ValueChoiceOptions& opt, CodecScratch& s) {
  const bool timed = opt.link_Bps > 0;
  ValueCodec pick = cands.front();
  double least = timed ? double(n * elem_size) / opt.link_Bps : double(SIZE_MAX);
  if (timed) pick = ValueCodec::kOverwrite;
  for (ValueCodec c : cands) {
    SPARROW_ASSIGN_OR_RETURN(SampleCost k, cost_on_sample(c, oldv, newv, n, elem_size, opt.zstd_level, timed, s));
    const double cost = timed ? double(k.bytes) / opt.link_Bps + k.cpu_s : double(k.bytes);
    if (cost < least) {
      least = cost;
      pick = c;
    }
  }
  return pick;
}

}  // namespace

Result<ValueCodec> choose_values(const uint8_t* oldv, const uint8_t* newv, size_t k, uint32_t elem_size, bool with_old,
                                 const ValueChoiceOptions& opt, CodecScratch& s, std::vector<uint8_t>& best) {
  ValueCodec chosen = ValueCodec::kOverwrite;
  best.assign(newv, newv + k * elem_size);
  if (opt.paper_only) return chosen;
  std::vector<ValueCodec> cands = zstd_candidates(with_old, opt);
  if ((cands.size() > 1 || opt.link_Bps > 0) && opt.sample > 0 && k > 2 * opt.sample) {
    SPARROW_ASSIGN_OR_RETURN(ValueCodec c, best_on_sample(cands, oldv, newv, opt.sample, elem_size, opt, s));
    if (c == ValueCodec::kOverwrite) return c;  // raw values are quicker end to end than any packing
    cands = {c};
  }
  for (ValueCodec c : cands) {
    s.val.clear();
    SPARROW_RETURN_IF_ERROR(encode_values(c, oldv, newv, k, elem_size, opt.zstd_level, s.zs, s.val));
    if (s.val.size() < best.size()) {
      best.swap(s.val);
      chosen = c;
    }
  }
  return chosen;
}

Result<ValueCodec> dense_values(const uint8_t* cur, uint32_t n, uint32_t elem_size, bool compress, int zstd_level,
                                CodecScratch& s, std::span<const uint8_t>* vals) {
  const size_t raw = size_t(n) * elem_size;
  *vals = std::span<const uint8_t>(cur, raw);
  if (!compress) return ValueCodec::kOverwrite;
  s.val.clear();
  SPARROW_RETURN_IF_ERROR(encode_values(ValueCodec::kOverwriteZstd, nullptr, cur, n, elem_size, zstd_level, s.zs, s.val));
  if (s.val.size() >= raw) return ValueCodec::kOverwrite;
  *vals = s.val;
  return ValueCodec::kOverwriteZstd;
}

}  // namespace sparrow::format
