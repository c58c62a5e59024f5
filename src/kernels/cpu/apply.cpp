// The receiver side of the kernels: apply_checkpoint and ApplySession (verify, decode, then write),
// and the pieces apply_internal.h shares with the chain composition (chain.cpp).
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "core/affinity.h"
#include "core/log.h"
#include "core/parallel.h"
#include "format/block_sum.h"
#include "format/digest.h"
#include "kernels/cpu/apply_internal.h"
#include "kernels/cpu/extract.h"

namespace sparrow::kernels::cpu {

using format::IndexCodec;
using format::ValueCodec;

namespace detail {


// The checks that need only the header: layout, base version and digests.
Status check_receiver(const format::Header& h, std::span<void* const> targets, std::span<const TensorSpec> layout,
                      const ReceiverState& state) {
  const size_t nt = h.tensors.size();
  if (layout.size() != nt || targets.size() != nt)
    return Error(Code::kInvalidUsage, "checkpoint has " + std::to_string(nt) + " tensors, receiver has " +
                                          std::to_string(layout.size()));
  for (size_t t = 0; t < nt; ++t) {
    const auto& e = h.tensors[t];
    if (e.count != layout[t].count || e.dtype != layout[t].dtype)
      return Error(Code::kInvalidUsage, "tensor " + std::to_string(t) + " ('" + e.name + "'): checkpoint has " +
                                            std::to_string(e.count) + " x " + format::dtype_name(e.dtype) +
                                            ", receiver has " + std::to_string(layout[t].count) + " x " +
                                            format::dtype_name(layout[t].dtype));
    if (e.count && !targets[t]) return InvalidArgument("tensor '" + e.name + "': null target buffer");
  }
  if (h.full()) return Status::Ok();
  if (state.version != h.base_version)
    return VersionMismatch("receiver holds version " + std::to_string(state.version) + ", checkpoint applies to version " +
                           std::to_string(h.base_version));
  if (state.digests.size() != nt) return VersionMismatch("receiver has no digests for its buffers");
  for (size_t t = 0; t < nt; ++t)
    if (state.digests[t] != h.tensors[t].base_digest)
      return VersionMismatch("tensor '" + h.tensors[t].name + "' does not hold the checkpoint's base contents");
  return Status::Ok();
}

// ---- base verification: do the targets still hold what the receiver committed? --------------------

// The blocks of every tensor in the header's chunking, flattened.
struct BlockRef {
  uint32_t tensor;
  uint64_t index;  // block number within the tensor
};
std::vector<BlockRef> header_blocks(const format::Header& h) {
  std::vector<BlockRef> v;
  for (uint32_t t = 0; t < h.tensors.size(); ++t)
    for (uint64_t b = 0; b < h.blocks(t); ++b) v.push_back({t, b});
  return v;
}

// Reads block `b` of tensor t of the targets as host bytes (device blocks are copied into `scratch`).
Result<const uint8_t*> host_block(const format::Header& h, std::span<void* const> targets, DeviceOps* dev,
                                  const std::vector<uint8_t>& on_dev, uint32_t t, uint64_t b, std::vector<uint8_t>& scratch,
                                  size_t* bytes) {
  const uint32_t es = h.tensors[t].elem_size;
  const uint64_t first = b * h.chunk_elems;
  const uint64_t n = std::min<uint64_t>(h.chunk_elems, h.tensors[t].count - first);
  *bytes = size_t(n) * es;
  const uint8_t* p = static_cast<const uint8_t*>(targets[t]) + first * es;
  if (!on_dev[t]) return p;
  scratch.resize(*bytes);
  SPARROW_RETURN_IF_ERROR(device_error(dev, dev->copy(scratch.data(), p, *bytes), "reading a device buffer to verify it"));
  return static_cast<const uint8_t*>(scratch.data());
}

// The sums of every block of device tensor t, computed on the device: only the sums are copied.
Status device_block_sums(const format::Header& h, std::span<void* const> targets, DeviceOps* dev, uint32_t t,
                         std::vector<uint64_t>& out) {
  const uint32_t es = h.tensors[t].elem_size;
  out.assign(h.blocks(t), 0);
  if (out.empty()) return Status::Ok();
  return device_error(dev, dev->block_sums(targets[t], size_t(h.tensors[t].count) * es, size_t(h.chunk_elems) * es, out.data()),
                      "summing the blocks of a device buffer");
}

bool sums_match_chunking(const ReceiverState& st, const format::Header& h) {
  if (st.block_elems != h.chunk_elems || st.block_sums.size() != h.tensors.size()) return false;
  for (uint32_t t = 0; t < h.tensors.size(); ++t)
    if (st.block_sums[t].size() != h.blocks(t)) return false;
  return true;
}

// Checksums every block of the targets and compares them with the committed ones; where the receiver
// has none in this chunking (first delta after a change of SPARROW_CHUNK_ELEMS), it recomputes the full
// content digests instead. Reads the targets only.
BaseCheck verify_base_contents(const format::Header& h, std::span<void* const> targets, const ReceiverState& st,
                               DeviceOps* dev, const std::vector<uint8_t>& on_dev, int threads) {
  const double t0 = now_s();
  const size_t nt = h.tensors.size();
  const bool have_sums = sums_match_chunking(st, h);
  BaseCheck r;
  r.first_bad.assign(nt, -1);
  r.sums.resize(nt);
  for (size_t t = 0; t < nt; ++t) r.sums[t].assign(h.blocks(uint32_t(t)), 0);
  // Device tensors are summed on the device (the digest fallback needs their bytes on the host).
  const auto on_device = [&](uint32_t t) { return have_sums && on_dev[t]; };
  for (uint32_t t = 0; t < nt; ++t) {
    if (!on_device(t)) continue;
    r.status = device_block_sums(h, targets, dev, t, r.sums[t]);
    if (!r.status.ok()) return r;
  }
  std::vector<BlockRef> blocks = header_blocks(h);
  std::erase_if(blocks, [&](const BlockRef& b) { return on_device(b.tensor); });
  std::vector<uint64_t> digest_part(have_sums ? 0 : blocks.size(), 0);
  std::vector<Status> errs(blocks.size());
  std::vector<std::vector<uint8_t>> scratch(std::max(1, threads));
  parallel_for(blocks.size(), threads, [&](size_t i, int w) {
    const BlockRef& b = blocks[i];
    size_t bytes = 0;
    auto p = host_block(h, targets, dev, on_dev, b.tensor, b.index, scratch[w], &bytes);
    if (!p.ok()) {
      errs[i] = p.status();
      return;
    }
    r.sums[b.tensor][b.index] = format::block_sum(p.value(), bytes);
    if (!have_sums)
      digest_part[i] = format::digest_range(b.tensor, p.value(), b.index * h.chunk_elems, bytes / h.tensors[b.tensor].elem_size,
                                            h.tensors[b.tensor].elem_size);
  });
  for (auto& e : errs)
    if (!e.ok()) {
      r.status = e;
      return r;
    }
  if (have_sums) {
    for (size_t t = 0; t < nt; ++t)
      for (size_t b = 0; b < r.sums[t].size() && r.first_bad[t] < 0; ++b)
        if (r.sums[t][b] != st.block_sums[t][b]) r.first_bad[t] = int64_t(b);
  } else {
    std::vector<uint64_t> dig(nt, 0);
    for (size_t i = 0; i < blocks.size(); ++i) dig[blocks[i].tensor] += digest_part[i];
    for (size_t t = 0; t < nt; ++t)
      if (dig[t] != st.digests[t]) r.first_bad[t] = 0;  // somewhere: the digest does not say where
  }
  r.seconds = now_s() - t0;
  return r;
}

// The verdict of base verification: kVersionMismatch naming the modified tensors, or Ok.
Status base_verdict(const format::Header& h, const BaseCheck& bc) {
  SPARROW_RETURN_IF_ERROR(bc.status);
  std::string which;
  size_t bad = 0;
  for (size_t t = 0; t < bc.first_bad.size(); ++t) {
    if (bc.first_bad[t] < 0) continue;
    if (bad++ < 8) {
      const uint64_t e = uint64_t(bc.first_bad[t]) * h.chunk_elems;
      which += std::string(which.empty() ? "" : ", ") + "'" + h.tensors[t].name + "' (first difference in elements " +
               std::to_string(e) + ".." + std::to_string(std::min<uint64_t>(e + h.chunk_elems, h.tensors[t].count)) + ")";
    }
  }
  if (!bad) return Status::Ok();
  if (bad > 8) which += " and " + std::to_string(bad - 8) + " more";
  return VersionMismatch(std::to_string(bad) + " of " + std::to_string(h.tensors.size()) +
                         " tensor(s) no longer hold version " + std::to_string(h.base_version) +
                         " (written to since that step): " + which + "; nothing was applied");
}

// Checksums of the committed contents after commit() wrote `staged`. `base` holds what verification
// found before the write (in the header's chunking; empty when it did not run): a sparse chunk moves
// its block's sum by the change staging computed, a dense one is summed from its new bytes, and a
// sparse chunk without a verified base sum (a full snapshot) is summed from the targets.
void refresh_block_sums(const format::Header& h, const std::vector<Staged>& staged, std::span<void* const> targets,
                        DeviceOps* dev, const std::vector<uint8_t>& on_dev, std::vector<std::vector<uint64_t>> base,
                        int threads, ReceiverState& st) {
  const size_t nt = h.tensors.size();
  const bool have_base = base.size() == nt;
  if (!have_base) {
    base.assign(nt, {});
    for (uint32_t t = 0; t < nt; ++t) base[t].assign(h.blocks(t), 0);
  }
  std::vector<Status> errs(staged.size() + nt);
  for (uint32_t t = 0; t < nt && !have_base; ++t)  // no verified sums: device tensors are summed there
    if (on_dev[t]) errs[staged.size() + t] = device_block_sums(h, targets, dev, t, base[t]);
  std::vector<std::vector<uint8_t>> scratch(std::max(1, threads));
  parallel_for(staged.size(), threads, [&](size_t i, int w) {
    const Staged& sg = staged[i];
    const uint32_t t = sg.h.tensor;
    const uint64_t b = sg.h.elem_begin / h.chunk_elems;
    if (!have_base && on_dev[t]) return;
    if (sg.dense) {  // the new bytes of the whole block are at hand
      base[t][b] = format::block_sum(sg.dense, size_t(sg.h.elem_count) * h.tensors[t].elem_size);
      return;
    }
    if (have_base) {  // O(changes): the staged change of the verified sum
      base[t][b] = format::block_sum_add(base[t][b], sg.sum_delta);
      return;
    }
    size_t bytes = 0;
    auto p = host_block(h, targets, dev, on_dev, t, b, scratch[w], &bytes);
    if (!p.ok()) errs[i] = p.status();
    else base[t][b] = format::block_sum(p.value(), bytes);
  });
  st.block_elems = h.chunk_elems;
  st.block_sums = std::move(base);
  for (auto& e : errs)
    if (!e.ok()) st.block_sums.clear();  // unknown: the next step recomputes the digests instead
}

// Replaces the old values of `pos` by the ones `over` holds at the same positions (both sorted).
void overlay_old(const Staged& over, const std::vector<uint32_t>& pos, uint32_t es, uint8_t* oldv) {
  size_t i = 0;
  for (size_t j = 0; j < pos.size() && i < over.pos.size(); ++j) {
    while (i < over.pos.size() && over.pos[i] < pos[j]) ++i;
    if (i < over.pos.size() && over.pos[i] == pos[j]) memcpy(oldv + j * es, &over.vals[i * es], es);
  }
}

Status stage_dense_chunk(const format::Header& h, const format::ChunkView& c, const uint8_t* base, bool base_on_dev,
                         DeviceOps* dev, StageScratch& s, Staged& sg) {
  const bool full = h.full();
  const uint32_t t = c.h.tensor, es = h.tensors[t].elem_size, n = c.h.elem_count;
  if (base_on_dev && !full) {  // the old bytes of the range, for the digest
    s.base.resize(size_t(n) * es);
    SPARROW_RETURN_IF_ERROR(device_error(dev, dev->copy(s.base.data(), base, s.base.size()), "reading a device chunk"));
    base = s.base.data();
  }
  if (c.h.value_codec == ValueCodec::kOverwrite) {
    if (c.values.size() != size_t(n) * es)
      return CorruptData("overwrite values: " + std::to_string(c.values.size()) + " bytes, expected " +
                         std::to_string(size_t(n) * es));
    sg.dense = c.values.data();
  } else {
    sg.vals.resize(size_t(n) * es);
    SPARROW_RETURN_IF_ERROR(format::decode_values(c.h.value_codec, c.values, full ? nullptr : base, n, es, s.zs, sg.vals.data()));
    sg.dense = sg.vals.data();
  }
  sg.dig = format::digest_range(t, sg.dense, c.h.elem_begin, n, es);
  if (!full) sg.dig -= format::digest_range(t, base, c.h.elem_begin, n, es);
  return Status::Ok();
}

Status stage_chunk(const format::Header& h, const format::ChunkView& c, const uint8_t* base, bool base_on_dev,
                   DeviceOps* dev, StageScratch& s, Staged& sg, const Staged* over) {
  const uint32_t t = c.h.tensor;
  const uint32_t es = h.tensors[t].elem_size;
  sg.h = c.h;
  if (c.h.index_codec == IndexCodec::kDense) return stage_dense_chunk(h, c, base, base_on_dev, dev, s, sg);
  const uint32_t k = c.h.change_count;
  sg.pos.resize(k);
  SPARROW_RETURN_IF_ERROR(format::decode_index(c.h.index_codec, c.index, c.h.elem_count, k, sg.pos.data()));
  s.oldv.resize(size_t(k) * es);
  if (base_on_dev) {
    SPARROW_RETURN_IF_ERROR(device_error(dev, dev->gather(base, sg.pos.data(), k, es, s.oldv.data()), "gathering old values on the device"));
  } else {
    gather(base, sg.pos.data(), k, es, s.oldv.data());
  }
  if (over) overlay_old(*over, sg.pos, es, s.oldv.data());
  sg.vals.resize(size_t(k) * es);
  SPARROW_RETURN_IF_ERROR(format::decode_values(c.h.value_codec, c.values, s.oldv.data(), k, es, s.zs, sg.vals.data()));
  sg.dig = format::digest_deltas(t, c.h.elem_begin, sg.pos.data(), k, es, s.oldv.data(), sg.vals.data());
  sg.sum_delta = format::block_sum_deltas(sg.pos.data(), k, es, s.oldv.data(), sg.vals.data());
  return Status::Ok();
}

// stage_chunk against the targets' current contents.
Status stage_chunk_at(const format::Header& h, const format::ChunkView& c, std::span<void* const> targets,
                      DeviceOps* dev, const std::vector<uint8_t>& on_dev, StageScratch& s, Staged& sg) {
  const uint32_t t = c.h.tensor;
  const uint8_t* base = static_cast<const uint8_t*>(targets[t]) + c.h.elem_begin * h.tensors[t].elem_size;
  return stage_chunk(h, c, base, on_dev[t], dev, s, sg);
}

Status chunk_context(Status e, const format::Header& h, const format::ChunkHeader& c, size_t i) {
  return std::move(e).context("chunk " + std::to_string(i) + " (tensor '" + h.tensors[c.tensor].name + "', elements " +
                              std::to_string(c.elem_begin) + ".." + std::to_string(c.elem_begin + c.elem_count) + ")");
}

// The acceptance predicate: the digests the staged chunks lead to must be the footer's. Nothing is
// written unless it holds.
Status accept(const format::Header& h, const format::Footer& ft, const std::vector<Staged>& staged,
              const ReceiverState& state) {
  const size_t nt = h.tensors.size();
  const bool full = h.full();
  std::vector<uint64_t> nd(nt, 0);
  if (!full) nd = state.digests;
  for (auto& sg : staged) nd[sg.h.tensor] += sg.dig;
  for (size_t t = 0; t < nt; ++t) {
    if (nd[t] != ft.new_digests[t]) {
      std::string msg = "tensor '" + h.tensors[t].name + "': digest of the result does not match version " +
                        std::to_string(h.new_version);
      if (full) return CorruptData(msg);
      return VersionMismatch(msg + " (the buffer differs from version " + std::to_string(h.base_version) + ")");
    }
  }
  return Status::Ok();
}

// Writes accepted chunks and records the new version, and the block sums when `base` (base
// verification's findings) is given; null: verification is off and no block sums are kept.
Status write_staged(const format::Header& h, const format::Footer& ft, std::vector<Staged>& staged,
                    std::span<void* const> targets, ReceiverState& state, DeviceOps* dev,
                    const std::vector<uint8_t>& on_dev, int threads, BaseCheck* base) {
  // Host writes cannot fail. Device writes can (a lost device): then the buffer is in an unknown
  // state, which the error says, and the receiver's version is dropped so that it gets resynchronised.
  std::vector<Status> werrs(staged.size());
  parallel_for(staged.size(), threads, [&](size_t i, int) {
    const Staged& sg = staged[i];
    const uint32_t es = h.tensors[sg.h.tensor].elem_size;
    uint8_t* base = static_cast<uint8_t*>(targets[sg.h.tensor]) + sg.h.elem_begin * es;
    if (on_dev[sg.h.tensor]) {
      int e = sg.dense ? dev->copy(base, sg.dense, size_t(sg.h.elem_count) * es)
                       : dev->scatter(base, sg.pos.data(), sg.pos.size(), es, sg.vals.data());
      werrs[i] = device_error(dev, e, "writing to the device buffer");
    } else if (sg.dense) {
      memcpy(base, sg.dense, size_t(sg.h.elem_count) * es);
    } else {
      scatter(base, sg.pos.data(), sg.pos.size(), es, sg.vals.data());
    }
  });
  for (auto& e : werrs) {
    if (!e.ok()) {
      state = {};
      return std::move(e).context("applying version " + std::to_string(h.new_version) +
                                  " (the device buffer may be partly written; it will be resynchronised)");
    }
  }
  state.version = h.new_version;
  state.digests = ft.new_digests;
  if (base) refresh_block_sums(h, staged, targets, dev, on_dev, std::move(base->sums), threads, state);
  else state.block_sums.clear();
  return Status::Ok();
}

std::vector<uint8_t> device_mask(DeviceOps* dev, std::span<void* const> targets) {
  std::vector<uint8_t> m(targets.size(), 0);
  for (size_t t = 0; t < targets.size(); ++t) m[t] = is_device(dev, targets[t]);
  return m;
}

}  // namespace detail

using namespace detail;

Status apply_checkpoint(std::span<const uint8_t> checkpoint, std::span<void* const> targets,
                        std::span<const TensorSpec> layout, ReceiverState& state, const ApplyOptions& opt,
                        ApplyStats* stats) {
  double wall0 = now_s();
  SPARROW_ASSIGN_OR_RETURN(format::CheckpointView cv, format::parse_checkpoint(checkpoint));
  const format::Header& h = cv.header;
  const int threads = opt.threads > 0 ? opt.threads : kernel_threads();
  DeviceOps* dev = device_ops();
  const std::vector<uint8_t> on_dev = device_mask(dev, targets);
  SPARROW_RETURN_IF_ERROR(check_receiver(h, targets, layout, state));
  const bool verify = opt.verify_base && !h.full();
  BaseCheck base;
  if (verify) {
    base = verify_base_contents(h, targets, state, dev, on_dev, threads);
    SPARROW_RETURN_IF_ERROR(base_verdict(h, base));
  }
  const size_t nc = cv.chunks.size();
  std::vector<Staged> staged(nc);
  std::vector<Status> errs(nc);
  std::vector<StageScratch> scratch(threads);
  double t_dec0 = now_s();
  parallel_for(nc, threads, [&](size_t i, int w) {
    errs[i] = stage_chunk_at(h, cv.chunks[i], targets, dev, on_dev, scratch[w], staged[i]);
  });
  for (size_t i = 0; i < nc; ++i)
    if (!errs[i].ok()) return chunk_context(std::move(errs[i]), h, cv.chunks[i].h, i);
  double t_wr0 = now_s();
  SPARROW_RETURN_IF_ERROR(accept(h, cv.footer, staged, state));
  SPARROW_RETURN_IF_ERROR(write_staged(h, cv.footer, staged, targets, state, dev, on_dev, threads,
                                       opt.verify_base ? &base : nullptr));
  if (stats) {
    stats->verify_seconds = base.seconds;
    stats->chunks = nc;
    stats->changes = 0;
    for (auto& c : cv.chunks) stats->changes += c.h.change_count;
    stats->wire_bytes = checkpoint.size();
    double end = now_s();
    stats->decode_seconds = t_wr0 - t_dec0;
    stats->write_seconds = end - t_wr0;
    stats->wall_seconds = end - wall0;
  }
  return Status::Ok();
}

// ---- ApplySession -------------------------------------------------------------------------------------

ApplySession::ApplySession(std::span<void* const> targets, std::span<const TensorSpec> layout, ReceiverState& state,
                           const ApplyOptions& opt)
    : im_(std::make_unique<Impl>()) {
  im_->targets.assign(targets.begin(), targets.end());
  im_->layout.assign(layout.begin(), layout.end());
  im_->state = &state;
  im_->opt = opt;
  im_->threads = opt.threads > 0 ? opt.threads : kernel_threads();
  im_->dev = device_ops();
  im_->on_dev = device_mask(im_->dev, targets);
}

ApplySession::~ApplySession() = default;

Status ApplySession::begin(std::span<const uint8_t> header_frame) {
  if (im_->have_header) return CorruptData("checkpoint header received twice");
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(im_->h, format::parse_header(header_frame, &used));
  if (used != header_frame.size()) return CorruptData("trailing bytes after the checkpoint header");
  im_->wire += header_frame.size();
  SPARROW_RETURN_IF_ERROR(check_receiver(im_->h, im_->targets, im_->layout, *im_->state));
  im_->have_header = true;
  if (im_->opt.verify_base && !im_->h.full()) {
    Impl* im = im_.get();
    im->verifier = affinity::thread([im] {
      im->base = verify_base_contents(im->h, im->targets, *im->state, im->dev, im->on_dev, im->threads);
    });
  }
  return Status::Ok();
}

Status ApplySession::add_chunk(std::shared_ptr<const std::vector<uint8_t>> frame) {
  std::span<const uint8_t> all(*frame);
  return add_chunk(std::move(frame), all);
}

Status ApplySession::add_chunk(std::shared_ptr<const std::vector<uint8_t>> owner, std::span<const uint8_t> frame) {
  // Callable from several threads at once (between begin and prepare): the header, targets and
  // receiver state are only read here; what is shared and written is under im_->mu.
  if (!im_->have_header) return CorruptData("checkpoint chunk before its header");
  const double t0 = now_s();
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(format::ChunkView c, format::parse_chunk(frame, im_->h, &used));
  if (used != frame.size()) return CorruptData("trailing bytes after a checkpoint chunk");
  size_t index;
  {
    std::lock_guard<std::mutex> lk(im_->mu);
    if (!im_->seen.insert({c.h.tensor, c.h.elem_begin}).second)
      return CorruptData("chunk of tensor " + std::to_string(c.h.tensor) + " at element " + std::to_string(c.h.elem_begin) +
                         " received twice");
    index = im_->seen.size() - 1;
  }
  thread_local StageScratch scratch;
  Staged sg;
  Status e = stage_chunk_at(im_->h, c, im_->targets, im_->dev, im_->on_dev, scratch, sg);
  if (!e.ok()) return chunk_context(std::move(e), im_->h, c.h, index);
  std::lock_guard<std::mutex> lk(im_->mu);
  im_->staged.push_back(std::move(sg));
  if (im_->frames.empty() || im_->frames.back() != owner) im_->frames.push_back(std::move(owner));
  im_->wire += used;
  im_->changes += c.h.change_count;
  im_->decode_s += now_s() - t0;
  return Status::Ok();
}

Status ApplySession::prepare(std::span<const uint8_t> footer_frame) {
  if (!im_->have_header) return CorruptData("checkpoint footer without a header");
  if (im_->prepared) return CorruptData("checkpoint footer received twice");
  const double t0 = now_s();
  size_t used = 0;
  SPARROW_ASSIGN_OR_RETURN(im_->footer, format::parse_footer(footer_frame, im_->h, &used));
  if (used != footer_frame.size()) return CorruptData("trailing bytes after the checkpoint footer");
  im_->wire += used;
  if (im_->footer.chunk_count != im_->staged.size())
    return CorruptData("footer counts " + std::to_string(im_->footer.chunk_count) + " chunks, received " +
                       std::to_string(im_->staged.size()));
  if (im_->h.full()) {
    uint64_t blocks = 0;
    for (uint32_t t = 0; t < im_->h.tensors.size(); ++t) blocks += im_->h.blocks(t);
    if (blocks != im_->staged.size()) return CorruptData("full snapshot is missing chunks");
  }
  if (im_->verifier.joinable()) {
    im_->verifier.join();
    SPARROW_RETURN_IF_ERROR(base_verdict(im_->h, im_->base));
  }
  SPARROW_RETURN_IF_ERROR(accept(im_->h, im_->footer, im_->staged, *im_->state));
  im_->prepare_s = now_s() - t0;
  im_->prepared = true;
  return Status::Ok();
}

Status ApplySession::commit(ApplyStats* stats) {
  if (!im_->prepared) return Error(Code::kInvalidUsage, "commit of a checkpoint that was not prepared");
  im_->prepared = false;
  const double t0 = now_s();
  SPARROW_RETURN_IF_ERROR(write_staged(im_->h, im_->footer, im_->staged, im_->targets, *im_->state, im_->dev,
                                       im_->on_dev, im_->threads, im_->opt.verify_base ? &im_->base : nullptr));
  if (stats) {
    stats->chunks = im_->staged.size();
    stats->changes = im_->changes;
    stats->wire_bytes = im_->wire;
    stats->decode_seconds = im_->decode_s;
    stats->write_seconds = now_s() - t0 + im_->prepare_s;
    stats->wall_seconds = stats->decode_seconds + stats->write_seconds;
    stats->verify_seconds = im_->base.seconds;
  }
  return Status::Ok();
}

Status ApplySession::finish(std::span<const uint8_t> footer_frame, ApplyStats* stats) {
  SPARROW_RETURN_IF_ERROR(prepare(footer_frame));
  return commit(stats);
}

size_t ApplySession::staged_bytes() const {
  size_t n = 0;
  for (auto& sg : im_->staged)
    n += sg.dense ? size_t(sg.h.elem_count) * im_->h.tensors[sg.h.tensor].elem_size
                  : sg.pos.size() * sizeof(uint32_t) + sg.vals.size();
  return n;
}

}  // namespace sparrow::kernels::cpu
