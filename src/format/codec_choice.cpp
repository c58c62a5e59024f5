#include "format/codec_choice.h"

#include <algorithm>
#include <ctime>
#include <cstdint>
#include <cstring>
#include <mutex>
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

// This thread's CPU seconds: unlike the wall clock, not inflated when another process preempts the
// measurement (two ranks and an emulator sharing a core made the choice flip between runs).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The candidate that packs the first `n` values smallest, or with link_Bps the one whose bytes on the
// sample at that rate plus its CPU time is least; raw values (kOverwrite) when none does better.
Result<ValueCodec> best_on_sample(const std::vector<ValueCodec>& cands, const uint8_t* oldv, const uint8_t* newv,
                                  size_t n, uint32_t elem_size, const ValueChoiceOptions& opt, CodecScratch& s) {
  const bool timed = opt.link_Bps > 0;
  auto cost = [&](ValueCodec c, size_t bytes) {
    return timed ? double(bytes) / opt.link_Bps + double(n) * value_codec_cpu_s(c, elem_size) / std::max(1, opt.threads)
                 : double(bytes);
  };
  // Raw values are the candidate to beat: a sample no codec packs (random values) skips the whole
  // chunk's compression, which would only find the same.
  ValueCodec pick = ValueCodec::kOverwrite;
  double least = cost(ValueCodec::kOverwrite, n * elem_size);
  for (ValueCodec c : cands) {
    s.val.clear();
    SPARROW_RETURN_IF_ERROR(encode_values(c, oldv, newv, n, elem_size, opt.zstd_level, s.zs, s.val));
    if (const double t = cost(c, s.val.size()); t < least) {
      least = t;
      pick = c;
    }
  }
  return pick;
}

}  // namespace

// CPU seconds per value to encode and decode with codec c, elements of `es` bytes: measured once per
// process on 65,536 values moved by a unit in the last place (an RL step's kind of change), best of
// three, in this thread's CPU time (a busy machine does not make a codec look dearer). Timing each
// chunk's small sample instead would charge the codec its fixed cost per call, which a whole chunk
// spreads over many more values.
double value_codec_cpu_s(ValueCodec c, uint32_t es) {
  static std::once_flag once[4];
  static double cost[4][kNumValueCodecs];
  const int e = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
  std::call_once(once[e], [&] {
    const size_t n = 65536;
    std::vector<uint8_t> oldv(n * es), newv(n * es), enc, zs, back(n * es);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const uint64_t o = (x >> 8) & ((es >= 8 ? ~0ull : (1ull << (8 * es)) - 1) >> 2);
      const uint64_t v = o + ((x & 1) ? 1 : -1);
      memcpy(&oldv[i * es], &o, es);
      memcpy(&newv[i * es], &v, es);
    }
    for (int k = 0; k < kNumValueCodecs; ++k) {
      double best = 1e9;
      for (int rep = 0; rep < 3; ++rep) {
        enc.clear();
        const double t0 = thread_cpu_s();
        bool ok = encode_values(ValueCodec(k), oldv.data(), newv.data(), n, es, 1, zs, enc).ok() &&
                  decode_values(ValueCodec(k), enc, oldv.data(), n, es, zs, back.data()).ok();
        if (ok) best = std::min(best, thread_cpu_s() - t0);
      }
      cost[e][k] = best / double(n);
    }
  });
  return cost[e][int(c)];
}

Result<ValueCodec> choose_values(const uint8_t* oldv, const uint8_t* newv, size_t k, uint32_t elem_size, bool with_old,
                                 const ValueChoiceOptions& opt, CodecScratch& s, std::vector<uint8_t>& best) {
  ValueCodec chosen = ValueCodec::kOverwrite;
  best.assign(newv, newv + k * elem_size);
  if (opt.paper_only) return chosen;
  std::vector<ValueCodec> cands = zstd_candidates(with_old, opt);
  if (!cands.empty() && opt.sample > 0 && k > 2 * opt.sample) {
    SPARROW_ASSIGN_OR_RETURN(ValueCodec c, best_on_sample(cands, oldv, newv, opt.sample, elem_size, opt, s));
    if (c == ValueCodec::kOverwrite) return c;  // no packing pays on the sample
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
