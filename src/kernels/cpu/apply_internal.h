// Pieces of the receiver side (apply.cpp) shared with the chain composition (chain.cpp). Internal:
// not part of the kernels' interface.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <span>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "format/checkpoint.h"
#include "kernels/cpu/delta.h"
#include "kernels/device.h"

namespace sparrow::kernels::cpu::detail {

using sparrow::now_s;

// What a verified chunk will write: positions and new values, or the new bytes of the whole range.
struct Staged {
  std::vector<uint32_t> pos;
  std::vector<uint8_t> vals;
  const uint8_t* dense = nullptr;  // dense chunks: the new bytes of the whole range
  uint64_t dig = 0;                // digest change of the chunk's range
  format::ChunkHeader h;
  uint64_t sum_delta = 0;          // sparse chunks: the change of the block's sum (format/block_sum.h)
};

struct StageScratch {
  std::vector<uint8_t> oldv, zs, base;  // base: a device chunk's old bytes
};

// What base verification found: per tensor, the first block whose contents differ from the committed
// version (-1: none), and the checksums of every block as the targets hold them now.
struct BaseCheck {
  Status status;  // a failure to read (device), not a mismatch
  std::vector<int64_t> first_bad;
  std::vector<std::vector<uint64_t>> sums;
  double seconds = 0;
};

std::vector<uint8_t> device_mask(DeviceOps* dev, std::span<void* const> targets);
// The checks that need only the header: layout, base version and digests.
Status check_receiver(const format::Header& h, std::span<void* const> targets, std::span<const TensorSpec> layout,
                      const ReceiverState& state);
// Reads block `b` of tensor t of the targets as host bytes (device blocks are copied into `scratch`).
Result<const uint8_t*> host_block(const format::Header& h, std::span<void* const> targets, DeviceOps* dev,
                                  const std::vector<uint8_t>& on_dev, uint32_t t, uint64_t b, std::vector<uint8_t>& scratch,
                                  size_t* bytes);
BaseCheck verify_base_contents(const format::Header& h, std::span<void* const> targets, const ReceiverState& st,
                               DeviceOps* dev, const std::vector<uint8_t>& on_dev, int threads);
Status base_verdict(const format::Header& h, const BaseCheck& bc);
// Decodes and verifies one chunk against `base`, the old contents of the chunk's range (device memory
// when base_on_dev); where `over` is given (a sparse set of positions and values in the same range,
// e.g. earlier steps of a chain), its values replace the old ones at its positions. Writes nothing.
// A dense chunk takes no `over` (the caller passes the range's composed bytes as `base` instead).
Status stage_chunk(const format::Header& h, const format::ChunkView& c, const uint8_t* base, bool base_on_dev,
                   DeviceOps* dev, StageScratch& s, Staged& sg, const Staged* over = nullptr);
Status chunk_context(Status e, const format::Header& h, const format::ChunkHeader& c, size_t i);
// The acceptance predicate: the digests the staged chunks lead to must be the footer's.
Status accept(const format::Header& h, const format::Footer& ft, const std::vector<Staged>& staged,
              const ReceiverState& state);
// Writes accepted chunks and records the new version (and the block sums when `base` is given).
Status write_staged(const format::Header& h, const format::Footer& ft, std::vector<Staged>& staged,
                    std::span<void* const> targets, ReceiverState& state, DeviceOps* dev,
                    const std::vector<uint8_t>& on_dev, int threads, BaseCheck* base);

}  // namespace sparrow::kernels::cpu::detail

namespace sparrow::kernels::cpu {

struct ApplySession::Impl {
  using Staged = detail::Staged;
  using StageScratch = detail::StageScratch;
  using BaseCheck = detail::BaseCheck;
  std::vector<void*> targets;
  std::vector<TensorSpec> layout;
  ReceiverState* state;
  ApplyOptions opt;
  int threads = 1;
  DeviceOps* dev = nullptr;
  std::vector<uint8_t> on_dev;
  bool have_header = false;
  format::Header h;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> frames;  // keeps the staged bytes alive
  std::vector<Staged> staged;
  std::mutex mu;  // add_chunk from several threads: guards seen, staged, frames and the counts
  std::set<std::pair<uint32_t, uint64_t>> seen;
  uint64_t wire = 0, changes = 0;
  double decode_s = 0;
  // Base verification runs on its own thread from begin() to prepare(), overlapped with the transfer.
  std::thread verifier;
  BaseCheck base;
  format::Footer footer;
  bool prepared = false;
  double prepare_s = 0;
  ~Impl() {
    if (verifier.joinable()) verifier.join();
  }
};

}  // namespace sparrow::kernels::cpu
