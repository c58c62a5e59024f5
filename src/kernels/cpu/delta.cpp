#include "kernels/cpu/delta.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "core/log.h"
#include "core/parallel.h"
#include "core/params.h"
#include "format/digest.h"

namespace sparrow::kernels::cpu {

using format::ChunkHeader;
using format::IndexCodec;
using format::ValueCodec;

namespace {

params::IntParam kChunkElems("CHUNK_ELEMS", 1 << 20,
                             "Elements per checkpoint chunk (unit of extraction, encoding, verification, pipelining).",
                             1024, format::kMaxChunkElems);

params::BoolParam kVerifyBase("VERIFY_BASE", true,
                              "Receivers check that their buffers still hold the base version before applying a "
                              "step (a buffer the user wrote into is refused and resynchronised, never silently kept).");

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Block {
  uint32_t tensor;
  uint64_t begin;
  uint32_t n;
};

std::vector<Block> make_blocks(const std::vector<TensorSpec>& ts, uint32_t ce) {
  std::vector<Block> b;
  for (uint32_t t = 0; t < ts.size(); ++t)
    for (uint64_t e = 0; e < ts[t].count; e += ce) b.push_back({t, e, uint32_t(std::min<uint64_t>(ce, ts[t].count - e))});
  return b;
}

struct EncScratch {
  std::vector<uint32_t> pos;
  std::vector<uint8_t> oldv, newv, idx, val, best, zs, host;  // host: a device chunk's bytes
  std::vector<uint8_t> base;  // adopt_view: the chunk's base bytes (extraction refreshes them here)
};

void merge(EncodeStats& a, const EncodeStats& b) {
  a.elements += b.elements;
  a.changes += b.changes;
  a.chunks += b.chunks;
  a.dense_chunks += b.dense_chunks;
  a.index_bytes += b.index_bytes;
  a.value_bytes += b.value_bytes;
  for (int i = 0; i < format::kNumIndexCodecs; ++i) a.index_codec_chunks[i] += b.index_codec_chunks[i];
  for (int i = 0; i < format::kNumValueCodecs; ++i) a.value_codec_chunks[i] += b.value_codec_chunks[i];
  a.leb128_overwrite_bytes += b.leb128_overwrite_bytes;
  a.index_entropy_bits += b.index_entropy_bits;
  a.sparse_index_bytes += b.sparse_index_bytes;
  a.sparse_changes += b.sparse_changes;
  a.extract_seconds += b.extract_seconds;
  a.encode_seconds += b.encode_seconds;
}

// Encodes `k` values with the smallest of the allowed codecs; result in s.best, codec returned.
Result<ValueCodec> best_values(const uint8_t* oldv, const uint8_t* newv, size_t k, uint32_t es, bool with_old,
                               const EncodeOptions& opt, EncScratch& s) {
  ValueCodec best = ValueCodec::kOverwrite;
  s.best.assign(newv, newv + k * es);
  if (opt.paper_format) return best;
  ValueCodec tries[3] = {ValueCodec::kSubZstd, ValueCodec::kXorZstd, ValueCodec::kOverwriteZstd};
  for (ValueCodec c : tries) {
    if (format::value_codec_needs_old(c) && !with_old) continue;
    if (c == ValueCodec::kXorZstd && !opt.try_xor) continue;
    s.val.clear();
    SPARROW_RETURN_IF_ERROR(format::encode_values(c, oldv, newv, k, es, opt.zstd_level, s.zs, s.val));
    if (s.val.size() < s.best.size()) {
      s.best.swap(s.val);
      best = c;
    }
  }
  return best;
}

}  // namespace

bool default_verify_base() { return kVerifyBase.get(); }

uint32_t default_chunk_elems() { return uint32_t(kChunkElems.get()); }

DeltaEncoder::DeltaEncoder(std::vector<TensorSpec> tensors) : tensors_(std::move(tensors)) {}

DeltaEncoder::~DeltaEncoder() { free_device_shadow(); }

void DeltaEncoder::free_device_shadow() {
  for (void* p : dshadow_)
    if (p) dev_->free(p, dshadow_host_);
  dshadow_.clear();
}

void DeltaEncoder::reset() {
  borrowed_.clear();
  have_shadow_ = false;
  shadow_.clear();
  free_device_shadow();
  digests_.clear();
}

Result<std::vector<uint8_t>> DeltaEncoder::encode(std::span<const void* const> current, const EncodeOptions& opt,
                                                  EncodeStats* stats) {
  std::vector<uint8_t> out;
  EncodeStats local;
  Status s = encode_impl(current, opt, !have_shadow_, stats ? stats : &local, out);
  if (!s.ok()) {
    reset();
    return s;
  }
  return out;
}

Result<std::vector<uint8_t>> DeltaEncoder::encode_stream(std::span<const void* const> current,
                                                         const EncodeOptions& opt, EncodeStats* stats,
                                                         const FrameFn& on_header, const FrameFn& on_chunk) {
  std::vector<uint8_t> footer;
  EncodeStats local;
  Status s = encode_impl(current, opt, !have_shadow_, stats ? stats : &local, footer, &on_header, &on_chunk);
  if (!s.ok()) {
    reset();
    return s;
  }
  return footer;
}

// What adopt() and adopt_view() check before taking a base, after forgetting the current state.
Status DeltaEncoder::start_adopt(std::span<const void* const> base, uint64_t version) {
  if (base.size() != tensors_.size())
    return InvalidArgument("encoder has " + std::to_string(tensors_.size()) + " tensors, got " +
                           std::to_string(base.size()) + " buffers");
  if (version == 0) return InvalidArgument("adopt: version 0 is reserved for 'never sent'");
  reset();
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (tensors_[t].elem_size() == 0) return InvalidArgument("tensor '" + tensors_[t].name + "': unknown datatype");
    if (tensors_[t].count && !base[t]) return InvalidArgument("tensor '" + tensors_[t].name + "': null buffer");
    if (tensors_[t].count && is_device(device_ops(), base[t])) return InvalidArgument("adopt: host buffers only");
  }
  return Status::Ok();
}

