// SPDX-License-Identifier: Apache-2.0
// A receiver's pieces and its mirrors of the logical tensors: what a step reads from the pieces
// before it (the user may have written into them) and writes into them after it (the changed bytes
// only), and the checksums a split step keeps of them. A piece in host memory is compared and written
// in place. A piece in device memory (an inference engine's weights on its GPU) is read back to the
// host for the projection (one copy of its tensor), compared there, and only the changed elements are
// written to the device (one scatter of their positions and values), never the whole tensor. Before a
// step, whether it still holds what was projected is judged by block sums computed on the device
// (only the sums cross to the host); it is read back only when they differ.
#include <algorithm>
#include <cstring>
#include <limits>

#include "format/block_sum.h"
#include "format/checkpoint.h"
#include "format/digest.h"
#include "kernels/device.h"
#include "model/model.h"

namespace sparrow::model {
namespace {

bool on_device(const LocalTensor& t) { return kernels::is_device(kernels::device_ops(), t.data); }

uint64_t bytes_of(const LocalTensor& t) { return t.numel() * format::dtype_size(t.dtype); }

constexpr size_t kSumBlock = size_t(1) << 20;  // a device tensor's block sums: one per MiB

std::vector<uint64_t> block_sums_of(const uint8_t* p, size_t bytes) {
  std::vector<uint64_t> v;
  for (size_t off = 0; off < bytes; off += kSumBlock) v.push_back(format::block_sum(p + off, std::min(kSumBlock, bytes - off)));
  return v;
}

// The changed elements of a device tensor, as one scatter writes them: positions (elements from
// `base`, below 2^32) and their new values.
struct Patch {
  uint64_t base = 0;
  std::vector<uint32_t> pos;
  std::vector<uint8_t> vals;
};

Status write_patch(const LocalTensor& t, uint32_t esize, Patch& p) {
  if (p.pos.empty()) return Status::Ok();
  auto* dev = kernels::device_ops();
  auto* base = static_cast<uint8_t*>(t.data) + p.base * esize;
  const int err = dev->scatter(base, p.pos.data(), p.pos.size(), esize, p.vals.data());
  p.pos.clear();
  p.vals.clear();
  return err ? kernels::device_error(dev, err, "writing a step's changes into a device tensor") : Status::Ok();
}

// The elements of `runs` where `mirror` differs from `view` (a host copy of device tensor `t`) go to
// the device, and into `view`, which then holds what the device does. Returns the bytes written.
Result<uint64_t> patch_runs(const LocalTensor& t, uint8_t* view, const std::vector<Run>& runs, const uint8_t* mirror,
                            Patch& patch) {
  constexpr uint64_t kLine = 64;
  const uint32_t esize = format::dtype_size(t.dtype);
  uint64_t written = 0;
  for (const Run& r : runs)
    for (uint64_t off = 0; off < r.bytes; off += kLine) {
      const uint64_t n = std::min(kLine, r.bytes - off);
      uint8_t* d = view + r.local + off;
      const uint8_t* s = mirror + r.logical + off;
      if (std::memcmp(s, d, n) == 0) continue;
      for (uint64_t e = 0; e < n; e += esize) {
        if (std::memcmp(s + e, d + e, esize) == 0) continue;
        const uint64_t elem = (r.local + off + e) / esize;
        if (elem - patch.base > std::numeric_limits<uint32_t>::max()) {
          SPARROW_RETURN_IF_ERROR(write_patch(t, esize, patch));
          patch.base = elem;
        }
        patch.pos.push_back(uint32_t(elem - patch.base));
        patch.vals.insert(patch.vals.end(), s + e, s + e + esize);
        std::memcpy(d + e, s + e, esize);
        written += esize;
      }
    }
  return written;
}

}  // namespace

Result<const uint8_t*> Model::host_view(size_t t) const {
  const LocalTensor& lt = locals_[t];
  if (!on_device(lt)) return static_cast<const uint8_t*>(lt.data);
  scratch_.resize(bytes_of(lt));
  SPARROW_RETURN_IF_ERROR(kernels::copy_any(scratch_.data(), lt.data, scratch_.size()));
  return scratch_.data();
}

template <class F>
void Model::each_piece_of(size_t t, F&& f) const {
  for (size_t l = 0; l < targets_.size(); ++l)
    for (size_t i = 0; i < targets_[l].pieces.size(); ++i)
      if (targets_[l].pieces[i].local == t) f(l, i);
}

bool Model::has_pieces(size_t t) const {
  bool any = false;
  each_piece_of(t, [&](size_t, size_t) { any = true; });
  return any;
}

bool Model::device_unchanged(size_t t) const {
  if (t >= device_sums_.size() || device_sums_[t].empty()) return false;
  auto* dev = kernels::device_ops();
  std::vector<uint64_t> now(device_sums_[t].size());
  if (dev->block_sums(locals_[t].data, bytes_of(locals_[t]), kSumBlock, now.data()) != 0) return false;
  return now == device_sums_[t];
}

Status Model::mirror_pieces() {
  for (size_t t = 0; t < locals_.size(); ++t) {
    if (!has_pieces(t) || (on_device(locals_[t]) && device_unchanged(t))) continue;  // (the mirror holds it)
    SPARROW_ASSIGN_OR_RETURN(const uint8_t* view, host_view(t));
    each_piece_of(t, [&](size_t l, size_t i) { copy_changed(runs_[l][i], view, mirrors_[l].data(), false); });
  }
  return Status::Ok();
}

Status Model::project_pieces() {
  projected_ = 0;
  sums_.assign(split_ ? locals_.size() : 0, 0);  // (only a split step judges drift by them)
  device_sums_.resize(locals_.size());
  for (size_t t = 0; t < locals_.size(); ++t) {
    if (!has_pieces(t)) continue;
    const LocalTensor& lt = locals_[t];
    const bool device = on_device(lt);
    device_sums_[t].clear();  // (known again once the write succeeded)
    uint8_t* view = static_cast<uint8_t*>(lt.data);
    if (device) {
      SPARROW_ASSIGN_OR_RETURN(const uint8_t* copy, host_view(t));
      view = const_cast<uint8_t*>(copy);  // (scratch_: this rank's own host copy)
    }
    Patch patch;
    Status failed;
    each_piece_of(t, [&](size_t l, size_t i) {
      if (!failed.ok()) return;
      if (!device) {
        projected_ += copy_changed(runs_[l][i], mirrors_[l].data(), view, true);
        return;
      }
      auto n = patch_runs(lt, view, runs_[l][i], mirrors_[l].data(), patch);
      if (n.ok()) projected_ += *n;
      else failed = n.status();
    });
    if (failed.ok() && device) failed = write_patch(lt, format::dtype_size(lt.dtype), patch);
    SPARROW_RETURN_IF_ERROR(failed);
    if (split_) sums_[t] = runs_sum(t, view);
    if (device) device_sums_[t] = block_sums_of(view, bytes_of(lt));  // (`view`: what the device holds)
  }
  return Status::Ok();
}

uint64_t Model::runs_sum(size_t t, const uint8_t* view) const {
  uint64_t h = 0;
  each_piece_of(t, [&](size_t l, size_t i) {
    for (const Run& r : runs_[l][i]) h = format::checksum(view + r.local, r.bytes, h);
  });
  return h;
}

bool Model::drifted() const {
  if (sums_.empty() || repair_) return false;  // nothing projected yet, or a repair is due anyway
  for (size_t t = 0; t < locals_.size(); ++t) {
    if (!has_pieces(t) || (on_device(locals_[t]) && device_unchanged(t))) continue;
    auto view = host_view(t);  // (device: its sums differ, maybe only outside the pieces: read it)
    if (!view.ok() || runs_sum(t, *view) != sums_[t]) return true;  // (unreadable: refused, nothing written)
  }
  return false;
}

Status Model::project_all() {
  Status s = project_pieces();
  repair_ = !s.ok();  // a write that failed part-way: the next step rewrites what differs
  return s;
}

}  // namespace sparrow::model
