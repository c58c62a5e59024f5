// Sparse delta checkpoints of a set of tensors on the CPU: the root's encoder (shadow + extraction +
// codec choice) and the receiver's apply (verify everything, then write).
//
// Threading: one DeltaEncoder / ReceiverState per buffer set, used by one thread at a time; both spread
// their chunks over SPARROW_THREADS worker threads internally.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/big_alloc.h"
#include "core/status.h"
#include "format/checkpoint.h"
#include "kernels/cpu/extract.h"
#include "kernels/device.h"

namespace sparrow::kernels::cpu {

struct TensorSpec {
  std::string name;
  uint8_t dtype = 9;  // sparrowDataType_t; bfloat16 by default
  uint64_t count = 0;
  uint32_t elem_size() const { return format::dtype_size(dtype); }
  uint64_t bytes() const { return count * elem_size(); }
};

// SPARROW_CHUNK_ELEMS: elements per chunk (the unit of extraction, encoding, verification).
uint32_t default_chunk_elems();

// The content digest (format/digest.h) of each tensor of host buffers `bufs` laid out as `layout`
// (one read of them, on `threads` threads; 0: SPARROW_THREADS / all cores).
std::vector<uint64_t> content_digests(const std::vector<TensorSpec>& layout, std::span<const void* const> bufs,
                                      int threads = 0);

struct EncodeOptions {
  uint32_t chunk_elems = 0;     // 0: SPARROW_CHUNK_ELEMS
  int threads = 0;              // 0: SPARROW_THREADS / all cores
  int zstd_level = 1;
  bool paper_format = false;    // SparrowRL's format only: leb128 gaps + overwritten values
  bool compress_dense = true;   // try zstd on byte planes for dense (raw) chunks
  bool try_xor = true;          // also try xor_zstd (sub_zstd and overwrite(_zstd) are always tried)
  // A chunk with more than twice this many changes picks its value codec on its first
  // `value_sample` values and compresses the rest only with that one (0: compare on every value).
  size_t value_sample = 1024;
  // Such a chunk picks by estimated time at this link rate (bytes/s): its bytes on the link plus the
  // CPU time of its encoding and decoding (format::ValueChoiceOptions::link_Bps); 0: by bytes alone.
  double link_Bps = 0;
  Isa isa = Isa::kScalar;       // set by the constructor of EncodeOptions users via best_isa()
  EncodeOptions() : isa(best_isa()) {}
};

struct EncodeStats {
  uint64_t elements = 0, dense_bytes = 0, wire_bytes = 0, changes = 0;
  uint64_t chunks = 0, dense_chunks = 0, index_bytes = 0, value_bytes = 0;
  uint64_t index_codec_chunks[format::kNumIndexCodecs] = {};
  uint64_t value_codec_chunks[format::kNumValueCodecs] = {};
  // The same changes in SparrowRL's format (leb128 gaps + raw values), with the same framing.
  uint64_t leb128_overwrite_bytes = 0;
  double index_entropy_bits = 0;  // sum over sparse chunks of log2 C(n, k)
  uint64_t sparse_index_bytes = 0, sparse_changes = 0;  // over chunks that carry an index
  double extract_seconds = 0;     // summed over threads: the compare/refresh pass alone
  double encode_seconds = 0;      // summed over threads: codecs and framing
  double wall_seconds = 0;
  double density() const { return elements ? double(changes) / double(elements) : 0.0; }
};

// Buffers may be host or device memory (kernels::device_ops() decides, per buffer): for a device buffer
// the shadow lives on the device (or in pinned host memory, SPARROW_GPU_SHADOW=host), extraction runs
// there chunk by chunk, and only the changes come back to the host for coding.
class DeltaEncoder {
 public:
  explicit DeltaEncoder(std::vector<TensorSpec> tensors);
  ~DeltaEncoder();
  DeltaEncoder(const DeltaEncoder&) = delete;
  DeltaEncoder& operator=(const DeltaEncoder&) = delete;