Status DeltaEncoder::adopt(std::span<const void* const> base, uint64_t version, int threads) {
  SPARROW_RETURN_IF_ERROR(start_adopt(base, version));
  const int th = threads > 0 ? threads : kernel_threads();
  shadow_.resize(tensors_.size());
  digests_.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    // One pass: each block is copied into the shadow and digested there while it is in cache.
    const uint8_t* p = static_cast<const uint8_t*>(base[t]);
    const uint32_t es = tensors_[t].elem_size();
    const uint64_t n = tensors_[t].count, per = uint64_t(1) << 16;
    shadow_[t].resize(tensors_[t].bytes());
    uint8_t* sh = shadow_[t].data();
    std::vector<uint64_t> part(size_t((n + per - 1) / per), 0);
    parallel_for(part.size(), th, [&](size_t b, int) {
      const uint64_t first = b * per, cnt = std::min(per, n - first);
      memcpy(sh + first * es, p + first * es, size_t(cnt) * es);
      part[b] = format::digest_range(uint32_t(t), sh + first * es, first, cnt, es);
    });
    digests_[t] = 0;
    for (uint64_t d : part) digests_[t] += d;
  }
  dshadow_.assign(tensors_.size(), nullptr);
  version_ = version;
  have_shadow_ = true;
  return Status::Ok();
}

Status DeltaEncoder::adopt_view(std::span<const void* const> base, uint64_t version) {
  SPARROW_RETURN_IF_ERROR(start_adopt(base, version));
  for (const void* p : base) borrowed_.push_back(static_cast<const uint8_t*>(p));
  dshadow_.assign(tensors_.size(), nullptr);
  digests_.assign(tensors_.size(), 0);  // computed by the encode, in the same pass
  version_ = version;
  have_shadow_ = true;
  return Status::Ok();
}

