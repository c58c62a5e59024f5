#include "format/value_codec.h"

#include <zstd.h>

#include <cstring>
#include <string>

namespace sparrow::format {

const char* value_codec_name(ValueCodec c) {
  switch (c) {
    case ValueCodec::kOverwrite: return "overwrite";
    case ValueCodec::kOverwriteZstd: return "overwrite_zstd";
    case ValueCodec::kXorZstd: return "xor_zstd";
    case ValueCodec::kSubZstd: return "sub_zstd";
  }
  return "?";
}

namespace {

struct ZCtx {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~ZCtx() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};
ZCtx& zctx() {
  thread_local ZCtx ctx;
  return ctx;
}

template <typename T>
inline T zigzag(T d) {
  using S = std::make_signed_t<T>;
  return T(d << 1) ^ T(S(d) >> (sizeof(T) * 8 - 1));
}
template <typename T>
inline T unzigzag(T z) {
  return T(z >> 1) ^ T(-T(z & 1));
}

// Forward transform (codec-specific) fused with the byte-plane split.
template <typename T>
void to_planes(ValueCodec c, const uint8_t* oldv, const uint8_t* newv, size_t k, uint8_t* planes) {
  for (size_t i = 0; i < k; ++i) {
    T n, o = 0, t;
    memcpy(&n, newv + i * sizeof(T), sizeof(T));
    if (oldv) memcpy(&o, oldv + i * sizeof(T), sizeof(T));
    if (c == ValueCodec::kXorZstd) t = n ^ o;
    else if (c == ValueCodec::kSubZstd) t = zigzag<T>(T(n - o));
    else t = n;
    for (size_t j = 0; j < sizeof(T); ++j) planes[j * k + i] = uint8_t(t >> (8 * j));
  }
}

template <typename T>
void from_planes(ValueCodec c, const uint8_t* planes, const uint8_t* oldv, size_t k, uint8_t* newv) {
  for (size_t i = 0; i < k; ++i) {
    T t = 0, o = 0, n;
    for (size_t j = 0; j < sizeof(T); ++j) t |= T(planes[j * k + i]) << (8 * j);
    if (oldv) memcpy(&o, oldv + i * sizeof(T), sizeof(T));
    if (c == ValueCodec::kXorZstd) n = t ^ o;
    else if (c == ValueCodec::kSubZstd) n = T(o + unzigzag<T>(t));
    else n = t;
    memcpy(newv + i * sizeof(T), &n, sizeof(T));
  }
}

void planes_dispatch(bool forward, ValueCodec c, const uint8_t* a, const uint8_t* oldv, size_t k, uint32_t s,
                     uint8_t* b) {
  switch (s) {
    case 1: forward ? to_planes<uint8_t>(c, oldv, a, k, b) : from_planes<uint8_t>(c, a, oldv, k, b); break;
    case 2: forward ? to_planes<uint16_t>(c, oldv, a, k, b) : from_planes<uint16_t>(c, a, oldv, k, b); break;
    case 4: forward ? to_planes<uint32_t>(c, oldv, a, k, b) : from_planes<uint32_t>(c, a, oldv, k, b); break;
    default: forward ? to_planes<uint64_t>(c, oldv, a, k, b) : from_planes<uint64_t>(c, a, oldv, k, b); break;
  }
}

}  // namespace

Status encode_values(ValueCodec c, const uint8_t* old_vals, const uint8_t* new_vals, size_t k, uint32_t s,
                     int zstd_level, std::vector<uint8_t>& scratch, std::vector<uint8_t>& out) {
  size_t raw = k * s;
  if (c == ValueCodec::kOverwrite) {
    out.insert(out.end(), new_vals, new_vals + raw);
    return Status::Ok();
  }
  if (value_codec_needs_old(c) && !old_vals) return InternalError("value codec needs old values");
  scratch.resize(raw);
  planes_dispatch(true, c, new_vals, value_codec_needs_old(c) ? old_vals : nullptr, k, s, scratch.data());
  size_t base = out.size();
  size_t bound = ZSTD_compressBound(raw);
  out.resize(base + bound);
  size_t z = ZSTD_compressCCtx(zctx().c, out.data() + base, bound, scratch.data(), raw, zstd_level);
  if (ZSTD_isError(z)) {
    out.resize(base);
    return InternalError(std::string("zstd compression failed: ") + ZSTD_getErrorName(z));
  }
  out.resize(base + z);
  return Status::Ok();
}

Status decode_values(ValueCodec c, std::span<const uint8_t> in, const uint8_t* old_vals, size_t k, uint32_t s,
                     std::vector<uint8_t>& scratch, uint8_t* new_vals) {
  size_t raw = k * s;
  const std::string name = value_codec_name(c);
  if (c == ValueCodec::kOverwrite) {
    if (in.size() != raw) return CorruptData(name + " values: " + std::to_string(in.size()) + " bytes, expected " +
                                             std::to_string(raw));
    memcpy(new_vals, in.data(), raw);
    return Status::Ok();
  }
  if (c != ValueCodec::kOverwriteZstd && c != ValueCodec::kXorZstd && c != ValueCodec::kSubZstd)
    return CorruptData("unknown value codec " + std::to_string(int(c)));
  if (value_codec_needs_old(c) && !old_vals) return InternalError("value codec needs old values");
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame) || frame != in.size()) return CorruptData(name + " values: not exactly one zstd frame");
  unsigned long long content = ZSTD_getFrameContentSize(in.data(), in.size());
  if (content != raw) return CorruptData(name + " values: frame holds " + std::to_string(content) +
                                         " bytes, expected " + std::to_string(raw));
  scratch.resize(raw);
  size_t got = ZSTD_decompressDCtx(zctx().d, scratch.data(), raw, in.data(), in.size());
  if (ZSTD_isError(got)) return CorruptData(name + " values: " + ZSTD_getErrorName(got));
  if (got != raw) return CorruptData(name + " values: short frame");
  planes_dispatch(false, c, scratch.data(), value_codec_needs_old(c) ? old_vals : nullptr, k, s, new_vals);
  return Status::Ok();
}

}  // namespace sparrow::format