  // Produces the next version from `current` (one pointer per tensor, in the constructor's order).
  // The first call, and the first after reset(), is a full snapshot; later calls are deltas against
  // the shadow (the last version produced), which they refresh. On failure the encoder resets, so the
  // next call is a full snapshot again.
  Result<std::vector<uint8_t>> encode(std::span<const void* const> current, const EncodeOptions& opt = {},
                                      EncodeStats* stats = nullptr);
  // Streaming form for the collectives: `on_header` gets the header before any chunk exists,
  // `on_chunk` gets each chunk frame as soon as it is encoded (from worker threads, in any order);
  // the footer is returned. Same state transitions as encode().
  using FrameFn = std::function<void(std::vector<uint8_t>&& frame)>;
  Result<std::vector<uint8_t>> encode_stream(std::span<const void* const> current, const EncodeOptions& opt,
                                             EncodeStats* stats, const FrameFn& on_header, const FrameFn& on_chunk);
  // A full snapshot of `current` labelled with the current version (for a receiver that needs a
  // resync); the encoder's state is unchanged. `current` must hold that version.
  Result<std::vector<uint8_t>> snapshot(std::span<const void* const> current, const EncodeOptions& opt = {}) const;
  // The same without an encoder: a full snapshot of `current` labelled `version` (a receiver that
  // holds `version`, committed and verified, seeds another with it).
  static Result<std::vector<uint8_t>> snapshot_at(std::vector<TensorSpec> tensors, std::span<const void* const> current,
                                                  uint64_t version, const EncodeOptions& opt = {});
  void reset();
  // Takes `base` (host buffers) as the last version produced, numbered `version`, without encoding
  // it: the next encode() is the delta from it (how a step between two files on disk is made).
  Status adopt(std::span<const void* const> base, uint64_t version, int threads = 0);
  // adopt() without the copy, for one encode (sparrow-ckpt diff): `base` is read, never written, and
  // must stay valid and unchanged until the next encode(), which computes the base digests in the
  // same pass as the extraction (non-streaming only). Afterwards the encoder holds no state.
  Status adopt_view(std::span<const void* const> base, uint64_t version);
  bool has_state() const { return have_shadow_; }
  uint64_t version() const { return version_; }
  const std::vector<uint64_t>& digests() const { return digests_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

 private:
  Status encode_impl(std::span<const void* const> current, const EncodeOptions& opt, bool full, EncodeStats* st,
                     std::vector<uint8_t>& out, const FrameFn* on_header = nullptr, const FrameFn* on_chunk = nullptr);
  struct Pass;  // one encode pass (encode.cpp)
  friend struct Pass;
  std::vector<TensorSpec> tensors_;
  void free_device_shadow();
  Status start_adopt(std::span<const void* const> base, uint64_t version);
  std::vector<BigBytes> shadow_;               // host buffers
  std::vector<const uint8_t*> borrowed_;       // adopt_view: the caller's base, until the next encode
  std::vector<void*> dshadow_;                 // device buffers (null for host ones)
  bool dshadow_host_ = false;                  // dshadow_ is pinned host memory
  DeviceOps* dev_ = nullptr;                   // backend that owns dshadow_ and dchanges_
  struct PinnedChanges {                       // host room for a device tensor's changes of one step
    void* p = nullptr;
    uint64_t capacity = 0;                     // changes
  };
  std::vector<PinnedChanges> dchanges_;        // per tensor (empty for host ones), grown on demand
  bool keep_shadow_ = true;                    // false for snapshot(): encode without keeping state
  std::vector<uint64_t> digests_;
  uint64_t version_ = 0;
  bool have_shadow_ = false;
};

// What a receiver knows about its buffers: the version they hold, their content digests, and a
// checksum of every block of the committed contents (what base verification compares the buffers
// against, so that a write by the user between two steps is found).
struct ReceiverState {
  uint64_t version = 0;  // 0: never received
  std::vector<uint64_t> digests;
  // Linear sum (format/block_sum.h) of each block of `block_elems` elements of each tensor, as
  // committed. Empty or of another chunking: unknown, and verification recomputes the full content
  // digests instead (slower).
  uint32_t block_elems = 0;
  std::vector<std::vector<uint64_t>> block_sums;
};

// SPARROW_VERIFY_BASE: whether receivers check that their buffers still hold the base version.
bool default_verify_base();

struct ApplyOptions {
  int threads = 0;  // 0: SPARROW_THREADS / all cores
  // Check, before writing, that every target still holds the base version bit for bit (any write by
  // the user since the last step is found: the step is refused with kVersionMismatch, targets
  // untouched). Off: only the remembered digests are compared, and a user's write to an element the
  // step does not change goes unnoticed. Costs one read of the targets, overlapped with the transfer
  // by ApplySession, and one checksum pass over the blocks a step writes.
  bool verify_base = default_verify_base();
};

struct ApplyStats {
  uint64_t chunks = 0, changes = 0, wire_bytes = 0;
  double decode_seconds = 0, write_seconds = 0, wall_seconds = 0;
  double verify_seconds = 0;  // base verification (overlapped with decoding in ApplySession)
};

// Applies a checkpoint to `targets` (one pointer per tensor of `layout`). Verifies, in order: every
// frame checksum and the structure; that the layout matches (kInvalidUsage); that the receiver holds
// the base version and base digests, and (verify_base) that the targets still hold those contents bit
// for bit (kVersionMismatch, naming the tensors written to); that every chunk decodes; that the
// resulting digests equal the footer's. Only then does it write. Targets may be device buffers (old values are
// gathered from and new ones scattered to the device). On any error the targets and `state` are
// untouched. A full snapshot applies whatever the receiver holds.
Status apply_checkpoint(std::span<const uint8_t> checkpoint, std::span<void* const> targets,
                        std::span<const TensorSpec> layout, ReceiverState& state, const ApplyOptions& opt = {},
                        ApplyStats* stats = nullptr);

// apply_checkpoint for a checkpoint that arrives frame by frame (the collectives' receivers): begin()
// checks the header against the receiver (layout, base version, base digests); add_chunk() verifies
// and decodes one chunk as soon as it arrives, in any order, reading the old values it needs from the
// targets; finish() checks the footer (chunk count, coverage, the resulting digests) and only then
// writes. Same guarantee as apply_checkpoint: on any error nothing was written and `state` is
// unchanged. Decoding while later chunks are still on the wire leaves only the writes after the last
// one. The targets must not change between begin() and finish(). add_chunk() may be called from
// several threads at once (chunks decode in parallel); the other calls one thread at a time, with
// begin() before and prepare()/finish() after every add_chunk().
class ApplySession {
 public:
  ApplySession(std::span<void* const> targets, std::span<const TensorSpec> layout, ReceiverState& state,
               const ApplyOptions& opt = {});
  ~ApplySession();
  Status begin(std::span<const uint8_t> header_frame);
  Status add_chunk(std::shared_ptr<const std::vector<uint8_t>> frame);  // kept until finish()
  // A chunk frame inside a larger buffer (a whole checkpoint): `owner` is kept until finish().
  Status add_chunk(std::shared_ptr<const std::vector<uint8_t>> owner, std::span<const uint8_t> frame);
  Status finish(std::span<const uint8_t> footer_frame, ApplyStats* stats = nullptr);  // prepare + commit
  // finish() in two steps, for staging: prepare() makes every check (footer, base verification, the
  // resulting digests) and writes nothing; commit() then only writes (time proportional to the
  // changes). Between the two the targets must not change; the state is updated by commit().
  Status prepare(std::span<const uint8_t> footer_frame);
  Status commit(ApplyStats* stats = nullptr);
  // Instead of begin/add_chunk/prepare: a chain of consecutive deltas (each a whole checkpoint, chunks
  // in any order; the first applies to the version the receiver holds, each next one to the version
  // the one before leads to), composed into one change set and checked as prepare() checks one
  // checkpoint: every frame, the continuity of versions and digests, base verification of the first,
  // and every link's resulting digests. commit() then writes the last version once: the targets hold
  // either the version they held or the last one, never one in between. `owners` keep the bytes alive.
  Status prepare_chain(std::span<const std::span<const uint8_t>> links,
                       std::vector<std::shared_ptr<const std::vector<uint8_t>>> owners);
  // The base version of the checkpoint whose header arrived (0 before): tells a receiver that is behind
  // (it holds an older version) from one whose buffer changed.
  uint64_t base_version() const;
  // Memory held for the staged chunks (positions and values of sparse ones, frames of dense ones).
  size_t staged_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> im_;
};

}  // namespace sparrow::kernels::cpu