Result<std::vector<uint8_t>> DeltaEncoder::snapshot(std::span<const void* const> current, const EncodeOptions& opt) const {
  DeltaEncoder tmp(tensors_);
  tmp.version_ = version_ > 0 ? version_ - 1 : 0;
  tmp.keep_shadow_ = false;
  return tmp.encode(current, opt);
}

Status DeltaEncoder::encode_impl(std::span<const void* const> current, const EncodeOptions& opt, bool full,
                                 EncodeStats* st, std::vector<uint8_t>& out, const FrameFn* on_header,
                                 const FrameFn* on_chunk) {
  double wall0 = now_s();
  if (current.size() != tensors_.size())
    return InvalidArgument("encoder has " + std::to_string(tensors_.size()) + " tensors, got " +
                           std::to_string(current.size()) + " buffers");
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (tensors_[t].elem_size() == 0) return InvalidArgument("tensor '" + tensors_[t].name + "': unknown datatype");
    if (tensors_[t].count > format::kMaxTensorElems) return InvalidArgument("tensor '" + tensors_[t].name + "' too large");
    if (tensors_[t].count && !current[t]) return InvalidArgument("tensor '" + tensors_[t].name + "': null buffer");
  }
  uint32_t ce = opt.chunk_elems ? opt.chunk_elems : default_chunk_elems();
  if (ce > format::kMaxChunkElems) return InvalidArgument("chunk_elems too large");
  int threads = opt.threads > 0 ? opt.threads : kernel_threads();
  ExtractFn extract = extract_fn(isa_supported(opt.isa) ? opt.isa : Isa::kScalar);

  // Device buffers: the shadow follows the buffer. A buffer that moved between host and device since
  // the last version starts over with a full snapshot.
  DeviceOps* dev = device_ops();
  std::vector<uint8_t> on_dev(tensors_.size(), 0);
  for (size_t t = 0; t < tensors_.size(); ++t) on_dev[t] = tensors_[t].count && is_device(dev, current[t]);
  if (!full) {
    for (size_t t = 0; t < tensors_.size(); ++t)
      if (bool(on_dev[t]) != (t < dshadow_.size() && dshadow_[t] != nullptr)) full = true;
    if (full) SPARROW_INFO("a buffer moved between host and device memory: sending a full snapshot");
  }
  if (full) {
    shadow_.assign(tensors_.size(), {});
    free_device_shadow();
    if (keep_shadow_) {
      dshadow_.assign(tensors_.size(), nullptr);
      dev_ = dev;
      dshadow_host_ = shadow_on_host();
      for (size_t t = 0; t < tensors_.size(); ++t) {
        if (!on_dev[t]) {
          shadow_[t].resize(tensors_[t].bytes());
        } else {
          int e = dev->alloc(&dshadow_[t], tensors_[t].bytes(), dshadow_host_);
          if (e) {
            dshadow_[t] = nullptr;
            return device_error(dev, e, "allocating the shadow of a device buffer").context(
                "tensor '" + tensors_[t].name + "' (" + std::to_string(tensors_[t].bytes()) + " bytes)");
          }
        }
      }
    }
  }
  format::Header hd;
  hd.flags = full ? format::kFlagFull : 0;
  hd.base_version = full ? 0 : version_;
  hd.new_version = version_ + 1;
  hd.chunk_elems = ce;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    format::TensorEntry e;
    e.name = tensors_[t].name;
    e.dtype = tensors_[t].dtype;
    e.elem_size = uint8_t(tensors_[t].elem_size());
    e.count = tensors_[t].count;
    e.base_digest = full ? 0 : digests_[t];
    hd.tensors.push_back(std::move(e));
  }
  const bool streaming = on_header && on_chunk;
  const bool view = !borrowed_.empty() && !full;  // adopt_view: base digests come out of this pass
  if (view && streaming) return Error(Code::kInvalidUsage, "an encoder that adopted a view cannot stream");
  if (streaming) {
    std::vector<uint8_t> h;
    format::write_header(hd, h);
    (*on_header)(std::move(h));
  }
  std::atomic<uint64_t> streamed{0}, streamed_bytes{0};
  std::vector<Block> blocks = make_blocks(tensors_, ce);
  std::vector<uint64_t> base_dig(view ? blocks.size() : 0, 0);
  std::vector<std::vector<uint8_t>> frames(blocks.size());
  std::vector<uint64_t> dig(blocks.size(), 0);
  std::vector<EncodeStats> wstats(threads);
  std::vector<EncScratch> scratch(threads);
  std::mutex err_mu;
  Status first_error;

  parallel_for(blocks.size(), threads, [&](size_t bi, int w) {
    const Block& b = blocks[bi];
    const uint32_t es = tensors_[b.tensor].elem_size();
    const bool dv = on_dev[b.tensor];
    const uint8_t* cur = static_cast<const uint8_t*>(current[b.tensor]) + b.begin * es;
    uint8_t* sh = !keep_shadow_ || view ? nullptr
                  : dv                  ? static_cast<uint8_t*>(dshadow_[b.tensor]) + b.begin * es
                                        : shadow_[b.tensor].data() + b.begin * es;
    if (view) {  // the base is the caller's (read-only): a copy of the chunk, digested while in cache
      EncScratch& sc = scratch[w];
      sc.base.assign(borrowed_[b.tensor] + b.begin * es, borrowed_[b.tensor] + (b.begin + b.n) * es);
      base_dig[bi] = format::digest_range(b.tensor, sc.base.data(), b.begin, b.n, es);
      sh = sc.base.data();
    }
    const uint8_t* dcur = cur;  // the device address (for a device buffer, cur becomes a host copy)
    EncodeStats& ws = wstats[w];
    EncScratch& s = scratch[w];
    ws.elements += b.n;
    auto fail = [&](Status e) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (first_error.ok()) first_error = std::move(e);
    };
    // A device chunk's bytes on the host (for dense chunks only: sparse ones need just the changes).
    auto to_host = [&]() -> Status {
      if (!dv) return Status::Ok();
      s.host.resize(size_t(b.n) * es);
      SPARROW_RETURN_IF_ERROR(device_error(dev, dev->copy(s.host.data(), dcur, s.host.size()), "copying a chunk to the host"));
      cur = s.host.data();
      return Status::Ok();
    };
    ChunkHeader h;
    h.tensor = b.tensor;
    h.elem_begin = b.begin;
    h.elem_count = b.n;
    if (full) {
      double t0 = now_s();
      if (Status e = to_host(); !e.ok()) return fail(std::move(e));
      if (sh && dv) {
        if (Status e = device_error(dev, dev->copy(sh, dcur, size_t(b.n) * es), "refreshing the shadow"); !e.ok())
          return fail(std::move(e));
      } else if (sh) {
        memcpy(sh, cur, size_t(b.n) * es);
      }
      dig[bi] = format::digest_range(b.tensor, cur, b.begin, b.n, es);
      double t1 = now_s();
      ValueCodec vc = ValueCodec::kOverwrite;
      std::span<const uint8_t> vals(cur, size_t(b.n) * es);
      if (opt.compress_dense && !opt.paper_format) {
        s.val.clear();
        Status e = format::encode_values(ValueCodec::kOverwriteZstd, nullptr, cur, b.n, es, opt.zstd_level, s.zs, s.val);
        if (!e.ok()) return fail(std::move(e));
        if (s.val.size() < vals.size()) {
          vc = ValueCodec::kOverwriteZstd;
          vals = s.val;
        }
      }
      h.change_count = b.n;
      h.index_codec = IndexCodec::kDense;
      h.value_codec = vc;
      format::write_chunk(h, {}, vals, frames[bi]);
      if (streaming) {
        ++streamed;
        streamed_bytes += frames[bi].size();
        (*on_chunk)(std::move(frames[bi]));
        frames[bi] = {};
      }
      ws.changes += b.n;
      ws.chunks++;
      ws.dense_chunks++;
      ws.value_bytes += vals.size();
      ws.index_codec_chunks[0]++;
      ws.value_codec_chunks[int(vc)]++;
      ws.leb128_overwrite_bytes += format::kChunkHeaderBytes + size_t(b.n) * es;
      ws.extract_seconds += t1 - t0;
      ws.encode_seconds += now_s() - t1;
      return;
    }
    if (s.pos.size() < b.n) {
      s.pos.resize(ce);
      s.oldv.resize(size_t(ce) * es);
      s.newv.resize(size_t(ce) * es);
    } else if (s.oldv.size() < size_t(b.n) * es) {
      s.oldv.resize(size_t(ce) * es);
      s.newv.resize(size_t(ce) * es);
    }
    double t0 = now_s();
    size_t k = 0;
    if (dv) {
      if (Status e = device_error(dev, dev->extract(dcur, sh, b.n, es, s.pos.data(), s.oldv.data(), s.newv.data(), &k),
                                  "extracting changes on the device");
          !e.ok())
        return fail(std::move(e));
    } else {
      k = extract(cur, sh, b.n, es, s.pos.data(), s.oldv.data(), s.newv.data());
    }
    double t1 = now_s();
    ws.extract_seconds += t1 - t0;
    if (k == 0) return;
    uint64_t d = 0;
    for (size_t j = 0; j < k; ++j) {
      uint64_t gi = b.begin + s.pos[j];
      d += format::element_hash_delta(b.tensor, gi, format::load_elem(&s.oldv[j * es], es),
                                      format::load_elem(&s.newv[j * es], es));
    }
    dig[bi] = d;
    const size_t raw = size_t(b.n) * es;
    size_t leb = format::leb128_index_size(s.pos.data(), k);
    ws.leb128_overwrite_bytes += format::kChunkHeaderBytes + std::min(leb + k * es, raw);
    IndexCodec ic = IndexCodec::kLeb128;
    size_t isz = leb;
    uint32_t m = 1;
    if (!opt.paper_format) {
      m = format::golomb_parameter(s.pos.data(), k);
      size_t g = format::golomb_index_size(s.pos.data(), k, m);
      if (g < isz) { ic = IndexCodec::kGolomb; isz = g; }
      size_t bm = format::bitmap_index_size(b.n);
      if (bm < isz) { ic = IndexCodec::kBitmap; isz = bm; }
    }
    ValueCodec vc = ValueCodec::kOverwrite;
    std::span<const uint8_t> vals;
    // Not smaller than the raw chunk: send the whole range (zstd on byte planes when `compress`).
    auto send_dense = [&](bool compress) -> Status {
      SPARROW_RETURN_IF_ERROR(to_host());
      ic = IndexCodec::kDense;
      vc = ValueCodec::kOverwrite;
      h.change_count = b.n;
      vals = std::span<const uint8_t>(cur, raw);
      if (compress) {
        s.val.clear();
        SPARROW_RETURN_IF_ERROR(
            format::encode_values(ValueCodec::kOverwriteZstd, nullptr, cur, b.n, es, opt.zstd_level, s.zs, s.val));
        if (s.val.size() < raw) {
          vc = ValueCodec::kOverwriteZstd;
          vals = s.val;
        }
      }
      s.idx.clear();
      ws.dense_chunks++;
      return Status::Ok();
    };
    if (isz + k * es >= raw) {
      Status e = send_dense(opt.compress_dense && !opt.paper_format);
      if (!e.ok()) return fail(std::move(e));
    } else {
      auto bv = best_values(s.oldv.data(), s.newv.data(), k, es, true, opt, s);
      if (!bv.ok()) return fail(std::move(bv).take_status());
      vc = bv.value();
      if (isz + s.best.size() >= raw) {
        Status e = send_dense(false);
        if (!e.ok()) return fail(std::move(e));
      } else {
        h.change_count = uint32_t(k);
        vals = s.best;
        s.idx.clear();
        format::encode_index(ic, s.pos.data(), k, b.n, m, s.idx);
        ws.index_entropy_bits += format::index_entropy_bits(b.n, k);
        ws.sparse_index_bytes += s.idx.size();
        ws.sparse_changes += k;
      }
    }
    h.index_codec = ic;
    h.value_codec = vc;
    format::write_chunk(h, s.idx, vals, frames[bi]);
    if (streaming) {
      ++streamed;
      streamed_bytes += frames[bi].size();
      (*on_chunk)(std::move(frames[bi]));
      frames[bi] = {};
    }
    ws.changes += k;
    ws.chunks++;
    ws.index_bytes += s.idx.size();
    ws.value_bytes += vals.size();
    ws.index_codec_chunks[int(ic)]++;
    ws.value_codec_chunks[int(vc)]++;
    ws.encode_seconds += now_s() - t1;
  });
  if (!first_error.ok()) return first_error.context("encoding version " + std::to_string(version_ + 1));

  if (view) {
    digests_.assign(tensors_.size(), 0);
    for (size_t i = 0; i < blocks.size(); ++i) digests_[blocks[i].tensor] += base_dig[i];
    for (size_t t = 0; t < tensors_.size(); ++t) hd.tensors[t].base_digest = digests_[t];
    borrowed_.clear();
  }
  std::vector<uint64_t> nd(tensors_.size(), 0);
  if (!full) nd = digests_;
  size_t total = 0, nchunks = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    nd[blocks[i].tensor] += dig[i];
    total += frames[i].size();
    nchunks += !frames[i].empty();
  }
  out.clear();
  size_t header_bytes = 0;
  if (!streaming) {
    format::write_header(hd, out);
    header_bytes = out.size();
    out.reserve(header_bytes + total + 32 + 8 * tensors_.size());
    for (auto& f : frames) {
      out.insert(out.end(), f.begin(), f.end());
      std::vector<uint8_t>().swap(f);
    }
  } else {
    std::vector<uint8_t> h;
    format::write_header(hd, h);
    header_bytes = h.size();
    nchunks = streamed.load();
  }
  format::Footer ft;
  ft.chunk_count = nchunks;
  ft.new_digests = nd;
  format::write_footer(ft, out);

  EncodeStats agg;
  for (auto& w : wstats) merge(agg, w);
  agg.dense_bytes = 0;
  for (auto& t : tensors_) agg.dense_bytes += t.bytes();
  // Header and footer are the same in both formats.
  const size_t frame_overhead = streaming ? header_bytes + out.size() : out.size() - total;
  agg.wire_bytes = streaming ? frame_overhead + streamed_bytes.load() : out.size();
  agg.leb128_overwrite_bytes += frame_overhead;
  agg.wall_seconds = now_s() - wall0;
  *st = agg;
  digests_ = std::move(nd);
  version_++;
  have_shadow_ = keep_shadow_ && !view;  // a view's encoder holds no shadow afterwards
  SPARROW_TRACE("encoded version %llu (%s): %llu changes in %llu chunks, %llu -> %llu bytes",
               (unsigned long long)version_, full ? "full" : "delta", (unsigned long long)agg.changes,
               (unsigned long long)agg.chunks, (unsigned long long)agg.dense_bytes, (unsigned long long)agg.wire_bytes);
  return Status::Ok();
}

}  // namespace sparrow::kernels::cpu
