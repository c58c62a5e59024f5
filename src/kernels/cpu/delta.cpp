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

namespace {

params::IntParam kChunkElems("CHUNK_ELEMS", 1 << 20,
                             "Elements per checkpoint chunk (unit of extraction, encoding, verification, pipelining).",
                             1024, format::kMaxChunkElems);

params::BoolParam kVerifyBase("VERIFY_BASE", true,
                              "Receivers check that their buffers still hold the base version before applying a "
                              "step (a buffer the user wrote into is refused and resynchronised, never silently kept).");

}  // namespace

bool default_verify_base() { return kVerifyBase.get(); }

uint32_t default_chunk_elems() { return uint32_t(kChunkElems.get()); }

DeltaEncoder::DeltaEncoder(std::vector<TensorSpec> tensors) : tensors_(std::move(tensors)) {}

DeltaEncoder::~DeltaEncoder() { free_device_shadow(); }

void DeltaEncoder::free_device_shadow() {
  for (void* p : dshadow_)
    if (p) dev_->free(p, dshadow_host_);
  dshadow_.clear();
  for (auto& c : dchanges_)
    if (c.p) dev_->free(c.p, true);
  dchanges_.clear();
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

std::vector<uint64_t> content_digests(const std::vector<TensorSpec>& layout, std::span<const void* const> bufs,
                                      int threads) {
  const int th = threads > 0 ? threads : kernel_threads();
  std::vector<uint64_t> out(layout.size(), 0);
  for (size_t t = 0; t < layout.size() && t < bufs.size(); ++t) {
    const uint8_t* p = static_cast<const uint8_t*>(bufs[t]);
    const uint32_t es = layout[t].elem_size();
    const uint64_t n = layout[t].count, per = uint64_t(1) << 16;
    std::vector<uint64_t> part(size_t((n + per - 1) / per), 0);
    parallel_for(part.size(), th, [&](size_t b, int) {
      const uint64_t first = b * per, cnt = std::min(per, n - first);
      part[b] = format::digest_range(uint32_t(t), p + first * es, first, cnt, es);
    });
    for (uint64_t d : part) out[t] += d;
  }
  return out;
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
  return snapshot_at(tensors_, current, version_, opt);
}

Result<std::vector<uint8_t>> DeltaEncoder::snapshot_at(std::vector<TensorSpec> tensors, std::span<const void* const> current,
                                                       uint64_t version, const EncodeOptions& opt) {
  DeltaEncoder tmp(std::move(tensors));
  tmp.version_ = version > 0 ? version - 1 : 0;  // encode() labels its output one version on
  tmp.keep_shadow_ = false;
  return tmp.encode(current, opt);
}

}  // namespace sparrow::kernels::cpu
